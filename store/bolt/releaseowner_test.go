package bolt_test

import (
	"context"
	"net/netip"
	"slices"
	"strconv"
	"testing"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/bolt"
)

// batching is the bolt store as ReleaseOwner meets it: a
// store.RecordsDeleter, which runs then, once, after the next AddressesOf
// (as another allocator sharing the file could act), and refuses batches
// of more than most records, as a store with a lower limit than the
// allocator's batches would.
type batching struct {
	*bolt.Store
	then    func()
	most    int
	batches int // DeleteRecords calls that deleted
}

func (s *batching) AddressesOf(ctx context.Context, owner ipaddress.ParentRef) ([]ipaddress.IPAddress, error) {
	recs, err := s.Store.AddressesOf(ctx, owner)
	if f := s.then; f != nil {
		s.then = nil
		f()
	}
	return recs, err
}

func (s *batching) DeleteRecords(ctx context.Context, recs []ipaddress.IPAddress) (int64, error) {
	if len(recs) > s.most {
		return 0, &ipaddress.FieldError{Field: "records", Value: strconv.Itoa(len(recs)), Detail: "more than this store deletes at once"}
	}
	rev, err := s.Store.DeleteRecords(ctx, recs)
	if err == nil {
		s.batches++
	}
	return rev, err
}

// ReleaseOwner over a store.RecordsDeleter releases the owner's records
// in one write; an address it listed that another allocator released and
// gave to another owner before that write stays that owner's, and the
// others are released one by one (uniqueness, as over any store); a batch
// the store refuses as too large is released one by one too.
func TestReleaseOwnerInOneWriteLeavesAnAddressReallocatedSinceItsListing(t *testing.T) {
	ctx := ctxT(t)
	st := &batching{Store: mustOpen(t, tempPath(t)), most: 64}
	a, err := allocator.New(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.CreateCIDR(ctx, "pods", netip.MustParsePrefix("10.96.0.0/24")); err != nil {
		t.Fatal(err)
	}
	old, web := svc("default", "old"), svc("default", "web")
	held := []netip.Addr{ip("10.96.0.5"), ip("10.96.0.6"), ip("10.96.0.7")}
	for _, addr := range held {
		if _, err := a.Allocate(ctx, addr, old); err != nil {
			t.Fatal(err)
		}
	}

	released, err := a.ReleaseOwner(ctx, old)
	if err != nil || !slices.Equal(released, held) || st.batches != 1 {
		t.Fatalf("ReleaseOwner(old) = %v, %v in %d batches; want %v in one", released, err, st.batches, held)
	}

	for _, addr := range held {
		if _, err := a.Allocate(ctx, addr, old); err != nil {
			t.Fatal(err)
		}
	}
	moved := held[1]
	st.then = func() {
		if err := a.Release(ctx, moved); err != nil {
			t.Error(err)
		}
		if _, err := a.Allocate(ctx, moved, web); err != nil {
			t.Error(err)
		}
	}
	st.batches = 0
	released, err = a.ReleaseOwner(ctx, old)
	if want := []netip.Addr{held[0], held[2]}; err != nil || !slices.Equal(released, want) || st.batches != 0 {
		t.Fatalf("ReleaseOwner(old), %s given to web after the listing = %v, %v in %d batches; want %v, one by one", moved, released, err, st.batches, want)
	}
	if rec, err := a.Get(ctx, moved); err != nil || rec.Parent != web {
		t.Fatalf("%s, given to web after the listing: %+v, %v", moved, rec, err)
	}

	for _, addr := range []netip.Addr{held[0], held[2]} {
		if _, err := a.Allocate(ctx, addr, old); err != nil {
			t.Fatal(err)
		}
	}
	st.most = 1
	released, err = a.ReleaseOwner(ctx, old)
	if want := []netip.Addr{held[0], held[2]}; err != nil || !slices.Equal(released, want) {
		t.Fatalf("ReleaseOwner(old) over a store deleting one record at once = %v, %v; want %v", released, err, want)
	}
	if recs, err := a.AddressesOf(ctx, old); err != nil || len(recs) != 0 {
		t.Errorf("old holds %+v, %v; want none", recs, err)
	}
	var _ store.RecordsDeleter = st
}
