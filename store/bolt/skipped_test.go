package bolt_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"testing"

	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/bolt"
)

// store.Store.ListAddresses: records the file holds but cannot decode (a
// damaged value, a key the encoder never writes) hide none of the others.
// The listing returns every record that decodes and a *store.SkippedError
// naming each one left out, by bucket and key, matching store.ErrCorrupt;
// the file is not changed by it. Past store.MaxSkipped records the error
// names the first ones and counts the rest.
func TestListAddressesReturnsTheRecordsBesideOnesItCannotDecode(t *testing.T) {
	ctx := ctxT(t)
	path := fileWithOneRecord(t) // 10.0.0.7 of services/default/a
	st := mustOpen(t, path)
	create(t, st, "10.0.0.8", svc("default", "b"))
	create(t, st, "fd00::9", svc("default", "c"))
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	rawPut(t, path, []byte("addrs"), addrKey(ip("10.0.0.7")), []byte{1, 0x80}) // a truncated varint
	badKey := bytes.Repeat([]byte{9}, 17)                                      // a family no key has
	rawPut(t, path, []byte("addrs"), badKey, []byte{1})
	before := rawDump(t, path)

	st = mustOpen(t, path)
	defer st.Close()
	recs, err := st.ListAddresses(ctx)
	var got []string
	for _, r := range recs {
		got = append(got, r.Addr.String()+" "+r.Parent.String())
	}
	if want := []string{"10.0.0.8 services/default/b", "fd00::9 services/default/c"}; !slices.Equal(got, want) {
		t.Fatalf("ListAddresses = %q (%v), want %q", got, err, want)
	}
	var se *store.SkippedError
	if !errors.As(err, &se) || !errors.Is(err, store.ErrCorrupt) || se.Count != 2 || len(se.Records) != 2 {
		t.Fatalf("ListAddresses error %v, want a *store.SkippedError of 2 records matching ErrCorrupt", err)
	}
	for i, want := range []struct {
		addr netip.Addr
		key  []byte
	}{{ip("10.0.0.7"), addrKey(ip("10.0.0.7"))}, {netip.Addr{}, badKey}} {
		r := se.Records[i]
		var ce *bolt.CorruptError
		if r.Addr != want.addr || !errors.As(r.Err, &ce) || ce.Bucket != "addrs" || !bytes.Equal(ce.Key, want.key) || !errors.Is(r.Err, store.ErrCorrupt) {
			t.Errorf("skipped record %d: %v %v, want %v with a *CorruptError naming addrs %x", i, r.Addr, r.Err, want.addr, want.key)
		}
	}
	wantCorrupt(t, "ListAddresses", err, "addrs", "10.0.0.7", fmt.Sprintf("%x", badKey))

	// More than MaxSkipped: the first are named, the rest counted.
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	const n = store.MaxSkipped + 3
	for i := range n {
		rawPut(t, path, []byte("addrs"), addrKey(netip.AddrFrom4([4]byte{10, 1, 0, byte(i + 1)})), []byte{2})
	}
	st = mustOpen(t, path)
	recs, err = st.ListAddresses(ctx)
	if !errors.As(err, &se) || se.Count != n+2 || len(se.Records) != store.MaxSkipped || len(recs) != 2 {
		t.Fatalf("with %d records left out: %d records, %v; want 2 and a *store.SkippedError counting %d, naming %d", n+2, len(recs), err, n+2, store.MaxSkipped)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	// Listing changed nothing (but what this test wrote itself).
	after := rawDump(t, path)
	for k, v := range before {
		if after[k] != v {
			t.Errorf("key %q changed: %x, was %x", k, after[k], v)
		}
	}
}

// A file bbolt cannot read is no record left out: ListAddresses fails with
// no records, never as a *store.SkippedError.
func TestListAddressesOfADamagedFileFailsWhole(t *testing.T) {
	ctx := ctxT(t)
	path := tempPath(t)
	st := mustOpen(t, path)
	// Enough records for the addrs bucket to span pages past the first
	// ones that Open reads.
	for n := range 10 {
		var batch []ipaddress.IPAddress
		for i := n * 200; i < (n+1)*200; i++ {
			batch = append(batch, ipaddress.IPAddress{Addr: netip.AddrFrom4([4]byte{10, 2, byte(i >> 8), byte(i)}), Parent: svc("default", fmt.Sprint("s", i))})
		}
		if _, err := st.CreateAddresses(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Make every leaf page holding address keys (10.2.x.y) one of no
	// type bbolt knows, which it panics on when a cursor reaches it; the
	// pages Open reads (meta, freelist, the buckets' roots) are left as
	// they are.
	const leaf = 0x02
	page := os.Getpagesize()
	key := addrKey(netip.AddrFrom4([4]byte{10, 2, 0, 0}))[:15]
	damaged := 0
	for off := 0; off+page <= len(b); off += page {
		flags := b[off+8 : off+10] // after the page id; bbolt writes it in the machine's byte order
		if binary.NativeEndian.Uint16(flags) == leaf && bytes.Contains(b[off:off+page], key) {
			binary.NativeEndian.PutUint16(flags, 0x40)
			damaged++
		}
	}
	if damaged == 0 {
		t.Fatal("no leaf page of address records found to damage")
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	st, err = bolt.Open(path, bolt.WithLockTimeout(0))
	if err != nil {
		t.Fatalf("Open of a file damaged only in its address records: %v", err)
	}
	defer st.Close()
	recs, err := st.ListAddresses(ctx)
	var se *store.SkippedError
	var ce *bolt.CorruptError
	if err == nil || errors.As(err, &se) || recs != nil || !errors.As(err, &ce) || ce.Bucket != "" {
		t.Fatalf("ListAddresses of a damaged file: %d records, %v; want none and a *CorruptError of the file", len(recs), err)
	}
}

// store.Store.AddressesOf: an entry the owner index files under the owner
// whose record cannot be decoded (a damaged value, an address key the
// encoder never writes, a value naming another owner) hides none of the
// owner's other records. AddressesOf returns those and a
// *store.SkippedError naming each entry left out in key order, matching
// store.ErrCorrupt; another owner's answer is not touched, nor the file.
// An entry with no record at all is no record left out: AddressesOf fails
// whole.
func TestAddressesOfReturnsTheOwnersRecordsBesideOnesItCannotDecode(t *testing.T) {
	ctx := ctxT(t)
	a, b := svc("default", "a"), svc("default", "b")
	path := fileWithOneRecord(t) // 10.0.0.7 of a
	st := mustOpen(t, path)
	create(t, st, "10.0.0.8", a)
	create(t, st, "10.0.0.9", a)
	create(t, st, "10.0.0.10", b)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	rawPut(t, path, []byte("addrs"), addrKey(ip("10.0.0.8")), []byte{1, 0x80}) // a truncated varint
	badKey := bytes.Repeat([]byte{9}, 17)                                      // a family no key has
	rawPut(t, path, []byte("owners"), ownerKey(a, badKey), nil)
	rawPut(t, path, []byte("owners"), ownerKey(a, addrKey(ip("10.0.0.10"))), nil) // b's record filed under a too
	before := rawDump(t, path)

	st = mustOpen(t, path)
	recs, err := st.AddressesOf(ctx, a)
	var got []string
	for _, r := range recs {
		got = append(got, r.Addr.String()+" "+r.Parent.String())
	}
	if want := []string{"10.0.0.7 services/default/a", "10.0.0.9 services/default/a"}; !slices.Equal(got, want) {
		t.Fatalf("AddressesOf(a) = %q (%v), want %q", got, err, want)
	}
	var se *store.SkippedError
	if !errors.As(err, &se) || !errors.Is(err, store.ErrCorrupt) || se.Count != 3 || len(se.Records) != 3 {
		t.Fatalf("AddressesOf(a) error %v, want a *store.SkippedError of 3 records matching ErrCorrupt", err)
	}
	for i, want := range []struct {
		addr   netip.Addr
		bucket string
		key    []byte
	}{
		{ip("10.0.0.8"), "addrs", addrKey(ip("10.0.0.8"))},
		{ip("10.0.0.10"), "owners", ownerKey(a, addrKey(ip("10.0.0.10")))},
		{netip.Addr{}, "owners", ownerKey(a, badKey)},
	} {
		r := se.Records[i]
		var ce *bolt.CorruptError
		if r.Addr != want.addr || !errors.As(r.Err, &ce) || ce.Bucket != want.bucket || !bytes.Equal(ce.Key, want.key) || !errors.Is(r.Err, store.ErrCorrupt) {
			t.Errorf("skipped record %d: %v %v, want %v with a *CorruptError naming %s %x", i, r.Addr, r.Err, want.addr, want.bucket, want.key)
		}
	}
	if recs, err := st.AddressesOf(ctx, b); err != nil || len(recs) != 1 || recs[0].Addr != ip("10.0.0.10") || recs[0].Parent != b {
		t.Errorf("AddressesOf(b) beside a's damage = %+v, %v; want 10.0.0.10 alone", recs, err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	after := rawDump(t, path)
	for k, v := range before {
		if after[k] != v {
			t.Errorf("key %q changed: %x, was %x", k, after[k], v)
		}
	}

	// An index entry of a that no record backs: nothing is held to leave
	// out, and the file is inconsistent.
	rawPut(t, path, []byte("owners"), ownerKey(a, addrKey(ip("10.0.0.12"))), nil)
	st = mustOpen(t, path)
	defer st.Close()
	recs, err = st.AddressesOf(ctx, a)
	var ce *bolt.CorruptError
	if recs != nil || errors.As(err, &se) || !errors.As(err, &ce) || ce.Bucket != "owners" {
		t.Fatalf("AddressesOf(a) with an entry of no record: %+v, %v; want none and a *CorruptError in owners", recs, err)
	}
}
