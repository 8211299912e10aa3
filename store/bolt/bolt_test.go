package bolt_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/bolt"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func tempPath(t *testing.T) string { return filepath.Join(t.TempDir(), "netipam.db") }

func mustOpen(t *testing.T, path string, opts ...bolt.Option) *bolt.Store {
	t.Helper()
	st, err := bolt.Open(path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func svc(ns, name string) ipaddress.ParentRef {
	return ipaddress.ParentRef{Resource: "services", Namespace: ns, Name: name}
}

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

// fakeClock returns distinct, increasing times.
func fakeClock() func() time.Time {
	var mu sync.Mutex
	t := time.Date(2024, 5, 1, 12, 0, 0, 123456789, time.UTC)
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		t = t.Add(time.Second + time.Nanosecond)
		return t
	}
}

func create(t *testing.T, st store.Store, addr string, owner ipaddress.ParentRef) ipaddress.IPAddress {
	t.Helper()
	recs, err := st.CreateAddresses(ctxT(t), []ipaddress.IPAddress{{Addr: ip(addr), Parent: owner}})
	if err != nil {
		t.Fatalf("create %s: %v", addr, err)
	}
	return recs[0]
}

// snapRecorder keeps the first snapshot a watch delivers.
type snapRecorder struct {
	mu     sync.Mutex
	snap   store.Snapshot
	events []store.Event
}

func (r *snapRecorder) Reset(s store.Snapshot) {
	r.mu.Lock()
	r.snap = s
	r.mu.Unlock()
}

func (r *snapRecorder) Apply(e store.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func TestReopenKeepsEverything(t *testing.T) {
	ctx := ctxT(t)
	path := tempPath(t)
	st, err := bolt.Open(path, bolt.WithClock(fakeClock()))
	if err != nil {
		t.Fatal(err)
	}
	def, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: "kubernetes", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/28")}})
	if err != nil {
		t.Fatal(err)
	}
	dual, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: "dual", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16"), netip.MustParsePrefix("fd00:10::/108")}})
	if err != nil {
		t.Fatal(err)
	}
	dual.Terminating = true
	if dual, err = st.UpdateCIDR(ctx, dual); err != nil {
		t.Fatal(err)
	}
	widget := ipaddress.ParentRef{Group: "example.com", Resource: "widgets", Namespace: "ns-1", Name: "w.1"}
	var recs []ipaddress.IPAddress
	recs = append(recs, create(t, st, "10.96.0.1", svc("default", "kubernetes")))
	recs = append(recs, create(t, st, "10.96.0.2", svc("kube-system", "kube-dns")))
	batch, err := st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: ip("10.0.0.9"), Parent: widget}, {Addr: ip("fd00:10::9"), Parent: widget}})
	if err != nil {
		t.Fatal(err)
	}
	recs = append(recs, batch...)
	gone := create(t, st, "10.96.0.3", svc("default", "gone"))
	if _, _, err := st.DeleteAddress(ctx, gone.Addr); err != nil {
		t.Fatal(err)
	}
	rev, err := st.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rev != 8 { // 2 CIDRs, 1 update, 4 creates (one a batch), 1 delete
		t.Fatalf("revision %d after 8 writes", rev)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st = mustOpen(t, path, bolt.WithClock(fakeClock()))
	if got, err := st.Revision(ctx); err != nil || got != rev {
		t.Fatalf("revision after reopen = %d, %v; want %d", got, err, rev)
	}
	for _, want := range []cidrset.CIDR{def, dual} {
		got, err := st.GetCIDR(ctx, want.Name)
		if err != nil {
			t.Fatal(err)
		}
		if got.Name != want.Name || !slices.Equal(got.Prefixes, want.Prefixes) || got.Terminating != want.Terminating ||
			got.Revision != want.Revision || !got.Created.Equal(want.Created) {
			t.Fatalf("CIDR after reopen = %+v, want %+v", got, want)
		}
	}
	for _, want := range recs {
		got, err := st.GetAddress(ctx, want.Addr)
		if err != nil {
			t.Fatal(err)
		}
		if got.Addr != want.Addr || got.Parent != want.Parent || got.Revision != want.Revision || !got.Created.Equal(want.Created) {
			t.Fatalf("address after reopen = %+v, want %+v", got, want)
		}
	}
	if _, err := st.GetAddress(ctx, gone.Addr); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted address after reopen: %v", err)
	}
	mine, err := st.AddressesOf(ctx, widget)
	if err != nil || len(mine) != 2 || mine[0].Addr != ip("10.0.0.9") || mine[1].Addr != ip("fd00:10::9") {
		t.Fatalf("AddressesOf(widget) after reopen = %+v, %v", mine, err)
	}
	if mine, err := st.AddressesOf(ctx, svc("default", "gone")); err != nil || len(mine) != 0 {
		t.Fatalf("AddressesOf(gone) after reopen = %+v, %v", mine, err)
	}
	all, err := st.ListAddresses(ctx)
	if err != nil || len(all) != len(recs) {
		t.Fatalf("ListAddresses after reopen = %+v, %v", all, err)
	}
	if err := st.Check(ctx); err != nil {
		t.Fatal(err)
	}

	// A watch on the reopened file starts from everything in it.
	var r snapRecorder
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := st.Watch(wctx, &r); err != nil {
		t.Fatal(err)
	}
	if r.snap.Revision != rev || len(r.snap.CIDRs) != 2 || len(r.snap.Addrs) != len(recs) {
		t.Fatalf("snapshot after reopen = %+v", r.snap)
	}

	// Revisions go on from where they were.
	next := create(t, st, "10.96.0.4", svc("default", "next"))
	if next.Revision != rev+1 {
		t.Fatalf("first write after reopen at revision %d, want %d", next.Revision, rev+1)
	}

	// An allocator's cold start sees every held address.
	a, err := allocator.New(ctx, st, allocator.WithStrategy(allocator.Sequential()))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	got, err := a.AllocateNext(ctx, ipaddress.IPv4, svc("default", "cold"))
	if err != nil || got.Addr != ip("10.96.0.3") {
		t.Fatalf("AllocateNext after reopen = %+v, %v; want 10.96.0.3", got, err)
	}
	if got.Revision != rev+2 {
		t.Fatalf("allocation at revision %d, want %d", got.Revision, rev+2)
	}
}

func TestSecondOpenIsLocked(t *testing.T) {
	ctx := ctxT(t)
	path := tempPath(t)
	st := mustOpen(t, path)
	create(t, st, "10.0.0.1", svc("default", "a"))

	start := time.Now()
	_, err := bolt.Open(path, bolt.WithLockTimeout(100*time.Millisecond))
	took := time.Since(start)
	var le *bolt.LockedError
	if !errors.Is(err, bolt.ErrLocked) || !errors.As(err, &le) || le.Path != path {
		t.Fatalf("second Open: %v, want a *LockedError for %s", err, path)
	}
	if msg := err.Error(); !strings.Contains(msg, path) || !strings.Contains(msg, "another process") {
		t.Fatalf("lock error %q does not name the file and the other holder", msg)
	}
	if took > 2*time.Second {
		t.Fatalf("second Open took %v with a 100ms timeout", took)
	}
	if _, err := bolt.Open(path, bolt.WithLockTimeout(0)); !errors.Is(err, bolt.ErrLocked) {
		t.Fatalf("second Open without waiting: %v, want ErrLocked", err)
	}

	// The first store is unharmed and, once closed, the file opens again.
	create(t, st, "10.0.0.2", svc("default", "b"))
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st2 := mustOpen(t, path, bolt.WithLockTimeout(100*time.Millisecond))
	all, err := st2.ListAddresses(ctx)
	if err != nil || len(all) != 2 {
		t.Fatalf("after the lock was released: %+v, %v", all, err)
	}
}

// rawPut writes a value with bbolt directly, bypassing the store.
func rawPut(t *testing.T, path string, bucket, key, val []byte) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bbolt.Tx) error { return tx.Bucket(bucket).Put(key, val) })
	if err != nil {
		t.Fatal(err)
	}
}

func addrKey(a netip.Addr) []byte {
	if a.Is4() {
		b := a.As4()
		return append([]byte{4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, b[:]...)
	}
	b := a.As16()
	return append([]byte{6}, b[:]...)
}

func wantCorrupt(t *testing.T, what string, err error, names ...string) {
	t.Helper()
	if !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("%s: %v, want ErrCorrupt", what, err)
	}
	for _, n := range names {
		if !strings.Contains(err.Error(), n) {
			t.Fatalf("%s: error %q does not name %q", what, err, n)
		}
	}
}

// A key the encoder never writes is corrupt even when its value is sound:
// an IPv6 key holding an IPv4-mapped address, which CreateAddresses
// refuses, would be listed under a name no command could release.
func TestAMappedAddressKeyIsCorrupt(t *testing.T) {
	ctx := ctxT(t)
	path := tempPath(t)
	st := mustOpen(t, path)
	create(t, st, "10.0.0.5", svc("default", "a"))
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte("addrs"))
		val := bytes.Clone(b.Get(addrKey(ip("10.0.0.5"))))
		if err := b.Delete(addrKey(ip("10.0.0.5"))); err != nil {
			return err
		}
		return b.Put(addrKey(ip("::ffff:10.0.0.5")), val)
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	st = mustOpen(t, path)
	defer st.Close()
	_, err = st.ListAddresses(ctx)
	wantCorrupt(t, "ListAddresses", err, "::ffff:10.0.0.5")
	wantCorrupt(t, "Check", st.Check(ctx), "::ffff:10.0.0.5")
}

func TestCorruptValues(t *testing.T) {
	ctx := ctxT(t)
	path := tempPath(t)
	st, err := bolt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: "bad", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}}); err != nil {
		t.Fatal(err)
	}
	create(t, st, "10.0.0.7", svc("default", "a"))
	create(t, st, "10.0.0.8", svc("default", "b"))
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	for _, garbage := range [][]byte{{0xde, 0xad, 0xbe, 0xef}, {1}, {1, 0x80}, {}} {
		rawPut(t, path, []byte("addrs"), addrKey(ip("10.0.0.7")), garbage)
		rawPut(t, path, []byte("cidrs"), []byte("bad"), garbage)

		st := mustOpen(t, path)
		_, err := st.GetAddress(ctx, ip("10.0.0.7"))
		wantCorrupt(t, "GetAddress", err, "addrs", "10.0.0.7")
		_, err = st.ListAddresses(ctx)
		wantCorrupt(t, "ListAddresses", err, "addrs", "10.0.0.7")
		_, err = st.AddressesOf(ctx, svc("default", "a"))
		wantCorrupt(t, "AddressesOf", err, "addrs", "10.0.0.7")
		_, _, err = st.DeleteAddress(ctx, ip("10.0.0.7"))
		wantCorrupt(t, "DeleteAddress", err, "addrs", "10.0.0.7")
		_, err = st.GetCIDR(ctx, "bad")
		wantCorrupt(t, "GetCIDR", err, "cidrs", `"bad"`)
		_, err = st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: ip("10.0.0.9"), Parent: svc("default", "c")}}, store.Fence{CIDR: "bad", Revision: 1})
		wantCorrupt(t, "fenced CreateAddresses", err, "cidrs", `"bad"`)
		err = st.Watch(ctx, &snapRecorder{})
		wantCorrupt(t, "Watch", err, "cidrs", `"bad"`)
		_, err = allocator.New(ctx, st)
		wantCorrupt(t, "allocator.New", err)
		err = st.Check(ctx)
		wantCorrupt(t, "Check", err, "10.0.0.7", `"bad"`)
		// The rest of the file still reads.
		if rec, err := st.GetAddress(ctx, ip("10.0.0.8")); err != nil || rec.Parent != svc("default", "b") {
			t.Fatalf("intact record: %+v, %v", rec, err)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}

	// Only the address is corrupt: Watch names it.
	path2 := tempPath(t)
	st2, err := bolt.Open(path2)
	if err != nil {
		t.Fatal(err)
	}
	create(t, st2, "fd00::7", svc("default", "a"))
	st2.Close()
	rawPut(t, path2, []byte("addrs"), addrKey(ip("fd00::7")), []byte{1, 2, 3})
	st2 = mustOpen(t, path2)
	wantCorrupt(t, "Watch", st2.Watch(ctx, &snapRecorder{}), "addrs", "fd00::7")
	st2.Close()

	// A broken revision counter or an unknown format refuses to open.
	rawPut(t, path2, []byte("meta"), []byte("revision"), []byte{1, 2})
	_, err = bolt.Open(path2)
	wantCorrupt(t, "Open", err, "meta", "revision")
	rawPut(t, path2, []byte("meta"), []byte("revision"), make([]byte, 8))
	rawPut(t, path2, []byte("meta"), []byte("version"), []byte{2})
	if _, err := bolt.Open(path2); !errors.Is(err, bolt.ErrFormatVersion) {
		t.Fatalf("Open of format version 2: %v, want ErrFormatVersion", err)
	}
}

func TestOpenRefusesOtherFiles(t *testing.T) {
	path := tempPath(t)
	if err := os.WriteFile(path, []byte("not a database at all"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := bolt.Open(path); err == nil {
		t.Fatal("Open of a text file succeeded")
	}
	path = tempPath(t)
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bbolt.Tx) error { _, err := tx.CreateBucket([]byte("theirs")); return err }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := bolt.Open(path); !errors.Is(err, bolt.ErrNotAStore) {
		t.Fatalf("Open of a foreign bbolt file: %v, want ErrNotAStore", err)
	}
	if _, err := bolt.Open(path, bolt.WithReadOnly()); !errors.Is(err, bolt.ErrNotAStore) {
		t.Fatalf("read-only Open of a foreign bbolt file: %v, want ErrNotAStore", err)
	}
}

// An initialised file always has its version and every bucket: Open refuses
// one that lacks any of them rather than recreate it empty, which would
// hide lost CIDRs or owner keys.
func TestOpenRefusesAFileMissingWhatInitialisationWrote(t *testing.T) {
	for _, damage := range []struct {
		name string
		do   func(tx *bbolt.Tx) error
	}{
		{"version", func(tx *bbolt.Tx) error { return tx.Bucket([]byte("meta")).Delete([]byte("version")) }},
		{"cidrs", func(tx *bbolt.Tx) error { return tx.DeleteBucket([]byte("cidrs")) }},
		{"addrs", func(tx *bbolt.Tx) error { return tx.DeleteBucket([]byte("addrs")) }},
		{"owners", func(tx *bbolt.Tx) error { return tx.DeleteBucket([]byte("owners")) }},
	} {
		t.Run(damage.name, func(t *testing.T) {
			path := tempPath(t)
			st, err := bolt.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			create(t, st, "10.0.0.1", svc("a", "b"))
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			db, err := bbolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Update(damage.do); err != nil {
				t.Fatal(err)
			}
			before := snapshotFile(t, db)
			db.Close()
			if st, err := bolt.Open(path); !errors.Is(err, store.ErrCorrupt) {
				if err == nil {
					st.Close()
				}
				t.Fatalf("Open without %s: %v, want ErrCorrupt", damage.name, err)
			}
			db, err = bbolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if after := snapshotFile(t, db); !slices.Equal(after, before) {
				t.Fatalf("a refused Open changed the file:\n%q\nbecame\n%q", before, after)
			}
		})
	}
}

// snapshotFile lists every bucket and key of db, with its value.
func snapshotFile(t *testing.T, db *bbolt.DB) []string {
	t.Helper()
	var out []string
	err := db.View(func(tx *bbolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bbolt.Bucket) error {
			out = append(out, string(name)+"/")
			return b.ForEach(func(k, v []byte) error {
				out = append(out, fmt.Sprintf("%s/%x=%x", name, k, v))
				return nil
			})
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestCloseIsIdempotent(t *testing.T) {
	ctx := ctxT(t)
	st, err := bolt.Open(tempPath(t))
	if err != nil {
		t.Fatal(err)
	}
	var r snapRecorder
	if err := st.Watch(ctx, &r); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	calls := map[string]error{}
	_, calls["CreateCIDR"] = st.CreateCIDR(ctx, cidrset.CIDR{Name: "x", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	_, calls["UpdateCIDR"] = st.UpdateCIDR(ctx, cidrset.CIDR{Name: "x", Revision: 1})
	calls["DeleteCIDR"] = st.DeleteCIDR(ctx, "x", 1)
	_, calls["GetCIDR"] = st.GetCIDR(ctx, "x")
	_, calls["CreateAddresses"] = st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: ip("10.0.0.1"), Parent: svc("a", "b")}})
	_, _, calls["DeleteAddress"] = st.DeleteAddress(ctx, ip("10.0.0.1"))
	_, calls["GetAddress"] = st.GetAddress(ctx, ip("10.0.0.1"))
	_, calls["AddressesOf"] = st.AddressesOf(ctx, svc("a", "b"))
	_, calls["ListAddresses"] = st.ListAddresses(ctx)
	_, calls["Revision"] = st.Revision(ctx)
	calls["Watch"] = st.Watch(ctx, &r)
	calls["Check"] = st.Check(ctx)
	for name, err := range calls {
		if !errors.Is(err, store.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.events) != 0 {
		t.Fatalf("watch of a closed store got %+v", r.events)
	}
}

// TestCloseDuringUse closes the store under concurrent readers, writers
// and a watch: every call either works or returns ErrClosed.
func TestCloseDuringUse(t *testing.T) {
	ctx := ctxT(t)
	st, err := bolt.Open(tempPath(t))
	if err != nil {
		t.Fatal(err)
	}
	var r snapRecorder
	if err := st.Watch(ctx, &r); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				a := netip.AddrFrom4([4]byte{10, byte(g), byte(i >> 8), byte(i)})
				_, err := st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: a, Parent: svc("ns", "x")}})
				if err == nil {
					_, err = st.GetAddress(ctx, a)
				}
				if err == nil {
					_, err = st.AddressesOf(ctx, svc("ns", "x"))
				}
				if errors.Is(err, store.ErrClosed) {
					return
				}
				if err != nil {
					t.Errorf("before or during Close: %v", err)
					return
				}
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}

func TestUnstorableInput(t *testing.T) {
	ctx := ctxT(t)
	st := mustOpen(t, tempPath(t))
	if _, err := st.CreateAddresses(ctx, []ipaddress.IPAddress{{Parent: svc("a", "b")}}); err == nil {
		t.Fatal("stored the zero address")
	}
	if _, err := st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: ip("fe80::1%eth0"), Parent: svc("a", "b")}}); err == nil {
		t.Fatal("stored an address with a zone")
	}
	if _, err := st.GetAddress(ctx, netip.Addr{}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetAddress(zero): %v", err)
	}
	if _, _, err := st.DeleteAddress(ctx, netip.Addr{}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeleteAddress(zero): %v", err)
	}
	if _, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: "x", Prefixes: []netip.Prefix{{}}}); err == nil {
		t.Fatal("stored an invalid prefix")
	}
	if _, err := st.CreateCIDR(ctx, cidrset.CIDR{Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}); err == nil {
		t.Fatal("stored a CIDR without a name")
	}
	if rev, err := st.Revision(ctx); err != nil || rev != 0 {
		t.Fatalf("refused writes moved the revision to %d (%v)", rev, err)
	}
	// Owners that share a prefix of their encoding stay apart.
	create(t, st, "10.0.0.1", ipaddress.ParentRef{Resource: "s", Name: "ab"})
	create(t, st, "10.0.0.2", ipaddress.ParentRef{Resource: "s", Name: "a"})
	create(t, st, "10.0.0.3", ipaddress.ParentRef{Resource: "s", Namespace: "a"})
	for _, o := range []ipaddress.ParentRef{{Resource: "s", Name: "ab"}, {Resource: "s", Name: "a"}, {Resource: "s", Namespace: "a"}} {
		recs, err := st.AddressesOf(ctx, o)
		if err != nil || len(recs) != 1 || recs[0].Parent != o {
			t.Fatalf("AddressesOf(%+v) = %+v, %v", o, recs, err)
		}
	}
}

// A nil Option, or WithClock(nil), leaves the store as Open makes it: no
// panic, and above all no write refused as a "damaged file" for it.
func TestNilOptionsAreTheDefaults(t *testing.T) {
	ctx := ctxT(t)
	st := mustOpen(t, tempPath(t), nil, bolt.WithClock(nil))
	c, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: "x", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}})
	if err != nil {
		t.Fatalf("CreateCIDR with the default clock: %v", err)
	}
	if c.Created.IsZero() {
		t.Error("CreateCIDR stamped no creation time")
	}
	if _, err := st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: ip("10.0.0.1"), Parent: svc("a", "b")}}); err != nil {
		t.Fatalf("CreateAddresses with the default clock: %v", err)
	}
}

// A file damaged below the level of records (a partial copy, a full disk,
// a bad sector) is an error from whatever reads it first, never a panic
// nor a fault: bbolt panics on pages it cannot read, and reading past the
// end of a short file faults.
func TestADamagedFileIsAnErrorNotACrash(t *testing.T) {
	ctx := ctxT(t)
	path := tempPath(t)
	// One process per write, as ipamctl makes them: each commit leaves
	// freed pages behind, so the file has pages past its first 20000 bytes
	// that an open must read.
	write := func(fn func(a *allocator.Allocator) error) {
		t.Helper()
		st := mustOpen(t, path)
		defer st.Close()
		a, err := allocator.New(ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		if err := fn(a); err != nil {
			t.Fatal(err)
		}
	}
	write(func(a *allocator.Allocator) error {
		_, err := a.CreateCIDR(ctx, "k", netip.MustParsePrefix("10.0.0.0/16"), netip.MustParsePrefix("fd00::/64"))
		return err
	})
	for i := range 50 {
		write(func(a *allocator.Allocator) error {
			_, _, err := a.AllocateDualStack(ctx, svc(fmt.Sprint("ns-", i), fmt.Sprint("svc-", i)), netip.Addr{}, netip.Addr{})
			return err
		})
	}
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const page = 4096
	damaged := map[string][]byte{"truncated": good[:20000], "cut in half": good[:len(good)/2]}
	for pg := 2; pg < len(good)/page; pg++ {
		for _, off := range []int{0, 8, 10, 12, 16} { // page id, flags, count, overflow, first element
			b := bytes.Clone(good)
			b[pg*page+off] ^= 0xff
			damaged[fmt.Sprintf("page %d, byte %d flipped", pg, off)] = b
		}
	}
	errs := 0
	for what, b := range damaged {
		p := tempPath(t)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		// A crash fails the test binary.
		err := readAll(ctx, p)
		if err != nil {
			errs++
			// What failed left no lock behind it.
			if _, again := bolt.Open(p, bolt.WithLockTimeout(0)); errors.Is(again, bolt.ErrLocked) {
				t.Errorf("%s: after %v, Open again: %v", what, err, again)
			}
		}
		if what == "truncated" && !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("%s: %v, want an error matching store.ErrCorrupt", what, err)
		}
	}
	if errs == 0 {
		t.Fatal("no damage was noticed: the test damages nothing that is read")
	}
}

// readAll opens the store at path and reads all of it, as a command would.
func readAll(ctx context.Context, path string) error {
	st, err := bolt.Open(path, bolt.WithLockTimeout(0))
	if err != nil {
		return err
	}
	defer st.Close()
	a, err := allocator.New(ctx, st)
	if err != nil {
		return err
	}
	defer a.Close()
	if _, err := st.ListAddresses(ctx); err != nil {
		return err
	}
	return st.Check(ctx)
}

// OpenContext's wait for another process's lock ends with its context, even
// when the lock timeout would wait for ever.
func TestOpenContextEndsTheWaitForTheLock(t *testing.T) {
	path := tempPath(t)
	st := mustOpen(t, path)
	defer st.Close()
	ctx, cancel := context.WithTimeout(ctxT(t), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := bolt.OpenContext(ctx, path, bolt.WithLockTimeout(-1))
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), path) {
		t.Fatalf("OpenContext of a locked file: %v, want the context's error naming %s", err, path)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("OpenContext took %v with a 100ms context", took)
	}
}

// A store opened WithReadOnly reads what is there, beside other readers,
// writes nothing, and does not make a store of a file that is not one.
func TestAReadOnlyStoreReadsAndWritesNothing(t *testing.T) {
	ctx := ctxT(t)
	path := tempPath(t)
	st := mustOpen(t, path)
	if _, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: "c", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}}); err != nil {
		t.Fatal(err)
	}
	create(t, st, "10.0.0.1", svc("default", "a"))
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	ro := mustOpen(t, path, bolt.WithReadOnly())
	other := mustOpen(t, path, bolt.WithReadOnly(), bolt.WithLockTimeout(0)) // the lock is shared
	if _, err := bolt.Open(path, bolt.WithLockTimeout(0)); !errors.Is(err, bolt.ErrLocked) {
		t.Fatalf("a writer's Open beside readers: %v, want ErrLocked", err)
	}
	if recs, err := other.ListAddresses(ctx); err != nil || len(recs) != 1 {
		t.Fatalf("ListAddresses read-only: %v, %v", recs, err)
	}
	a, err := allocator.New(ctx, ro)
	if err != nil {
		t.Fatalf("allocator.New over a read-only store: %v", err)
	}
	if u, err := a.Usage("c"); err != nil || u.Prefixes[0].Used != cidrset.CountOf(1) {
		t.Fatalf("Usage read-only: %+v, %v", u, err)
	}
	if _, err := a.AllocateNext(ctx, ipaddress.IPv4, svc("default", "b")); !errors.Is(err, bolt.ErrReadOnly) {
		t.Fatalf("AllocateNext over a read-only store: %v, want ErrReadOnly", err)
	}
	a.Close()
	ro.Close()
	other.Close()
	if after, err := os.ReadFile(path); err != nil || !bytes.Equal(after, before) {
		t.Fatalf("the file changed under read-only stores (%v)", err)
	}

	empty := tempPath(t)
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := bolt.Open(empty, bolt.WithReadOnly()); !errors.Is(err, bolt.ErrNotAStore) {
		t.Fatalf("read-only Open of an empty file: %v, want ErrNotAStore", err)
	}
	if fi, err := os.Stat(empty); err != nil || fi.Size() != 0 {
		t.Fatalf("read-only Open wrote to an empty file (%v)", err)
	}
	if _, err := bolt.Open(tempPath(t), bolt.WithReadOnly()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("read-only Open of a missing file: %v, want fs.ErrNotExist", err)
	}
}

// bbolt refuses a key past 32 KiB with an error of its own, which matches
// none of the store's. The store refuses such an owner or CIDR name first,
// as invalid input, naming the field and not echoing the whole name, and
// writes nothing.
func TestNamesPastBboltsKeyLimitAreInvalid(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t, tempPath(t))
	huge := strings.Repeat("n", 40_000)
	var fe *ipaddress.FieldError
	if _, err := s.CreateCIDR(ctx, cidrset.CIDR{Name: huge, Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}}); !errors.Is(err, ipaddress.ErrInvalid) || !errors.As(err, &fe) || fe.Field != "metadata.name" || len(err.Error()) > 400 {
		t.Fatalf("CreateCIDR with a 40 kB name: %.200v, want a short ErrInvalid on metadata.name", err)
	}
	owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: huge}
	if _, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: netip.MustParseAddr("10.0.0.1"), Parent: owner}}); !errors.Is(err, ipaddress.ErrInvalid) || !errors.As(err, &fe) || fe.Field != "spec.parentRef" || len(err.Error()) > 400 {
		t.Fatalf("CreateAddresses with a 40 kB owner name: %.200v, want a short ErrInvalid on spec.parentRef", err)
	}
	rec, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: netip.MustParseAddr("10.0.0.2"), Parent: ipaddress.ParentRef{Resource: "services", Name: "a"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReplaceAddressAt(ctx, ipaddress.IPAddress{Addr: rec[0].Addr, Parent: owner}, rec[0].Revision); !errors.Is(err, ipaddress.ErrInvalid) {
		t.Fatalf("ReplaceAddressAt to a 40 kB owner name: %.200v, want ErrInvalid", err)
	}
	all, err := s.ListAddresses(ctx)
	if err != nil || len(all) != 1 || all[0].Revision != rec[0].Revision {
		t.Fatalf("after the refusals: %+v, %v; want only the record of 10.0.0.2, unchanged", all, err)
	}
	// Just under the limit still fits.
	fits := ipaddress.ParentRef{Resource: "services", Name: strings.Repeat("n", 32_000)}
	if _, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: netip.MustParseAddr("10.0.0.3"), Parent: fits}}); err != nil {
		t.Fatalf("a 32 000-byte owner name: %v", err)
	}
}
