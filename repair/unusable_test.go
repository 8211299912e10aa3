package repair_test

import (
	"context"
	"errors"
	"testing"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/repair"
)

// A Repairer missing a field is refused with an *ipaddress.FieldError
// naming it.
func TestARepairerWithoutAllocatorOrConsumersIsInvalid(t *testing.T) {
	e := newEnv(t, map[string][]string{"a": {"10.0.0.0/24"}})
	for field, r := range map[string]*repair.Repairer{
		"Allocator": {Consumers: repair.NewStatic()},
		"Consumers": {Allocator: e.a},
	} {
		_, err := r.Run(context.Background())
		var fe *ipaddress.FieldError
		if !errors.As(err, &fe) || fe.Field != field || !errors.Is(err, ipaddress.ErrInvalid) {
			t.Errorf("Run without %s: %v, want an *ipaddress.FieldError for %q", field, err, field)
		}
	}
}

// A pass over an allocator that is closed, the zero Allocator included
// (a closed one with no store), is refused with ErrClosed, and changes
// nothing.
func TestAPassOverAClosedAllocatorFailsWithErrClosed(t *testing.T) {
	e := newEnv(t, map[string][]string{"a": {"10.0.0.0/24"}})
	e.allocate("10.0.0.5", svc("gone"))
	closed, err := allocator.New(context.Background(), e.st)
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	for name, a := range map[string]*allocator.Allocator{"zero": {}, "closed": closed} {
		r := &repair.Repairer{Allocator: a, Consumers: repair.NewStatic(consumer(svc("b"), "10.0.0.5"), consumer(svc("c"), "10.0.0.6")), LeakGrace: -1}
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s allocator: Run panicked: %v", name, p)
				}
			}()
			if _, err := r.Run(context.Background()); !errors.Is(err, allocator.ErrClosed) {
				t.Errorf("%s allocator: Run: %v, want ErrClosed", name, err)
			}
		}()
	}
	if rec, ok := e.record("10.0.0.5"); !ok || rec.Parent != svc("gone") {
		t.Errorf("10.0.0.5 after the passes: %v (held %v), want still held by services/default/gone", rec, ok)
	}
	if _, ok := e.record("10.0.0.6"); ok {
		t.Error("10.0.0.6 was given a record by a pass over a closed allocator")
	}
}
