package allocator_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/netipam/netipam/allocator"
)

// The zero DryRun is the dry run of the zero Allocator, a closed one:
// every question is answered with ErrClosed, as that allocator's own
// DryRun answers it.
func TestTheZeroDryRunIsClosed(t *testing.T) {
	ctx := context.Background()
	var d allocator.DryRun
	for name, call := range map[string]func() error{
		"Allocate":     func() error { return d.Allocate(ctx, ip("10.0.0.1"), svc("x")) },
		"AllocateNext": func() error { _, err := d.AllocateNext(ctx, 4, svc("x")); return err },
		"CreateCIDR":   func() error { return d.CreateCIDR(ctx, "c", pfx("10.0.0.0/24")) },
		"DeleteCIDR":   func() error { _, err := d.DeleteCIDR(ctx, "c"); return err },
		"UpdateCIDR":   func() error { _, err := d.UpdateCIDR(ctx, "c", pfx("10.0.0.0/24")); return err },
		"AllocateDualStack": func() error {
			_, _, err := d.AllocateDualStack(ctx, svc("x"), netip.Addr{}, netip.Addr{})
			return err
		},
		"EnsureDualStack": func() error {
			_, _, err := d.EnsureDualStack(ctx, svc("x"))
			return err
		},
	} {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s of the zero DryRun panicked: %v", name, p)
				}
			}()
			if err := call(); !errors.Is(err, allocator.ErrClosed) {
				t.Errorf("%s of the zero DryRun: %v, want ErrClosed", name, err)
			}
		}()
	}
}
