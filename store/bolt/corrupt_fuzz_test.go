package bolt_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"maps"
	"math"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/bolt"
)

// rawDump returns every key and value of the file's buckets, as
// "bucket\x00key" -> value.
func rawDump(t testing.TB, path string) map[string]string {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	out := map[string]string{}
	err = db.View(func(tx *bbolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bbolt.Bucket) error {
			return b.ForEach(func(k, v []byte) error {
				out[string(name)+"\x00"+string(k)] = string(v)
				return nil
			})
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// ownerKeysOf returns the owner-index keys of address a in dump.
func ownerKeysOf(dump map[string]string, a []byte) []string {
	var out []string
	for k := range dump {
		if len(k) > len("owners\x00") && k[:len("owners\x00")] == "owners\x00" && bytes.HasSuffix([]byte(k), a) {
			out = append(out, k)
		}
	}
	return out
}

// FuzzCorruptAddressValue: whatever bytes the value of one address record
// holds (damage, or a sound encoding that disagrees with the owner index),
// ListAddresses returns the other record, and that one or a
// *store.SkippedError naming it; a write to that address (a delete or a
// hand-over, alone or as a batch of the record read: DeleteRecords,
// ReplaceRecords) either fails, with an error matching store.ErrCorrupt,
// and changes nothing in the file; or succeeds and leaves no trace of the
// old record: no owner-index entry of the address but the new owner's, and
// every other key and value as it was (but the store revision).
func FuzzCorruptAddressValue(f *testing.F) {
	// Sound values to start from: that of 10.0.0.7 as written, and that of
	// a record of another owner (a value that decodes, but disagrees with
	// the owner index of 10.0.0.7).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	scratch := filepath.Join(f.TempDir(), "scratch.db")
	st, err := bolt.Open(scratch)
	if err != nil {
		f.Fatal(err)
	}
	for _, r := range []struct {
		a string
		p ipaddress.ParentRef
	}{{"10.0.0.7", svc("default", "a")}, {"10.0.0.9", svc("default", "c")}, {"10.0.0.10", ipaddress.ParentRef{Resource: "nodes", Name: "a"}}} {
		if _, err := st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: ip(r.a), Parent: r.p}}); err != nil {
			f.Fatal(err)
		}
	}
	st.Close()
	dump := rawDump(f, scratch)
	for _, a := range []string{"10.0.0.7", "10.0.0.9", "10.0.0.10"} {
		v := []byte(dump["addrs\x00"+string(addrKey(ip(a)))])
		for _, batch := range []bool{false, true} {
			f.Add(v, false, batch)
			f.Add(v, true, batch)
		}
	}
	f.Add([]byte{}, false, false)
	f.Add([]byte{1, 0x80}, true, true)

	f.Fuzz(func(t *testing.T, val []byte, replace, batch bool) {
		ctx := ctxT(t)
		path := tempPath(t)
		st, err := bolt.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		create(t, st, "10.0.0.7", svc("default", "a"))
		create(t, st, "10.0.0.8", svc("default", "b"))
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		key7 := addrKey(ip("10.0.0.7"))
		rawPut(t, path, []byte("addrs"), key7, val)
		before := rawDump(t, path)

		st, err = bolt.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		// Whatever 10.0.0.7 holds, a listing returns 10.0.0.8, and 10.0.0.7
		// either as read or named as left out.
		recs, lerr := st.ListAddresses(ctx)
		var se *store.SkippedError
		switch {
		case lerr == nil:
			if len(recs) != 2 || recs[0].Addr != ip("10.0.0.7") || recs[1].Addr != ip("10.0.0.8") {
				t.Fatalf("value %x: ListAddresses = %+v", val, recs)
			}
		case !errors.As(lerr, &se) || se.Count != 1 || se.Records[0].Addr != ip("10.0.0.7") || !errors.Is(lerr, store.ErrCorrupt):
			t.Fatalf("value %x: ListAddresses error %v, want a *store.SkippedError of 10.0.0.7", val, lerr)
		case len(recs) != 1 || recs[0].Addr != ip("10.0.0.8") || recs[0].Parent != svc("default", "b"):
			t.Fatalf("value %x: ListAddresses beside 10.0.0.7 = %+v", val, recs)
		}
		newOwner := svc("default", "new")
		rec, gerr := st.GetAddress(ctx, ip("10.0.0.7"))
		switch {
		case !replace && !batch:
			_, _, err = st.DeleteAddress(ctx, ip("10.0.0.7"))
		case gerr != nil:
			err = gerr
		case !replace:
			_, err = st.DeleteRecords(ctx, []ipaddress.IPAddress{rec})
		case batch:
			_, err = st.ReplaceRecords(ctx, []ipaddress.IPAddress{rec}, []ipaddress.ParentRef{newOwner})
		default:
			rec.Parent = newOwner
			_, err = st.ReplaceAddressAt(ctx, rec, rec.Revision)
		}
		if cerr := st.Close(); cerr != nil {
			t.Fatal(cerr)
		}
		after := rawDump(t, path)
		if err != nil {
			if !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("value %x: error %v does not match ErrCorrupt", val, err)
			}
			if !maps.Equal(before, after) {
				t.Fatalf("value %x: a write that failed (%v) changed the file", val, err)
			}
			return
		}
		owners := ownerKeysOf(after, key7)
		switch {
		case !replace && len(owners) != 0:
			t.Fatalf("value %x (batch %v): a delete succeeded and left the owner-index entries %q", val, batch, owners)
		case replace && (len(owners) != 1 || owners[0] != "owners\x00"+string(ownerKey(newOwner, key7))):
			t.Fatalf("value %x (batch %v): a hand-over succeeded and left the owner-index entries %q", val, batch, owners)
		}
		for k, v := range before {
			if k == "meta\x00revision" || k == "addrs\x00"+string(key7) || bytes.HasSuffix([]byte(k), key7) {
				continue
			}
			if w, ok := after[k]; !ok || w != v {
				t.Fatalf("value %x: a write to 10.0.0.7 changed %q", val, k)
			}
		}
	})
}

// ownerKey is the owner-index key of (p, addrKey): each field as a
// one-byte length (the test's fields are short) and its bytes.
func ownerKey(p ipaddress.ParentRef, akey []byte) []byte {
	var b []byte
	for _, s := range []string{p.Group, p.Resource, p.Namespace, p.Name} {
		b = append(b, byte(len(s)))
		b = append(b, s...)
	}
	return append(b, akey...)
}

// FuzzCorruptMeta: whatever bytes the meta bucket holds as the format
// version and the revision counter, Open either refuses the file, with an
// error matching store.ErrCorrupt or ErrFormatVersion, and changes
// nothing; or opens it, and then a write either fails, matching
// store.ErrCorrupt, and changes nothing, or is made at the revision after
// the counter's and leaves a file that opens again. FuzzDecodeRevision and
// FuzzDecodeFormatVersion check the decoders alone, which cannot see what
// a write then does with the value.
func FuzzCorruptMeta(f *testing.F) {
	rev := func(r uint64) []byte { return binary.BigEndian.AppendUint64(nil, r) }
	f.Add([]byte{1}, rev(0))
	f.Add([]byte{1}, rev(41))
	f.Add([]byte{1}, rev(math.MaxInt64-1))
	f.Add([]byte{1}, rev(1<<63))
	f.Add([]byte{2}, rev(3))
	f.Add([]byte{1, 1}, rev(3))
	f.Add([]byte{}, []byte{1, 2})

	f.Fuzz(func(t *testing.T, version, revision []byte) {
		ctx := ctxT(t)
		path := fileWithOneRecord(t)
		rawPut(t, path, []byte("meta"), []byte("version"), version)
		rawPut(t, path, []byte("meta"), []byte("revision"), revision)
		before := rawDump(t, path)

		st, err := bolt.Open(path)
		if err != nil {
			if !errors.Is(err, store.ErrCorrupt) && !errors.Is(err, bolt.ErrFormatVersion) {
				t.Fatalf("version %x, revision %x: Open: %v, want ErrCorrupt or ErrFormatVersion", version, revision, err)
			}
			if !maps.Equal(before, rawDump(t, path)) {
				t.Fatalf("version %x, revision %x: Open failed (%v) and changed the file", version, revision, err)
			}
			return
		}
		if !bytes.Equal(version, []byte{1}) || len(revision) != 8 {
			st.Close()
			t.Fatalf("Open took version %x, revision %x", version, revision)
		}
		counter := binary.BigEndian.Uint64(revision)
		if got, err := st.Revision(ctx); err != nil || uint64(got) != counter {
			st.Close()
			t.Fatalf("revision %x: Revision = %d, %v", revision, got, err)
		}
		recs, err := st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: ip("10.0.0.8"), Parent: svc("default", "b")}})
		if cerr := st.Close(); cerr != nil {
			t.Fatal(cerr)
		}
		if err != nil {
			if !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("revision %x: CreateAddresses: %v, want ErrCorrupt", revision, err)
			}
			if !maps.Equal(before, rawDump(t, path)) {
				t.Fatalf("revision %x: CreateAddresses failed (%v) and changed the file", revision, err)
			}
			return
		}
		if recs[0].Revision < 1 || uint64(recs[0].Revision) != counter+1 { // in uint64, a wrap to MinInt64 is counter+1 too
			t.Fatalf("revision %x: the write was made at revision %d", revision, recs[0].Revision)
		}
		st, err = bolt.Open(path)
		if err != nil {
			t.Fatalf("revision %x: the write at %d left a file that does not open: %v", revision, recs[0].Revision, err)
		}
		defer st.Close()
		if got, err := st.GetAddress(ctx, ip("10.0.0.8")); err != nil || got.Revision != recs[0].Revision || got.Parent != recs[0].Parent {
			t.Fatalf("revision %x: wrote %+v, read back %+v, %v", revision, recs[0], got, err)
		}
	})
}
