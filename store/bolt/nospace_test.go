package bolt_test

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/bolt"
)

// A write past WithMaxSize fails with store.ErrNoSpace, writes nothing,
// and leaves the records before it; deleting records makes room again.
func TestAWritePastTheMaxSizeIsNoSpace(t *testing.T) {
	ctx := ctxT(t)
	path := tempPath(t)
	st := mustOpen(t, path, bolt.WithMaxSize(256<<10))
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}) }
	// Owners of 63-byte names: a few hundred records fill 256 KiB.
	owner := func(i int) ipaddress.ParentRef { return svc("default", fmt.Sprintf("svc-%059d", i)) }
	var full error
	n := 0
	for ; n < 1<<16; n++ {
		_, err := st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: addr(n), Parent: owner(n)}})
		if err != nil {
			full = err
			break
		}
	}
	if !errors.Is(full, store.ErrNoSpace) {
		t.Fatalf("after %d records: %v, want an error matching store.ErrNoSpace", n, full)
	}
	if n < 100 {
		t.Fatalf("no space after %d records of 256 KiB", n)
	}
	if _, err := st.GetAddress(ctx, addr(n)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused record: %v, want ErrNotFound", err)
	}
	recs, err := st.ListAddresses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != n {
		t.Fatalf("%d records after %d writes", len(recs), n)
	}
	for i := range n / 2 {
		if _, _, err := st.DeleteAddress(ctx, addr(i)); err != nil {
			t.Fatal(err)
		}
	}
	create(t, st, addr(n).String(), owner(n))
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = mustOpen(t, path)
	recs, err = st.ListAddresses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := n - n/2 + 1; len(recs) != want {
		t.Fatalf("reopened: %d records, want %d", len(recs), want)
	}
}

// A new file too small for the store's buckets is refused at Open, with
// store.ErrNoSpace.
func TestOpenBelowTheMaxSizeIsNoSpace(t *testing.T) {
	_, err := bolt.Open(tempPath(t), bolt.WithMaxSize(1))
	if !errors.Is(err, store.ErrNoSpace) {
		t.Fatalf("Open: %v, want an error matching store.ErrNoSpace", err)
	}
}
