package finalizer_test

import (
	"context"
	"errors"
	"iter"
	"testing"

	"go4.org/netipx"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/finalizer"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/memory"
)

// noPanic runs f, failing the test (not the binary) if it panics, so that
// every case reports.
func noPanic(t *testing.T, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("panicked: %v", r)
		}
	}()
	f()
}

// A decision that cannot see the allocated addresses keeps the CIDR,
// whatever covers it: an address it cannot see may be one only the CIDR
// holds.
func TestADecisionThatCannotSeeTheAddressesKeepsTheCIDR(t *testing.T) {
	target := cidr("x", 5, true, "10.0.0.0/24")
	nilSeq := func(netipx.IPRange) iter.Seq[netipx.IPRange] { return nil }
	for _, tc := range []struct {
		name   string
		others []cidrset.CIDR
		used   func(netipx.IPRange) iter.Seq[netipx.IPRange]
	}{
		{"no used, nothing covers", nil, nil},
		{"no used, a live CIDR covers", []cidrset.CIDR{cidr("wide", 3, false, "10.0.0.0/16")}, nil},
		{"no used, a live CIDR covers part", []cidrset.CIDR{cidr("low", 3, false, "10.0.0.0/25")}, nil},
		{"used yields a nil sequence", nil, nilSeq},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d finalizer.Decision
			noPanic(t, func() { d = finalizer.Decide(target, tc.others, tc.used) })
			if d.Remove || !d.Unknown || len(d.Fences) != 0 {
				t.Fatalf("Decide = %+v, want the CIDR kept, the decision unknown", d)
			}
		})
	}
	t.Run("nil View", func(t *testing.T) {
		var d finalizer.Decision
		noPanic(t, func() { d = finalizer.DecideIn(nil, target) })
		if d.Remove || !d.Unknown {
			t.Fatalf("DecideIn(nil) = %+v, want the CIDR kept, the decision unknown", d)
		}
	})
	// Control: the same covered target with a used that answers is removed,
	// so the cases above are kept for want of the addresses alone.
	if d := finalizer.Decide(target, []cidrset.CIDR{cidr("wide", 3, false, "10.0.0.0/16")}, usedAt()); !d.Remove || d.Unknown {
		t.Fatalf("Decide with addresses = %+v, want removal", d)
	}
}

// A Reconciler missing its Store or View refuses to reconcile, as an
// invalid input, and removes nothing.
func TestAReconcilerWithoutStoreOrViewRemovesNothing(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	c, err := st.CreateCIDR(ctx, cidr("x", 0, false, "10.0.0.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	c.Terminating = true
	if _, err := st.UpdateCIDR(ctx, c); err != nil {
		t.Fatal(err)
	}
	view := indexView{x: cidrset.NewIndex(nil)} // nothing used: a full view would remove x
	for _, tc := range []struct {
		name  string
		r     finalizer.Reconciler
		field string
	}{
		{"no View", finalizer.Reconciler{Store: st}, "View"},
		{"no Store", finalizer.Reconciler{View: view}, "Store"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var res finalizer.Result
			noPanic(t, func() { res, err = tc.r.Reconcile(ctx, "x") })
			var fe *ipaddress.FieldError
			if !errors.Is(err, ipaddress.ErrInvalid) || !errors.As(err, &fe) || fe.Field != tc.field || res.Removed || res.Remove {
				t.Fatalf("Reconcile = %+v, %v; want an ipaddress.ErrInvalid for %s, nothing removed", res, err, tc.field)
			}
			if got, err := st.GetCIDR(ctx, "x"); err != nil || !got.Terminating {
				t.Fatalf("x after Reconcile: %+v, %v; want it kept, Terminating", got, err)
			}
		})
	}
	// Control: with both, the same CIDR goes.
	if res, err := (finalizer.Reconciler{Store: st, View: view}).Reconcile(ctx, "x"); err != nil || !res.Removed {
		t.Fatalf("Reconcile with both = %+v, %v; want removed", res, err)
	}
	if _, err := st.GetCIDR(ctx, "x"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("x after the full Reconcile: %v, want ErrNotFound", err)
	}
}
