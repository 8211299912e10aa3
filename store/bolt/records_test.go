package bolt_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"testing"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/repair"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/bolt"
)

// batching is the bolt store as the allocator's batched writes meet it: a
// store.RecordsDeleter, which runs then, once, after the next AddressesOf
// (as another allocator sharing the file could act), refuses deletes of
// more than most records, as a store with a lower limit than the
// allocator's batches would, and counts the writes it takes.
type batching struct {
	*bolt.Store
	then     func()
	most     int
	deletes  int // DeleteRecords calls that deleted
	creates  int // CreateAddresses calls that created more than one record
	replaces int // ReplaceRecords calls that replaced
	// beforeBatch runs once, before the next create of more than one record.
	beforeBatch func()
}

func (s *batching) ReplaceRecords(ctx context.Context, recs []ipaddress.IPAddress, to []ipaddress.ParentRef) ([]ipaddress.IPAddress, error) {
	out, err := s.Store.ReplaceRecords(ctx, recs, to)
	if err == nil {
		s.replaces++
	}
	return out, err
}

func (s *batching) CreateAddresses(ctx context.Context, recs []ipaddress.IPAddress, fences ...store.Fence) ([]ipaddress.IPAddress, error) {
	if f := s.beforeBatch; f != nil && len(recs) > 1 {
		s.beforeBatch = nil
		f()
	}
	created, err := s.Store.CreateAddresses(ctx, recs, fences...)
	if err == nil && len(recs) > 1 {
		s.creates++
	}
	return created, err
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
		s.deletes++
	}
	return rev, err
}

// batchingAllocator returns a new file's store, batching up to 64 records,
// and an allocator over it serving CIDR "pods" (10.96.0.0/24), closed when
// the test ends.
func batchingAllocator(t *testing.T) (*batching, *allocator.Allocator) {
	t.Helper()
	ctx := ctxT(t)
	st := &batching{Store: mustOpen(t, tempPath(t)), most: 64}
	a, err := allocator.New(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	if _, err := a.CreateCIDR(ctx, "pods", netip.MustParsePrefix("10.96.0.0/24")); err != nil {
		t.Fatal(err)
	}
	return st, a
}

// ReleaseOwner over a store.RecordsDeleter releases the owner's records
// in one write; an address it listed that another allocator released and
// gave to another owner before that write stays that owner's, and the
// others are released one by one (uniqueness, as over any store); a batch
// the store refuses as too large is released one by one too.
func TestReleaseOwnerInOneWriteLeavesAnAddressReallocatedSinceItsListing(t *testing.T) {
	ctx := ctxT(t)
	st, a := batchingAllocator(t)
	old, web := svc("default", "old"), svc("default", "web")
	held := []netip.Addr{ip("10.96.0.5"), ip("10.96.0.6"), ip("10.96.0.7")}
	for _, addr := range held {
		if _, err := a.Allocate(ctx, addr, old); err != nil {
			t.Fatal(err)
		}
	}

	released, err := a.ReleaseOwner(ctx, old)
	if err != nil || !slices.Equal(released, held) || st.deletes != 1 {
		t.Fatalf("ReleaseOwner(old) = %v, %v in %d batches; want %v in one", released, err, st.deletes, held)
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
	st.deletes = 0
	released, err = a.ReleaseOwner(ctx, old)
	if want := []netip.Addr{held[0], held[2]}; err != nil || !slices.Equal(released, want) || st.deletes != 0 {
		t.Fatalf("ReleaseOwner(old), %s given to web after the listing = %v, %v in %d batches; want %v, one by one", moved, released, err, st.deletes, want)
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

// ReleaseRecords over a store.RecordsDeleter deletes records of many
// owners 64 in one write. A record changed after the listing sends only
// its own batch one by one, where it is ErrConflict and stays as it is
// now (uniqueness). The last records of a Terminating CIDR, released in
// a batch, let that CIDR go (SPEC §4).
func TestReleaseRecordsOfManyOwnersInBatchesOf64(t *testing.T) {
	ctx := ctxT(t)
	st, a := batchingAllocator(t)
	if _, err := a.CreateCIDR(ctx, "old", netip.MustParsePrefix("10.97.0.0/24")); err != nil {
		t.Fatal(err)
	}
	recs := allocateMany(t, a, "p")
	moved := recs[70] // of the second batch
	now := giveToWeb(t, a, moved.Addr)

	errs := a.ReleaseRecords(ctx, recs)
	for i, err := range errs {
		if i == 70 {
			if !errors.Is(err, store.ErrConflict) {
				t.Errorf("%s, given to web after the listing: %v, want ErrConflict", moved.Addr, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s of %s: %v, want it released", recs[i].Addr, recs[i].Parent, err)
		}
	}
	if st.deletes != 2 {
		t.Errorf("ReleaseRecords of 150 records, one changed, wrote %d batches; want 2 (the first and the third), the second one by one", st.deletes)
	}
	if rec, err := a.Get(ctx, moved.Addr); err != nil || rec.Parent != now.Parent || rec.Revision != now.Revision {
		t.Errorf("%s: %+v, %v; want it web's, as allocated after the listing: %+v", moved.Addr, rec, err, now)
	}
	if n, err := a.Store().ListAddresses(ctx); err != nil || len(n) != 1 {
		t.Errorf("the store holds %d records (%v) after ReleaseRecords; want web's alone", len(n), err)
	}

	// The CIDR is gone when ReleaseRecords returns: the release re-checks
	// it, not only the background reconciler, later (a process ending
	// after the call would leave it).
	var dying []ipaddress.IPAddress
	for _, addr := range []string{"10.97.0.5", "10.97.0.6"} {
		rec, err := a.Allocate(ctx, ip(addr), svc("default", "web"))
		if err != nil {
			t.Fatal(err)
		}
		dying = append(dying, rec)
	}
	if err := a.DeleteCIDR(ctx, "old"); !errors.Is(err, allocator.ErrDeletionBlocked) {
		t.Fatalf("DeleteCIDR(old) holding two addresses: %v, want ErrDeletionBlocked", err)
	}
	st.deletes = 0
	if errs := a.ReleaseRecords(ctx, dying); errs[0] != nil || errs[1] != nil || st.deletes != 1 {
		t.Fatalf("ReleaseRecords of old's two records = %v in %d batches; want both released in one", errs, st.deletes)
	}
	if c, err := st.GetCIDR(ctx, "old"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("CIDR old after its last addresses were released in a batch: %+v, %v; want it removed", c, err)
	}
}

// RestoreRecords over a store whose writes are round trips creates records
// of many owners 64 in one write, each fenced on its CIDR. An address
// allocated since the caller read it sends its write's records one by one,
// where it is ErrAllocated and stays as it is (uniqueness); an address only
// a Terminating CIDR holds is ErrTerminating, and one no CIDR holds
// ErrNotInRange, as from Restore (SPEC §3, §4).
func TestRestoreRecordsOfManyOwnersInBatchesOf64(t *testing.T) {
	ctx := ctxT(t)
	st, a := batchingAllocator(t)
	if _, err := a.CreateCIDR(ctx, "old", netip.MustParsePrefix("10.97.0.0/24")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Allocate(ctx, ip("10.97.0.5"), svc("default", "keep")); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteCIDR(ctx, "old"); !errors.Is(err, allocator.ErrDeletionBlocked) {
		t.Fatalf("DeleteCIDR(old) holding 10.97.0.5: %v, want ErrDeletionBlocked", err)
	}
	var recs []ipaddress.IPAddress
	for i := range 150 {
		recs = append(recs, manyOwners(i, "p"))
	}
	dying, outside := len(recs), len(recs)+1
	recs = append(recs,
		ipaddress.IPAddress{Addr: ip("10.97.0.9"), Parent: svc("default", "q")},
		ipaddress.IPAddress{Addr: ip("10.98.0.1"), Parent: svc("default", "r")})
	taken := 70 // of the second write
	web, err := a.Allocate(ctx, recs[taken].Addr, svc("default", "web"))
	if err != nil {
		t.Fatal(err)
	}

	errs := a.RestoreRecords(ctx, recs)
	for i, err := range errs {
		var want error
		switch i {
		case taken:
			want = allocator.ErrAllocated
		case dying:
			want = allocator.ErrTerminating
		case outside:
			want = allocator.ErrNotInRange
		}
		if (want == nil) != (err == nil) || !errors.Is(err, want) {
			t.Errorf("%s of %s: %v, want %v", recs[i].Addr, recs[i].Parent, err, want)
			continue
		}
		if want != nil {
			continue
		}
		if rec, err := a.Get(ctx, recs[i].Addr); err != nil || rec.Parent != recs[i].Parent {
			t.Errorf("%s after RestoreRecords: %+v, %v; want it %s's", recs[i].Addr, rec, err, recs[i].Parent)
		}
	}
	if st.creates != 2 {
		t.Errorf("RestoreRecords of 150 records, one taken, wrote %d batches; want 2 (the first and the third), the second one by one", st.creates)
	}
	if rec, err := a.Get(ctx, web.Addr); err != nil || rec.Parent != web.Parent || rec.Revision != web.Revision {
		t.Errorf("%s, allocated to web before: %+v, %v; want it web's as it was", web.Addr, rec, err)
	}
	if _, err := a.Get(ctx, ip("10.97.0.9")); !errors.Is(err, allocator.ErrNotFound) {
		t.Errorf("10.97.0.9, in Terminating CIDR old only: %v, want no record", err)
	}
}

// SPEC §6 with §4: a repair pass writes back lost records in one write
// fenced on their CIDR. When the CIDR is deleted after the allocator
// chose the write (nothing held it, so it goes at once), the write fails
// its fence and writes nothing: each address is then found in no CIDR
// and reported out of range, none recorded outside every CIDR.
func TestRepairWritesNoRecordIntoACIDRRemovedAfterItsBatchWasChosen(t *testing.T) {
	ctx := ctxT(t)
	st, a := batchingAllocator(t)
	if _, err := a.CreateCIDR(ctx, "other", netip.MustParsePrefix("10.97.0.0/24")); err != nil {
		t.Fatal(err)
	}
	var consumers []repair.Consumer
	for i := range 10 {
		consumers = append(consumers, repair.Consumer{Ref: svc("default", "c"+strconv.Itoa(i)), Addrs: []string{fmt.Sprintf("10.96.0.%d", 10+i)}})
	}
	st.beforeBatch = func() {
		if err := a.DeleteCIDR(ctx, "pods"); err != nil {
			t.Errorf("DeleteCIDR(pods), holding no record: %v", err)
		}
	}
	r := &repair.Repairer{Allocator: a, Consumers: repair.NewStatic(consumers...), LeakGrace: -1}
	rep, err := r.Run(ctx)
	if err != nil || rep.Count(repair.OutOfRange) != 10 || len(rep.Events) != 10 {
		t.Fatalf("a pass whose CIDR went before its write: events %v, %v; want 10 out of range", rep.Events, err)
	}
	if st.beforeBatch != nil {
		t.Fatal("the pass made no write of more than one record")
	}
	if recs, err := st.ListAddresses(ctx); err != nil || len(recs) != 0 {
		t.Errorf("the store holds %+v, %v; want no record, none inside a CIDR", recs, err)
	}
}

// ReplaceRecords over a store.RecordsReplacer gives records of many owners
// to new owners 64 in one write. A record changed after the listing sends
// only its own batch one by one, where it is ErrConflict and stays as it is
// now (uniqueness); the others go to their new owners all the same.
func TestReplaceRecordsOfManyOwnersInBatchesOf64(t *testing.T) {
	ctx := ctxT(t)
	st, a := batchingAllocator(t)
	recs := allocateMany(t, a, "old-")
	var to []ipaddress.ParentRef
	for i := range recs {
		to = append(to, svc("default", "new-"+strconv.Itoa(i)))
	}
	moved := recs[70] // of the second batch
	now := giveToWeb(t, a, moved.Addr)

	errs := a.ReplaceRecords(ctx, recs, to)
	for i, err := range errs {
		rec, gerr := a.Get(ctx, recs[i].Addr)
		if i == 70 {
			if !errors.Is(err, store.ErrConflict) || gerr != nil || rec.Parent != now.Parent || rec.Revision != now.Revision {
				t.Errorf("%s, given to web after the listing: %v, now %+v (%v); want ErrConflict, and web's record as it was", moved.Addr, err, rec, gerr)
			}
			continue
		}
		if err != nil || gerr != nil || rec.Parent != to[i] {
			t.Errorf("%s of %s: %v, now %+v (%v); want it %s's", recs[i].Addr, recs[i].Parent, err, rec, gerr, to[i])
		}
	}
	if st.replaces != 2 {
		t.Errorf("ReplaceRecords of 150 records, one changed, wrote %d batches; want 2 (the first and the third), the second one by one", st.replaces)
	}
}

// manyOwners is the i-th record of the batch tests (i < 254): 10.96.0.(i+1),
// owned by default/(prefix)(i).
func manyOwners(i int, prefix string) ipaddress.IPAddress {
	return ipaddress.IPAddress{Addr: netip.AddrFrom4([4]byte{10, 96, 0, byte(1 + i)}), Parent: svc("default", prefix+strconv.Itoa(i))}
}

// allocateMany allocates the first 150 records of manyOwners through a,
// three batches' worth, and returns them.
func allocateMany(t *testing.T, a *allocator.Allocator, prefix string) []ipaddress.IPAddress {
	t.Helper()
	recs := make([]ipaddress.IPAddress, 150)
	for i := range recs {
		r := manyOwners(i, prefix)
		rec, err := a.Allocate(ctxT(t), r.Addr, r.Parent)
		if err != nil {
			t.Fatal(err)
		}
		recs[i] = rec
	}
	return recs
}

// giveToWeb releases addr and allocates it to default/web, as another
// allocator could between a caller's listing and its write, and returns
// web's record.
func giveToWeb(t *testing.T, a *allocator.Allocator, addr netip.Addr) ipaddress.IPAddress {
	t.Helper()
	if err := a.Release(ctxT(t), addr); err != nil {
		t.Fatal(err)
	}
	rec, err := a.Allocate(ctxT(t), addr, svc("default", "web"))
	if err != nil {
		t.Fatal(err)
	}
	return rec
}
