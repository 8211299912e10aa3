package etcd

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/repair"
	"github.com/netipam/netipam/store"
)

// AddressesOfSince a revision another client wrote, at once: the owner
// index waits for its watch to bring that write, never answering without
// it, though it does not read etcd's current revision.
func TestAddressesOfSinceAnotherClientsWriteShowsIt(t *testing.T) {
	c := startCluster(t, 1, func(cfg *embed.Config) { cfg.UnsafeNoFsync = true })
	st1, st2, done := c.twoStores(t, "/since")
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o := ipaddress.ParentRef{Resource: "pods", Namespace: "default", Name: "p"}
	if _, err := st2.AddressesOf(ctx, o); err != nil { // starts st2's index
		t.Fatal(err)
	}
	since := st2.(store.SinceReader)
	for i := range 20 {
		addr := netip.AddrFrom4([4]byte{10, 0, 0, byte(1 + i)})
		recs, err := st1.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: addr, Parent: o}})
		if err != nil {
			t.Fatal(err)
		}
		got, err := since.AddressesOfSince(ctx, o, recs[0].Revision)
		if err != nil || len(got) != i+1 || got[i].Addr != addr || got[i].Revision != recs[0].Revision {
			t.Fatalf("AddressesOfSince(%d), the revision of %s, created through another client = %+v, %v; want %d records, the last that one", recs[0].Revision, addr, got, err, i+1)
		}
	}
}

// EnsureNext and EnsureDualStack over etcd read etcd's current revision
// once a call, to read the owner's records (see store.AddressesOf): the
// read after an allocation is since the allocation's revision
// (store.SinceReader), which the owner index reaches by its watch.
func TestEnsureOverEtcdReadsTheRevisionOnce(t *testing.T) {
	ctx, _, a, calls := countedAllocator(t)
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"EnsureNext, holding none", func() error { _, err := a.EnsureNext(ctx, ipaddress.IPv4, pod("a")); return err }},
		{"EnsureNext, holding one", func() error { _, err := a.EnsureNext(ctx, ipaddress.IPv4, pod("a")); return err }},
		{"EnsureDualStack, holding none", func() error { _, _, err := a.EnsureDualStack(ctx, pod("b")); return err }},
		{"EnsureDualStack, holding IPv4", func() error { _, _, err := a.EnsureDualStack(ctx, pod("a")); return err }},
		{"EnsureDualStack, holding both", func() error { _, _, err := a.EnsureDualStack(ctx, pod("a")); return err }},
	} {
		calls.reset()
		if err := tc.call(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if n := calls.of(kvRange); n != 1 {
			t.Errorf("%s: %d reads of etcd; want 1, the read of the owner's records before it allocates", tc.name, n)
		}
	}
	for _, o := range []string{"a", "b"} {
		if recs, err := a.AddressesOf(ctx, pod(o)); err != nil || len(recs) != 2 {
			t.Errorf("%s holds %+v, %v; want a pair", o, recs, err)
		}
	}
}

// countedAllocator returns an allocator over a store on a countingClient
// of a new member (no fsync), serving CIDR "pods" (10.0.0.0/24 and
// fd00::/120), whose owner index has listed the store already: the calls
// a test counts from here are those of what it calls. The store waits a
// minute for its index before it reads etcd's revision (ownWriteWait): a
// watch slowed by the race detector must not pass for a read.
func countedAllocator(t *testing.T) (context.Context, *Store, *allocator.Allocator, *rpcCounts) {
	t.Helper()
	c := startCluster(t, 1, func(cfg *embed.Config) { cfg.UnsafeNoFsync = true })
	cli, calls := countingClient(t, c)
	st, err := New(cli)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	st.ownWriteWait = time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	a, err := allocator.New(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	if _, err := a.CreateCIDR(ctx, "pods", netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("fd00::/120")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.AddressesOf(ctx, pod("nobody")); err != nil {
		t.Fatal(err)
	}
	return ctx, st, a, calls
}

// pod is a pod of the default namespace, an owner.
func pod(name string) ipaddress.ParentRef {
	return ipaddress.ParentRef{Resource: "pods", Namespace: "default", Name: name}
}

// The unary calls of etcd's KV service the tests count.
const (
	kvRange = "/etcdserverpb.KV/Range"
	kvTxn   = "/etcdserverpb.KV/Txn"
)

// rpcCounts counts a client's unary calls by method.
type rpcCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *rpcCounts) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n = map[string]int{}
}

func (c *rpcCounts) of(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[method]
}

// countingClient returns a client of c whose unary calls are counted,
// closed when the test ends.
func countingClient(t *testing.T, c *testCluster) (*clientv3.Client, *rpcCounts) {
	t.Helper()
	calls := &rpcCounts{n: map[string]int{}}
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		calls.mu.Lock()
		calls.n[method]++
		calls.mu.Unlock()
		return invoke(ctx, method, req, reply, cc, opts...)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   c.Endpoints(),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(count)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli, calls
}

// ReleaseOwner over etcd releases an owner's addresses in one transaction
// (store.RecordsDeleter), after the one read of its records, where each
// address alone takes a read and a transaction. A record held in a form
// that transaction does not delete (one ReplaceAddressAt gave the owner)
// is released one by one, and the others with it.
func TestReleaseOwnerOverEtcdIsOneTransaction(t *testing.T) {
	ctx, st, a, calls := countedAllocator(t)
	v4, v6, err := a.AllocateDualStack(ctx, pod("a"), netip.Addr{}, netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	calls.reset()
	got, err := a.ReleaseOwner(ctx, pod("a"))
	if err != nil || len(got) != 2 || got[0] != v4.Addr || got[1] != v6.Addr {
		t.Fatalf("ReleaseOwner(a) = %v, %v; want %s and %s", got, err, v4.Addr, v6.Addr)
	}
	if r, tx := calls.of(kvRange), calls.of(kvTxn); r != 1 || tx != 1 {
		t.Errorf("ReleaseOwner(a) of a pair made %d reads and %d transactions; want 1 and 1", r, tx)
	}
	for _, addr := range got {
		if _, err := a.Get(ctx, addr); !errors.Is(err, allocator.ErrNotFound) {
			t.Errorf("Get(%s) after ReleaseOwner: %v; want ErrNotFound", addr, err)
		}
	}

	// b holds an address of its own and one handed over to it.
	mine, err := a.AllocateNext(ctx, ipaddress.IPv6, pod("b"))
	if err != nil {
		t.Fatal(err)
	}
	old, err := a.AllocateNext(ctx, ipaddress.IPv4, pod("old"))
	if err != nil {
		t.Fatal(err)
	}
	handed, err := st.ReplaceAddressAt(ctx, ipaddress.IPAddress{Addr: old.Addr, Parent: pod("b")}, old.Revision)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.DeleteRecords(ctx, []ipaddress.IPAddress{handed}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("DeleteRecords of a record ReplaceAddressAt wrote: %v; want ErrConflict", err)
	}
	got, err = a.ReleaseOwner(ctx, pod("b"))
	if err != nil || len(got) != 2 || !slices.Contains(got, mine.Addr) || !slices.Contains(got, handed.Addr) {
		t.Fatalf("ReleaseOwner(b) = %v, %v; want %s and %s", got, err, handed.Addr, mine.Addr)
	}
	if recs, err := a.AddressesOf(ctx, pod("b")); err != nil || len(recs) != 0 {
		t.Errorf("b holds %+v, %v after ReleaseOwner; want none", recs, err)
	}
}

// consumersThen is a repair.Consumers that runs then, once, at the first
// Exists: after the pass listed the records, as another allocator could
// act.
type consumersThen struct {
	repair.Consumers
	then func()
}

func (c *consumersThen) Exists(ctx context.Context, ref ipaddress.ParentRef) (bool, error) {
	if f := c.then; f != nil {
		c.then = nil
		f()
	}
	return c.Consumers.Exists(ctx, ref)
}

// SPEC §6 over etcd: a repair pass deletes the leaked records it found 64
// in one transaction (allocator.ReleaseRecords), where each alone takes a
// read and a transaction. A leaked record given to another owner after
// the listing is no leak any more: it stays that owner's, and only its
// batch is released one by one.
func TestRepairOverEtcdDeletesLeaksInBatches(t *testing.T) {
	ctx, _, a, calls := countedAllocator(t)
	keep, err := a.AllocateNext(ctx, ipaddress.IPv4, pod("keep"))
	if err != nil {
		t.Fatal(err)
	}
	leak := func(round string) []ipaddress.IPAddress {
		var recs []ipaddress.IPAddress
		for i := range 100 {
			rec, err := a.AllocateNext(ctx, ipaddress.IPv4, pod(fmt.Sprintf("%s-%d", round, i)))
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, rec)
		}
		return recs
	}
	consumers := &consumersThen{Consumers: repair.NewStatic(repair.Consumer{Ref: pod("keep"), Addrs: []string{keep.Addr.String()}})}
	r := &repair.Repairer{Allocator: a, Consumers: consumers, LeakGrace: -1}
	held := func() []netip.Addr {
		recs, err := a.Store().ListAddresses(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []netip.Addr
		for _, rec := range recs {
			out = append(out, rec.Addr)
		}
		slices.SortFunc(out, netip.Addr.Compare)
		return out
	}

	leak("a")
	calls.reset()
	rep, err := r.Run(ctx)
	if err != nil || rep.Count(repair.Leak) != 100 || rep.Count(repair.Failed) != 0 {
		t.Fatalf("a pass over 100 leaks: %d leaks, %d failed, %v; want 100 deleted", rep.Count(repair.Leak), rep.Count(repair.Failed), err)
	}
	if tx := calls.of(kvTxn); tx != 2 {
		t.Errorf("a pass deleting 100 leaks made %d transactions; want 2, of 64 and 36", tx)
	}
	if got := held(); !slices.Equal(got, []netip.Addr{keep.Addr}) {
		t.Errorf("after the pass the store holds %v; want keep's %s alone", got, keep.Addr)
	}

	recs := leak("b")
	moved := recs[70].Addr
	var web ipaddress.IPAddress
	consumers.then = func() {
		if err := a.Release(ctx, moved); err != nil {
			t.Error(err)
		}
		if web, err = a.Allocate(ctx, moved, pod("web")); err != nil {
			t.Error(err)
		}
	}
	rep, err = r.Run(ctx)
	if err != nil || rep.Count(repair.Leak) != 99 || rep.Count(repair.Failed) != 0 {
		t.Fatalf("a pass over 100 leaks, one given to web after the listing: %d leaks, %d failed, %v; want 99 deleted", rep.Count(repair.Leak), rep.Count(repair.Failed), err)
	}
	want := []netip.Addr{keep.Addr, moved}
	slices.SortFunc(want, netip.Addr.Compare)
	if got := held(); !slices.Equal(got, want) {
		t.Errorf("after the pass the store holds %v; want %v", got, want)
	}
	if rec, err := a.Get(ctx, moved); err != nil || rec.Parent != pod("web") || rec.Revision != web.Revision {
		t.Errorf("%s, given to web after the listing: %+v, %v; want web's record %+v", moved, rec, err, web)
	}
}

// SPEC §6 over etcd: a repair pass writes back the records a store lost
// (addresses its consumers hold) 64 in one transaction
// (allocator.RestoreRecords), where each alone takes one. An address
// another owner took after the listing is no record to write back: the
// pass reports it held twice, and it stays that owner's.
func TestRepairOverEtcdRestoresLostRecordsInBatches(t *testing.T) {
	ctx, _, a, calls := countedAllocator(t)
	var consumers []repair.Consumer
	for i := range 100 {
		consumers = append(consumers, repair.Consumer{Ref: pod(fmt.Sprint("p-", i)), Addrs: []string{fmt.Sprintf("10.0.0.%d", 1+i)}})
	}
	r := &repair.Repairer{Allocator: a, Consumers: &consumersThen{Consumers: repair.NewStatic(consumers...)}, LeakGrace: -1}
	calls.reset()
	rep, err := r.Run(ctx)
	if err != nil || rep.Count(repair.Repaired) != 100 || len(rep.Events) != 100 {
		t.Fatalf("a pass over 100 lost records: %d repaired, events %v, %v; want 100 repaired", rep.Count(repair.Repaired), rep.Events, err)
	}
	if tx := calls.of(kvTxn); tx != 2 {
		t.Errorf("a pass writing back 100 records made %d transactions; want 2, of 64 and 36", tx)
	}
	for _, c := range consumers {
		if rec, err := a.Get(ctx, netip.MustParseAddr(c.Addrs[0])); err != nil || rec.Parent != c.Ref {
			t.Errorf("%s after the pass: %+v, %v; want it %s's", c.Addrs[0], rec, err, c.Ref)
		}
	}

	// The store loses them again; one is taken by web after the listing,
	// when the pass asks about a leaked record's owner.
	for _, c := range consumers {
		if err := a.Release(ctx, netip.MustParseAddr(c.Addrs[0])); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Allocate(ctx, netip.MustParseAddr("10.0.0.200"), pod("gone")); err != nil {
		t.Fatal(err)
	}
	taken := netip.MustParseAddr(consumers[70].Addrs[0])
	var web ipaddress.IPAddress
	r.Consumers.(*consumersThen).then = func() {
		if web, err = a.Allocate(ctx, taken, pod("web")); err != nil {
			t.Error(err)
		}
	}
	rep, err = r.Run(ctx)
	if err != nil || rep.Count(repair.Repaired) != 99 || rep.Count(repair.Duplicate) != 1 || rep.Count(repair.Leak) != 1 {
		t.Fatalf("a pass over 100 lost records, one taken since the listing: events %v, %v; want 99 repaired, 1 already allocated, 1 leak", rep.Events, err)
	}
	if rec, err := a.Get(ctx, taken); err != nil || rec.Parent != pod("web") || rec.Revision != web.Revision {
		t.Errorf("%s, taken by web after the listing: %+v, %v; want web's record %+v", taken, rec, err, web)
	}
}

// SPEC §6 over etcd: a repair pass hands records whose owners are gone to
// the consumers holding their addresses 64 in one transaction
// (allocator.ReplaceRecords), where each alone takes a read and a
// transaction. Records written by a hand-over never match that
// transaction (etcd.Store.ReplaceRecords): a second pass handing them on
// again does it one by one, to the same end.
func TestRepairOverEtcdHandsOverInBatches(t *testing.T) {
	ctx, _, a, calls := countedAllocator(t)
	consumers := func(prefix string) []repair.Consumer {
		var cs []repair.Consumer
		for i := range 100 {
			cs = append(cs, repair.Consumer{Ref: pod(fmt.Sprint(prefix, i)), Addrs: []string{fmt.Sprintf("10.0.0.%d", 1+i)}})
		}
		return cs
	}
	for i, c := range consumers("gone-") {
		if _, err := a.Allocate(ctx, netip.MustParseAddr(c.Addrs[0]), c.Ref); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	for round, prefix := range []string{"c-", "d-"} {
		cs := consumers(prefix)
		r := &repair.Repairer{Allocator: a, Consumers: repair.NewStatic(cs...), LeakGrace: -1}
		calls.reset()
		rep, err := r.Run(ctx)
		if err != nil || rep.Count(repair.Leak) != 100 || rep.Count(repair.Repaired) != 100 || len(rep.Events) != 200 {
			t.Fatalf("pass %d over 100 records of owners gone: %d leaks, %d repaired, events %v, %v; want 100 handed over", round, rep.Count(repair.Leak), rep.Count(repair.Repaired), rep.Events, err)
		}
		if tx := calls.of(kvTxn); round == 0 && tx != 2 {
			t.Errorf("a pass handing over 100 records made %d transactions; want 2, of 64 and 36", tx)
		}
		for _, c := range cs {
			if rec, err := a.Get(ctx, netip.MustParseAddr(c.Addrs[0])); err != nil || rec.Parent != c.Ref {
				t.Errorf("pass %d: %s: %+v, %v; want it %s's", round, c.Addrs[0], rec, err, c.Ref)
			}
		}
	}
}

// SPEC §6 with §4 over etcd: a repair pass records lost addresses inside
// a Terminating CIDR, whose removal then waits for them, 64 in one
// transaction touching the CIDR, where each alone took a transaction.
func TestRepairOverEtcdAdoptsLostRecordsInBatches(t *testing.T) {
	ctx, st, a, calls := countedAllocator(t)
	if _, err := a.Allocate(ctx, netip.MustParseAddr("10.0.0.1"), pod("held")); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteCIDR(ctx, "pods"); !errors.Is(err, allocator.ErrDeletionBlocked) {
		t.Fatalf("DeleteCIDR(pods) = %v, want blocked by 10.0.0.1", err)
	}
	consumers := []repair.Consumer{{Ref: pod("held"), Addrs: []string{"10.0.0.1"}}}
	for i := range 100 {
		consumers = append(consumers, repair.Consumer{Ref: pod(fmt.Sprint("p-", i)), Addrs: []string{fmt.Sprintf("10.0.0.%d", 10+i)}})
	}
	r := &repair.Repairer{Allocator: a, Consumers: repair.NewStatic(consumers...), LeakGrace: -1}
	calls.reset()
	rep, err := r.Run(ctx)
	if err != nil || rep.Count(repair.Repaired) != 100 || len(rep.Events) != 100 {
		t.Fatalf("a pass over 100 lost records inside Terminating CIDR pods: %d repaired, events %v, %v; want 100 repaired", rep.Count(repair.Repaired), rep.Events, err)
	}
	if tx := calls.of(kvTxn); tx != 2 {
		t.Errorf("a pass adopting 100 records made %d transactions; want 2, of 64 and 36", tx)
	}
	for _, c := range consumers[1:] {
		if rec, err := st.GetAddress(ctx, netip.MustParseAddr(c.Addrs[0])); err != nil || rec.Parent != c.Ref {
			t.Errorf("%s after the pass: %+v, %v; want it %s's", c.Addrs[0], rec, err, c.Ref)
		}
	}
	// The CIDR now waits for them: releasing the one that held it alone
	// leaves it Terminating.
	if err := a.Release(ctx, netip.MustParseAddr("10.0.0.1")); err != nil {
		t.Fatal(err)
	}
	if c, err := st.GetCIDR(ctx, "pods"); err != nil || !c.Terminating {
		t.Errorf("pods after its first holder's release: %+v, %v; want it Terminating, held by the adopted records", c, err)
	}
}
