package bolt

import (
	"context"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/bbolt"

	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// Records of owners store.CheckOwner refuses, written before this store
// applied it (bytes not UTF-8, a name of the longest key bbolt took), are
// read, found by owner, listed, replaced and deleted like any other: the
// rule keeps them from being written, and loses none that were.
func TestRecordsOfOwnersWrittenBeforeCheckOwnerStayUsable(t *testing.T) {
	ctx := context.Background()
	s, err := Open(filepath.Join(t.TempDir(), "netipam.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The longest name that fit: a 32 KiB key with three empty fields.
	longest := ipaddress.ParentRef{Name: strings.Repeat("n", bbolt.MaxKeySize-addrKeyLen-3-3)}
	old := map[netip.Addr]ipaddress.ParentRef{
		netip.MustParseAddr("10.0.0.1"): {Resource: "services", Namespace: "\xff", Name: "a"},
		netip.MustParseAddr("10.0.0.2"): longest,
	}
	for a, p := range old {
		if store.CheckOwner(p) == nil {
			t.Fatalf("%.80q: CheckOwner takes the case", p)
		}
		// As the store wrote them before: value, then index entry.
		if err := s.db.Update(func(tx *bbolt.Tx) error {
			k := appendAddrKey(nil, a)
			if err := tx.Bucket(bucketAddrs).Put(k, appendAddrValue(nil, addrValue{parent: p, created: 1, rev: 1})); err != nil {
				return err
			}
			return tx.Bucket(bucketOwners).Put(appendOwnerKey(nil, p, a), nil)
		}); err != nil {
			t.Fatal(err)
		}
	}
	for a, p := range old {
		if got, err := s.GetAddress(ctx, a); err != nil || got.Parent != p {
			t.Errorf("GetAddress(%s): owner as written %v, %v", a, got.Parent == p, err)
		}
		if recs, err := s.AddressesOf(ctx, p); err != nil || len(recs) != 1 || recs[0].Addr != a {
			t.Errorf("AddressesOf(the owner of %s) = %d records, %v; want its one", a, len(recs), err)
		}
	}
	if all, err := s.ListAddresses(ctx); err != nil || len(all) != len(old) {
		t.Errorf("ListAddresses: %d records, %v; want %d", len(all), err, len(old))
	}
	heir := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "heir"}
	if _, err := s.ReplaceAddressAt(ctx, ipaddress.IPAddress{Addr: netip.MustParseAddr("10.0.0.1"), Parent: heir}, 1); err != nil {
		t.Errorf("ReplaceAddressAt of a record of an owner not UTF-8: %v", err)
	}
	if _, _, err := s.DeleteAddress(ctx, netip.MustParseAddr("10.0.0.2")); err != nil {
		t.Errorf("DeleteAddress of a record of the longest owner: %v", err)
	}
	for a, p := range old {
		if recs, err := s.AddressesOf(ctx, p); err != nil || len(recs) != 0 {
			t.Errorf("AddressesOf(the old owner of %s) after it went = %d records, %v; want none", a, len(recs), err)
		}
	}
	if recs, err := s.AddressesOf(ctx, heir); err != nil || len(recs) != 1 {
		t.Errorf("AddressesOf(heir) = %d records, %v; want the one it was given", len(recs), err)
	}
}
