package allocator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/memory"
)

// cidrStates tells the CIDRs names as st holds them: prefixes and state,
// or "-" for one it does not hold.
func cidrStates(t *testing.T, st store.Store, names ...string) string {
	t.Helper()
	var out []string
	for _, n := range names {
		c, err := st.GetCIDR(context.Background(), n)
		switch {
		case errors.Is(err, store.ErrNotFound):
			out = append(out, n+" -")
		case err != nil:
			t.Fatal(err)
		default:
			out = append(out, fmt.Sprintf("%s %v terminating=%v", n, c.Prefixes, c.Terminating))
		}
	}
	return strings.Join(out, "; ")
}

// A CIDR call whose write the store took has succeeded, even when its
// context ends while it waits for a lagging watch to show the write: a
// caller told "failed" (an error other than store.ErrOutcomeUnknown)
// takes the store as it was. CreateCIDR, UpdateCIDR and EnsureDefault
// then return nil; DeleteCIDR, whose mark stands but whose removal was not
// decided, a *allocator.DeletionPendingError, and the allocator removes
// the CIDR in the background once the watch catches up.
func TestACIDRCallWhoseWriteStandsSucceedsWhenItsContextEnds(t *testing.T) {
	for _, tc := range []struct {
		name      string
		call      func(ctx context.Context, a *allocator.Allocator) error
		wantErr   func(error) bool
		want      string // x, new, kubernetes just after the call
		wantLater string // the same once the watch has caught up
	}{
		{
			name: "CreateCIDR",
			call: func(ctx context.Context, a *allocator.Allocator) error {
				_, err := a.CreateCIDR(ctx, "new", pfx("10.1.0.0/24"))
				return err
			},
			want: "x [10.0.0.0/24] terminating=false; new [10.1.0.0/24] terminating=false; kubernetes -",
		},
		{
			name: "UpdateCIDR",
			call: func(ctx context.Context, a *allocator.Allocator) error {
				_, err := a.UpdateCIDR(ctx, "x", pfx("10.0.0.0/24"), pfx("fd00::/120"))
				return err
			},
			want: "x [10.0.0.0/24 fd00::/120] terminating=false; new -; kubernetes -",
		},
		{
			name: "EnsureDefault",
			call: func(ctx context.Context, a *allocator.Allocator) error {
				_, err := a.EnsureDefault(ctx, pfx("10.96.0.0/28"))
				return err
			},
			want: "x [10.0.0.0/24] terminating=false; new -; kubernetes [10.96.0.0/28] terminating=false",
		},
		{
			name: "DeleteCIDR",
			call: func(ctx context.Context, a *allocator.Allocator) error { return a.DeleteCIDR(ctx, "x") },
			wantErr: func(err error) bool {
				var pending *allocator.DeletionPendingError
				return errors.As(err, &pending) && pending.CIDR == "x" &&
					errors.Is(err, allocator.ErrTerminating) && errors.Is(err, context.DeadlineExceeded)
			},
			want: "x [10.0.0.0/24] terminating=true; new -; kubernetes -",
			// Nothing holds x: once the watch shows the mark, the
			// background reconciler removes it.
			wantLater: "x -; new -; kubernetes -",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			mem := memory.New()
			st := &laggingStore{Store: mem}
			a, err := allocator.New(ctx, st)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { a.Close() })
			if _, err := a.CreateCIDR(ctx, "x", pfx("10.0.0.0/24")); err != nil {
				t.Fatal(err)
			}
			st.Hold()
			cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			err = tc.call(cctx, a)
			cancel()
			if ok := (tc.wantErr == nil && err == nil) || (tc.wantErr != nil && tc.wantErr(err)); !ok {
				t.Errorf("%s with its ctx ended while the watch lagged: %v", tc.name, err)
			}
			if got := cidrStates(t, mem, "x", "new", "kubernetes"); got != tc.want {
				t.Errorf("store after %s: %s, want %s", tc.name, got, tc.want)
			}
			st.Flush()
			if tc.wantLater == "" {
				return
			}
			deadline := time.Now().Add(10 * time.Second)
			for cidrStates(t, mem, "x", "new", "kubernetes") != tc.wantLater {
				if time.Now().After(deadline) {
					t.Fatalf("10 s after the watch caught up: %s, want %s", cidrStates(t, mem, "x", "new", "kubernetes"), tc.wantLater)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}
