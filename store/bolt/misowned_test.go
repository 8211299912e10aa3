package bolt

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"go.etcd.io/bbolt"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// A record whose value decodes but names another owner than the one the
// owner index holds it under (a damaged file) is corrupt: a delete or a
// replace of it is refused and changes nothing, where it used to delete
// the record and leave the real owner's index entry behind, after which
// every AddressesOf of that owner failed.
func TestAWriteToAMisownedRecordIsRefusedAndChangesNothing(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "netipam.db")
	real := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "real"}
	named := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "named"}
	addr := netip.MustParseAddr("10.0.0.7")

	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateCIDR(ctx, cidrset.CIDR{Name: "c", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}}); err != nil {
		t.Fatal(err)
	}
	recs, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: addr, Parent: real}})
	if err != nil {
		t.Fatal(err)
	}
	// The damage: the value names another owner, the index is as it was.
	if err := s.db.Update(func(tx *bbolt.Tx) error {
		v := addrValue{parent: named, created: recs[0].Created.UnixNano(), rev: recs[0].Revision}
		return tx.Bucket(bucketAddrs).Put(appendAddrKey(nil, addr), appendAddrValue(nil, v))
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	writes := map[string]func(*Store) error{
		"DeleteAddress": func(s *Store) error { _, _, err := s.DeleteAddress(ctx, addr); return err },
		"DeleteAddressAt": func(s *Store) error {
			_, _, err := s.DeleteAddressAt(ctx, addr, recs[0].Revision)
			return err
		},
		"ReplaceAddressAt": func(s *Store) error {
			_, err := s.ReplaceAddressAt(ctx, ipaddress.IPAddress{Addr: addr, Parent: named}, recs[0].Revision)
			return err
		},
	}
	for name, write := range writes {
		s, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		err = write(s)
		var ce *CorruptError
		if !errors.Is(err, store.ErrCorrupt) || !errors.As(err, &ce) || ce.Bucket != string(bucketAddrs) {
			t.Errorf("%s of a misowned record: %v, want a *CorruptError in %q", name, err, bucketAddrs)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// The refused write was rolled back: not a byte of the file moved.
		if after, err := os.ReadFile(path); err != nil || !bytes.Equal(after, before) {
			t.Errorf("after %s the file changed (%v)", name, err)
		}
		s, err = Open(path, WithReadOnly())
		if err != nil {
			t.Fatal(err)
		}
		if err := s.db.View(func(tx *bbolt.Tx) error {
			v := tx.Bucket(bucketAddrs).Get(appendAddrKey(nil, addr))
			want := appendAddrValue(nil, addrValue{parent: named, created: recs[0].Created.UnixNano(), rev: recs[0].Revision})
			if !bytes.Equal(v, want) {
				t.Errorf("after %s: the record is %x, want %x", name, v, want)
			}
			okey := appendOwnerKey(nil, real, addr)
			if k, _ := tx.Bucket(bucketOwners).Cursor().Seek(okey); !bytes.Equal(k, okey) {
				t.Errorf("after %s: the real owner's index entry is gone", name)
			}
			if k, _ := tx.Bucket(bucketOwners).Cursor().Seek(appendOwnerKey(nil, named, addr)); bytes.Equal(k, appendOwnerKey(nil, named, addr)) {
				t.Errorf("after %s: an index entry for the named owner appeared", name)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
}

// A record missing only its owner-index entry (no other owner's entry
// names the address) is still deleted or replaced as asked, which leaves
// the file consistent: refusing it would hold the address for good.
func TestARecordMissingOnlyItsIndexEntryCanStillBeWritten(t *testing.T) {
	ctx := context.Background()
	owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "o"}
	addr := netip.MustParseAddr("10.0.0.7")
	for _, replace := range []bool{false, true} {
		s, err := Open(filepath.Join(t.TempDir(), "netipam.db"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateCIDR(ctx, cidrset.CIDR{Name: "c", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}}); err != nil {
			t.Fatal(err)
		}
		recs, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: addr, Parent: owner}})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.db.Update(func(tx *bbolt.Tx) error {
			return tx.Bucket(bucketOwners).Delete(appendOwnerKey(nil, owner, addr))
		}); err != nil {
			t.Fatal(err)
		}
		if err := s.Check(ctx); !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("Check of a record without its index entry: %v, want ErrCorrupt", err)
		}
		if replace {
			_, err = s.ReplaceAddressAt(ctx, ipaddress.IPAddress{Addr: addr, Parent: owner}, recs[0].Revision)
		} else {
			_, _, err = s.DeleteAddress(ctx, addr)
		}
		if err != nil {
			t.Errorf("replace %v: %v, want the write done", replace, err)
		}
		if err := s.Check(ctx); err != nil {
			t.Errorf("replace %v: Check after the write: %v", replace, err)
		}
		s.Close()
	}
}
