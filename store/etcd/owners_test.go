package etcd

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

func svc(name string) ipaddress.ParentRef {
	return ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: name}
}

// addrsOf returns the addresses of AddressesOf(owner), failing the test on
// an error or a record of another owner.
func addrsOf(t *testing.T, ctx context.Context, s *Store, owner ipaddress.ParentRef) []netip.Addr {
	t.Helper()
	recs, err := s.AddressesOf(ctx, owner)
	if err != nil {
		t.Fatalf("AddressesOf(%v): %v", owner, err)
	}
	var out []netip.Addr
	for _, r := range recs {
		if r.Parent != owner {
			t.Fatalf("AddressesOf(%v) returned %+v", owner, r)
		}
		out = append(out, r.Addr)
	}
	return out
}

// TestAddressesOfReadsOtherClientsWrites checks that AddressesOf on one
// client answers with every write another client completed before the
// call, creates and deletes, at once; and that it does not wait for an
// address write to end its wait when the latest revision is some other key's.
func TestAddressesOfReadsOtherClientsWrites(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	c := startCluster(t, 1)
	cliA, cliB := c.newClient(t), c.newClient(t)
	a, err := New(cliA, WithPrefix("/ryw"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := New(cliB, WithPrefix("/ryw"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	mustCreate(t, ctx, a, v4(1))
	owner := svc("svc-" + v4(1).String())
	// The first call builds b's index; later ones follow its watch.
	if got := addrsOf(t, ctx, b, owner); !slices.Equal(got, []netip.Addr{v4(1)}) {
		t.Fatalf("first AddressesOf = %v", got)
	}
	for i := 2; i <= 30; i++ {
		o := svc(fmt.Sprintf("o%d", i%3))
		if _, err := a.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: v4(i), Parent: o}}); err != nil {
			t.Fatal(err)
		}
		got := addrsOf(t, ctx, b, o)
		if !slices.Contains(got, v4(i)) || !slices.IsSortedFunc(got, netip.Addr.Compare) {
			t.Fatalf("AddressesOf(%v) right after %s was created on another client: %v", o, v4(i), got)
		}
		if i%4 == 0 {
			if _, _, err := a.DeleteAddress(ctx, v4(i)); err != nil {
				t.Fatal(err)
			}
			if got := addrsOf(t, ctx, b, o); slices.Contains(got, v4(i)) {
				t.Fatalf("AddressesOf(%v) right after %s was deleted on another client: %v", o, v4(i), got)
			}
		}
	}
	// Records as GetAddress reads them.
	recs, err := b.AddressesOf(ctx, svc("o1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		want, err := a.GetAddress(ctx, r.Addr)
		if err != nil || want.Parent != r.Parent || want.Revision != r.Revision || !want.Created.Equal(r.Created) {
			t.Fatalf("AddressesOf gave %+v, GetAddress %+v, %v", r, want, err)
		}
	}

	// The latest revision is no address write: the index learns it has
	// caught up from a progress notification, not from an event.
	for i := range 5 {
		if _, err := cliA.Put(ctx, fmt.Sprintf("/elsewhere/%d", i), "x"); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		addrsOf(t, ctx, b, owner)
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("AddressesOf took %v after a write elsewhere", took)
		}
	}

	// The owner index ends with the store.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AddressesOf(ctx, owner); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("AddressesOf after Close: %v", err)
	}
}

// TestOwnerIndexRelistsAfterCompaction cuts the index's client off its
// member while addresses are created and deleted and the history is
// compacted: the index, reconnected, re-lists and answers right.
func TestOwnerIndexRelistsAfterCompaction(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	c := startCluster(t, 1)
	px := startProxy(t, c.members[0].client.Host)
	var log errLog
	indexed, err := New(c.newClient(t, "http://"+px.Addr()), WithPrefix("/ocompact"), WithErrorHandler(log.add))
	if err != nil {
		t.Fatal(err)
	}
	defer indexed.Close()
	cli := c.newClient(t)
	s, err := New(cli, WithPrefix("/ocompact"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := 1; i <= 10; i++ {
		mustCreate(t, ctx, s, v4(i))
	}
	if got := addrsOf(t, ctx, indexed, svc("svc-"+v4(1).String())); len(got) != 1 {
		t.Fatalf("AddressesOf before the cut: %v", got)
	}

	px.Pause()
	for i := 11; i <= 20; i++ {
		mustCreate(t, ctx, s, v4(i))
	}
	for i := 1; i <= 5; i++ {
		if _, _, err := s.DeleteAddress(ctx, v4(i)); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := cli.Get(ctx, "/ocompact")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	px.Resume()

	for i := 1; i <= 20; i++ {
		got := addrsOf(t, ctx, indexed, svc("svc-"+v4(i).String()))
		if want := i > 5; (len(got) == 1) != want || len(got) > 1 {
			t.Fatalf("AddressesOf(svc-%s) after the re-list: %v", v4(i), got)
		}
	}
	if !slices.ContainsFunc(log.all(), func(err error) bool { return errors.Is(err, rpctypes.ErrCompacted) }) {
		t.Fatalf("no compaction reported; errors: %v", log.all())
	}
}

// TestLayout1Records opens a store on records written under layout 1 (a
// "v":1 value and an owner key per address): they are read like the others,
// the owner keys are not read, and DeleteAddress deletes a record's owner
// key with it.
func TestLayout1Records(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	c := startCluster(t, 1)
	cli := c.newClient(t)
	s, err := New(cli, WithPrefix("/layout1"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	owner := ipaddress.ParentRef{Group: "example.com", Resource: "widgets", Name: "w/1"}
	old := []netip.Addr{v4(1), netip.MustParseAddr("fd00::1")}
	for _, a := range old {
		val := fmt.Sprintf(`{"v":1,"group":"example.com","resource":"widgets","name":"w/1","created":%d}`, int64(1000+len(a.String())))
		if _, err := cli.Txn(ctx).Then(clientv3.OpPut(s.addrKey(a), val), clientv3.OpPut(s.ownerKey(owner, a), val)).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	// A new record of the same owner: no owner key.
	if _, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: v4(2), Parent: owner}}); err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, ctx, cli, s.ownerPfx); n != 2 {
		t.Fatalf("%d owner keys, want the 2 of layout 1", n)
	}
	r, err := s.GetAddress(ctx, v4(1))
	if err != nil || r.Parent != owner || r.Created.UnixNano() != int64(1000+len(v4(1).String())) {
		t.Fatalf("GetAddress of a layout-1 record: %+v, %v", r, err)
	}
	if got := addrsOf(t, ctx, s, owner); !slices.Equal(got, []netip.Addr{v4(1), v4(2), netip.MustParseAddr("fd00::1")}) {
		t.Fatalf("AddressesOf = %v", got)
	}
	// A stale owner key (its record gone) is not read.
	if _, err := cli.Put(ctx, s.ownerKey(owner, v4(9)), `{"v":1,"resource":"widgets","name":"w/1","created":1}`); err != nil {
		t.Fatal(err)
	}
	for _, a := range append(old, v4(2)) {
		if _, _, err := s.DeleteAddress(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	if got := addrsOf(t, ctx, s, owner); len(got) != 0 {
		t.Fatalf("AddressesOf after the deletes = %v", got)
	}
	if n := countKeys(t, ctx, cli, s.ownerPfx); n != 1 {
		t.Fatalf("%d owner keys left, want only the stale one", n)
	}
}

func countKeys(t *testing.T, ctx context.Context, cli *clientv3.Client, pfx string) int64 {
	t.Helper()
	resp, err := cli.Get(ctx, pfx, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// TestOwnerIndexFollowsAModel applies puts and deletes straight to an owner
// index, no etcd involved: a heavy owner, light ones, and owners changing
// hands, in random order. Every address must be found at the place its
// entry says, under its owner, and nothing else kept.
func TestOwnerIndexFollowsAModel(t *testing.T) {
	s := &Store{ipPfx: "/t/ips/"}
	owners := []ipaddress.ParentRef{svc("heavy"), svc("a"), svc("b")}
	for seed := range uint64(20) {
		x := newOwnerIndex(s)
		model := map[netip.Addr]ipaddress.ParentRef{}
		rng := rand.New(rand.NewPCG(seed, 7))
		for step := range 3000 {
			a := netip.AddrFrom4([4]byte{10, 0, byte(rng.IntN(2)), byte(rng.IntN(256))})
			if rng.IntN(3) == 0 {
				x.deleteLocked(s.addrKey(a))
				delete(model, a)
			} else {
				p := owners[0]
				if rng.IntN(4) == 0 {
					p = owners[1+rng.IntN(2)]
				}
				rec := ipaddress.IPAddress{Addr: a, Parent: p, Created: time.Unix(1700000000, 0)}
				x.putLocked(s.addrKey(a), encodeRecord(rec), int64(step+1))
				model[a] = p
			}
			if step%50 == 0 {
				checkIndexMatches(t, x, model)
			}
		}
		checkIndexMatches(t, x, model)
	}
}

func checkIndexMatches(t *testing.T, x *ownerIndex, model map[netip.Addr]ipaddress.ParentRef) {
	t.Helper()
	if len(x.byAddr) != len(model) {
		t.Fatalf("index holds %d addresses, model %d", len(x.byAddr), len(model))
	}
	held := 0
	for p, o := range x.byOwner {
		if o.ref != p || len(o.addrs) == 0 {
			t.Fatalf("owner %v indexed as %v with %d addresses", p, o.ref, len(o.addrs))
		}
		held += len(o.addrs)
	}
	if held != len(model) {
		t.Fatalf("owners hold %d addresses, model %d", held, len(model))
	}
	for a, p := range model {
		at, ok := x.byAddr[a]
		if !ok || at.o != x.byOwner[p] || at.i >= len(at.o.addrs) || at.o.addrs[at.i].addr != a {
			t.Fatalf("%s (of %v) indexed at %+v", a, p, at)
		}
	}
}

// TestAReplacedRecordIsUnknownToReleasesBeforeIt: ReplaceAddressAt rewrites
// a record's key, so its revision is the key's ModRevision, which no longer
// equals its CreateRevision; releases before ReplaceAddressAt took the
// CreateRevision for it, and one of them could delete the new owner's
// record on the old owner's revision. The rewritten value has "v":3, which
// those releases refuse to decode; this one reads it like any other, and a
// layout-1 record it replaces loses its owner key.
func TestAReplacedRecordIsUnknownToReleasesBeforeIt(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	c := startCluster(t, 1)
	cli := c.newClient(t)
	s, err := New(cli, WithPrefix("/replaced"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "first"}
	second := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "second"}
	recs, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: v4(1), Parent: first}})
	if err != nil {
		t.Fatal(err)
	}
	// A layout-1 record too, with its owner key.
	val := `{"v":1,"resource":"services","namespace":"default","name":"first","created":5}`
	if _, err := cli.Txn(ctx).Then(clientv3.OpPut(s.addrKey(v4(2)), val), clientv3.OpPut(s.ownerKey(first, v4(2)), val)).Commit(); err != nil {
		t.Fatal(err)
	}
	legacy, err := s.GetAddress(ctx, v4(2))
	if err != nil {
		t.Fatal(err)
	}
	for _, old := range []ipaddress.IPAddress{recs[0], legacy} {
		cur, err := s.ReplaceAddressAt(ctx, ipaddress.IPAddress{Addr: old.Addr, Parent: second}, old.Revision)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := cli.Get(ctx, s.addrKey(old.Addr))
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("reading the key back: %v", err)
		}
		kv := resp.Kvs[0]
		if !strings.HasPrefix(string(kv.Value), `{"v":3,`) || kv.ModRevision != cur.Revision || kv.CreateRevision == cur.Revision {
			t.Fatalf("replaced record of %s stored as %s (create %d, mod %d), returned at %d; want \"v\":3 at the replacement's revision", old.Addr, kv.Value, kv.CreateRevision, kv.ModRevision, cur.Revision)
		}
		if got, err := s.GetAddress(ctx, old.Addr); err != nil || got.Parent != second || got.Revision != cur.Revision {
			t.Fatalf("GetAddress of a replaced record: %+v, %v; want %+v", got, err, cur)
		}
	}
	if n := countKeys(t, ctx, cli, s.ownerPfx); n != 0 {
		t.Fatalf("%d owner keys left after replacing the layout-1 record, want 0", n)
	}
	if got := addrsOf(t, ctx, s, second); !slices.Equal(got, []netip.Addr{v4(1), v4(2)}) {
		t.Fatalf("AddressesOf(second) = %v", got)
	}
	all, err := s.ListAddresses(ctx)
	if err != nil || len(all) != 2 {
		t.Fatalf("ListAddresses = %+v, %v", all, err)
	}
	for _, r := range all {
		if _, _, err := s.DeleteAddressAt(ctx, r.Addr, r.Revision); err != nil {
			t.Fatalf("DeleteAddressAt of a replaced record on its revision: %v", err)
		}
	}
}
