package etcd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// invariantsSeed fixes the operation mix of
// TestAllocatorsSharingEtcdKeepAddressesUniqueAndDeletionsSafe; 0 picks one
// (logged, so that a failure can be rerun with it). The interleaving of the
// goroutines is the scheduler's and etcd's, so a seed reproduces the
// operations each goroutine tries, not their exact order.
var invariantsSeed = flag.Uint64("invariants.seed", 0, "seed of the invariants test (0: random)")

// Sizes of the run: bounded in operations, not time.
const (
	invAllocators = 4  // each on its own etcd client, as separate processes
	invWorkers    = 8  // goroutines, spread over the allocators
	invRounds     = 12 // quiet points: every worker pauses after each round
)

// invOpsPerRound is how many operations each worker makes per round; fewer
// under the race detector, which makes each about five times slower, to
// stay within about 15 s on two cores.
func invOpsPerRound() int {
	if raceEnabled {
		return 20
	}
	return 40
}

// invCIDR is a CIDR the workers may create and delete. Small, overlapping
// prefixes within 10.0.0.0/24 and fd00::/122, so that ranges fill up,
// static requests collide and deletions are blocked.
type invCIDR struct {
	name     string
	prefixes []netip.Prefix
}

func invCandidates() []invCIDR {
	var out []invCIDR
	add := func(name string, ps ...string) {
		c := invCIDR{name: name}
		for _, p := range ps {
			c.prefixes = append(c.prefixes, netip.MustParsePrefix(p))
		}
		out = append(out, c)
	}
	for i := range 16 {
		add(fmt.Sprintf("v4-28-%d", i), fmt.Sprintf("10.0.0.%d/28", 16*i))
	}
	for i := range 8 {
		add(fmt.Sprintf("v4-27-%d", i), fmt.Sprintf("10.0.0.%d/27", 32*i))
	}
	add("v4-26-0", "10.0.0.0/26")
	add("v4-26-2", "10.0.0.128/26")
	// An identical twin: overlapping CIDRs may be equal.
	add("v4-28-5-twin", "10.0.0.80/28")
	for i := range 8 {
		add(fmt.Sprintf("v6-125-%d", i), fmt.Sprintf("fd00::%x/125", 8*i))
	}
	for i := range 4 {
		add(fmt.Sprintf("v6-124-%d", i), fmt.Sprintf("fd00::%x/124", 16*i))
	}
	add("v6-123-0", "fd00::/123")
	add("v6-123-1", "fd00::20/123")
	for i := range 4 {
		add(fmt.Sprintf("ds-%d", i), fmt.Sprintf("10.0.0.%d/28", 64*i+32), fmt.Sprintf("fd00::%x/125", 16*i+8))
	}
	return out
}

// invCounters proves what the run exercised.
type invCounters struct {
	allocated, released                     atomic.Int64
	full, collisions, notInRange, mismatch  atomic.Int64
	created, createExists                   atomic.Int64
	deleted, deleteBlocked, deleteNotFound  atomic.Int64
	compactions, quietPoints, ops           atomic.Int64
	oracleDeletions, oracleAddressCreations atomic.Int64
}

// TestAllocatorsSharingEtcdKeepAddressesUniqueAndDeletionsSafe runs random
// allocations, releases, CIDR creations and deletions, and compactions from
// several allocators sharing one etcd (SPEC §2-§4), and checks against etcd
// itself that:
//  1. every address record is host-contained by a CIDR that exists;
//  2. no CIDR was removed while an address it host-contained had no other
//     live CIDR host-containing it, and no address was created outside a
//     live CIDR (checked at the revision of each change, by an oracle
//     following etcd's history);
//  3. no address is handed to two callers while the first still holds it;
//  4. the records in etcd are exactly what the callers hold, each with its
//     holder as parent;
//  5. once everything is released, every Terminating CIDR goes away by
//     itself, and deleting the rest leaves nothing behind.
func TestAllocatorsSharingEtcdKeepAddressesUniqueAndDeletionsSafe(t *testing.T) {
	seed := *invariantsSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -invariants.seed=%d)", seed, seed)
	ctx := testCtx(t, 2*time.Minute)
	// Durability is not under test: without fsync the run fits the budget.
	c := startCluster(t, 1, func(cfg *embed.Config) { cfg.UnsafeNoFsync = true })
	const prefix = "/invariants"
	cands := invCandidates()
	var cnt invCounters

	// The checker reads etcd on a client of its own, through plain store
	// calls, and follows its history in the oracle.
	checkCli := c.newClient(t)
	checker, err := New(checkCli, WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer checker.Close()
	orc := startOracle(ctx, t, checkCli, checker, &cnt)

	// Each allocator reaches etcd through a proxy of its own, which can
	// cut it off to force a re-sync (forceResync).
	allocs := make([]*allocator.Allocator, invAllocators)
	proxies := make([]*tcpProxy, invAllocators)
	resets := make([]atomic.Int64, invAllocators)
	for i := range allocs {
		proxies[i] = startProxy(t, c.members[0].client.Host)
		st, err := New(quickReconnectClient(t, "http://"+proxies[i].Addr()), WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		a, err := allocator.New(ctx, resetCounter{st, &resets[i]})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		allocs[i] = a
	}
	resyncs := func() (n int64) {
		for i := range resets {
			n += resets[i].Load() - 1 // the first Reset of each is no re-sync
		}
		return n
	}

	h := &holdings{owner: map[netip.Addr]int{}}
	workers := make([]*invWorker, invWorkers)
	for i := range workers {
		workers[i] = &invWorker{
			id:     i,
			t:      t,
			a:      allocs[i%invAllocators],
			rng:    rand.New(rand.NewPCG(seed, uint64(i))),
			owner:  ipaddress.ParentRef{Resource: "services", Namespace: "invariants", Name: fmt.Sprintf("w%d", i)},
			held:   map[netip.Addr]bool{},
			h:      h,
			cnt:    &cnt,
			cands:  cands,
			cli:    checkCli,
			oracle: orc,
		}
	}
	// A few CIDRs to start from, so that the first round allocates.
	for _, name := range []string{"v4-27-0", "v4-28-9", "v6-125-1", "ds-2"} {
		cd := cands[slices.IndexFunc(cands, func(c invCIDR) bool { return c.name == name })]
		if _, err := allocs[0].CreateCIDR(ctx, cd.name, cd.prefixes...); err != nil {
			t.Fatal(err)
		}
	}

	start := time.Now()
	for round := range invRounds {
		var wg sync.WaitGroup
		for _, w := range workers {
			w.hoard = round%3 == 2
			wg.Go(func() {
				for range invOpsPerRound() {
					w.step(ctx)
				}
			})
		}
		wg.Wait() // the barrier: nothing allocates or releases until the next round
		checkQuiet(ctx, t, fmt.Sprintf("after round %d", round), checker, checkCli, cands, h, orc, &cnt)
		if t.Failed() {
			t.Fatalf("seed %d: invariant violated after round %d (see above)", seed, round)
		}
		if round%3 == 1 {
			forceResync(ctx, t, round%invAllocators, allocs, proxies, &resets[round%invAllocators], checker, checkCli, cands, orc, &cnt)
		}
	}
	t.Logf("%d operations in %v", cnt.ops.Load(), time.Since(start).Round(time.Millisecond))

	// 5. Release everything: every Terminating CIDR must go by itself,
	// through its allocator's re-check on release or the background
	// reconciler, without another DeleteCIDR.
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() { w.releaseAll(ctx) })
	}
	wg.Wait()
	var left []string
	eventually(t, "the Terminating CIDRs to be removed once their addresses were released", func() bool {
		left = left[:0]
		recs, err := checker.ListAddresses(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			left = append(left, r.Addr.String())
		}
		for _, cd := range readCIDRs(ctx, t, checker, cands) {
			if cd.Terminating {
				left = append(left, cd.Name+" (Terminating)")
			}
		}
		return len(left) == 0
	})
	// Then delete what is left: with no address, nothing may block.
	for i, cd := range readCIDRs(ctx, t, checker, cands) {
		if err := allocs[i%invAllocators].DeleteCIDR(ctx, cd.Name); err != nil {
			t.Errorf("DeleteCIDR(%s) with no address left: %v", cd.Name, err)
		}
	}
	eventually(t, "no CIDR and no record to remain", func() bool {
		recs, err := checker.ListAddresses(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(recs) == 0 && len(readCIDRs(ctx, t, checker, cands)) == 0
	})
	orc.waitCurrent(ctx, t)
	for _, v := range orc.violationList() {
		t.Error(v)
	}

	t.Logf("counters: %d ops, %d allocated, %d released, %d full, %d collisions, %d not in range, %d mismatch, "+
		"%d CIDRs created (%d name taken), %d deleted at once, %d deletions blocked, %d deleted already gone, "+
		"%d compactions, %d watch re-syncs, %d CIDR removals and %d address creations checked by the oracle, %d quiet points",
		cnt.ops.Load(), cnt.allocated.Load(), cnt.released.Load(), cnt.full.Load(), cnt.collisions.Load(),
		cnt.notInRange.Load(), cnt.mismatch.Load(), cnt.created.Load(), cnt.createExists.Load(),
		cnt.deleted.Load(), cnt.deleteBlocked.Load(), cnt.deleteNotFound.Load(), cnt.compactions.Load(),
		resyncs(), cnt.oracleDeletions.Load(), cnt.oracleAddressCreations.Load(), cnt.quietPoints.Load())
	// The run proves nothing unless the hard cases happened.
	for what, n := range map[string]int64{
		"static collision (ErrAllocated)":    cnt.collisions.Load(),
		"full range (ErrFull)":               cnt.full.Load(),
		"blocked deletion":                   cnt.deleteBlocked.Load(),
		"compaction":                         cnt.compactions.Load(),
		"watch re-sync":                      resyncs(),
		"CIDR removal checked by the oracle": cnt.oracleDeletions.Load(),
	} {
		if n == 0 {
			t.Errorf("seed %d: no %s happened: the run did not exercise it", seed, what)
		}
	}
	if t.Failed() {
		t.Logf("seed %d", seed)
	}
}

// holdings is what the workers hold, across workers: the owner (worker id)
// of every address handed out and not released.
type holdings struct {
	mu    sync.Mutex
	owner map[netip.Addr]int
}

// take records addrs as handed to worker id; it fails the test if any is
// held already (invariant 3).
func (h *holdings) take(t *testing.T, id int, op string, addrs ...netip.Addr) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, a := range addrs {
		if prev, ok := h.owner[a]; ok {
			t.Errorf("w%d: %s returned %s, which w%d holds and has not released", id, op, a, prev)
			continue
		}
		h.owner[a] = id
	}
}

// drop forgets a before it is released: once the release is in etcd,
// another worker may be given it at once.
func (h *holdings) drop(a netip.Addr) {
	h.mu.Lock()
	delete(h.owner, a)
	h.mu.Unlock()
}

// any returns one held address chosen by rng, if any.
func (h *holdings) any(rng *rand.Rand) (netip.Addr, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.owner) == 0 {
		return netip.Addr{}, false
	}
	all := make([]netip.Addr, 0, len(h.owner))
	for a := range h.owner {
		all = append(all, a)
	}
	slices.SortFunc(all, netip.Addr.Compare) // map order is not the seed's
	return all[rng.IntN(len(all))], true
}

type invWorker struct {
	id     int
	t      *testing.T
	a      *allocator.Allocator
	rng    *rand.Rand
	owner  ipaddress.ParentRef
	held   map[netip.Addr]bool
	h      *holdings
	cnt    *invCounters
	cands  []invCIDR
	cli    *clientv3.Client
	oracle *oracle
	hoard  bool // this round, release rarely
}

// step runs one random operation.
func (w *invWorker) step(ctx context.Context) {
	w.cnt.ops.Add(1)
	// Release more eagerly as holdings grow, so that ranges drain, except
	// in hoarding rounds, which fill them up.
	release := min(15+2*len(w.held), 70)
	if w.hoard {
		release = 5
	}
	if len(w.held) > 0 && w.rng.IntN(100) < release {
		w.release(ctx, w.anyHeld())
		return
	}
	switch r := w.rng.IntN(100); {
	case r < 30:
		w.allocateNext(ctx, ipaddress.IPv4)
	case r < 45:
		w.allocateNext(ctx, ipaddress.IPv6)
	case r < 65:
		w.allocateStatic(ctx)
	case r < 75:
		w.allocateDualStack(ctx)
	case r < 86:
		w.createCIDR(ctx)
	case r < 98:
		w.deleteCIDR(ctx)
	default:
		w.compact(ctx)
	}
}

// unexpected fails the test for an error the operation must not return.
func (w *invWorker) unexpected(op string, err error) {
	w.t.Errorf("w%d: %s: unexpected error: %v", w.id, op, err)
}

func (w *invWorker) got(op string, recs ...ipaddress.IPAddress) {
	addrs := make([]netip.Addr, len(recs))
	for i, r := range recs {
		if r.Parent != w.owner {
			w.t.Errorf("w%d: %s returned %s with parent %v, want %v", w.id, op, r.Addr, r.Parent, w.owner)
		}
		addrs[i] = r.Addr
		w.held[r.Addr] = true
	}
	w.h.take(w.t, w.id, op, addrs...)
	w.cnt.allocated.Add(int64(len(recs)))
}

// allocErr counts the refusals an allocation may meet and fails the test
// on any other error.
func (w *invWorker) allocErr(op string, err error) {
	switch {
	case errors.Is(err, allocator.ErrFull):
		w.cnt.full.Add(1)
	case errors.Is(err, allocator.ErrAllocated):
		w.cnt.collisions.Add(1)
	case errors.Is(err, allocator.ErrNotInRange):
		w.cnt.notInRange.Add(1)
	case errors.Is(err, allocator.ErrMismatch):
		w.cnt.mismatch.Add(1)
	default:
		w.unexpected(op, err)
	}
}

func (w *invWorker) allocateNext(ctx context.Context, f ipaddress.Family) {
	op := "AllocateNext(" + f.String() + ")"
	rec, err := w.a.AllocateNext(ctx, f, w.owner)
	if err != nil {
		w.allocErr(op, err)
		return
	}
	w.got(op, rec)
}

// randomAddr returns an address to request statically: often one somebody
// holds (a collision), else any address of the ranges, network and
// broadcast addresses included.
func (w *invWorker) randomAddr(f ipaddress.Family) netip.Addr {
	if w.rng.IntN(3) == 0 {
		if a, ok := w.h.any(w.rng); ok && ipaddress.FamilyOf(a) == f {
			return a
		}
	}
	if f == ipaddress.IPv4 {
		return netip.AddrFrom4([4]byte{10, 0, 0, byte(w.rng.IntN(256))})
	}
	return netip.AddrFrom16([16]byte{0: 0xfd, 15: byte(w.rng.IntN(64))})
}

func (w *invWorker) allocateStatic(ctx context.Context) {
	f := ipaddress.IPv4
	if w.rng.IntN(3) == 0 {
		f = ipaddress.IPv6
	}
	addr := w.randomAddr(f)
	op := "Allocate(" + addr.String() + ")"
	rec, err := w.a.Allocate(ctx, addr, w.owner)
	if err != nil {
		w.allocErr(op, err)
		return
	}
	if rec.Addr != addr {
		w.t.Errorf("w%d: %s returned %s", w.id, op, rec.Addr)
	}
	w.got(op, rec)
}

func (w *invWorker) allocateDualStack(ctx context.Context) {
	var v4, v6 netip.Addr // the next free ones, unless a static one is drawn
	if w.rng.IntN(4) == 0 {
		v4 = w.randomAddr(ipaddress.IPv4)
	}
	if w.rng.IntN(4) == 0 {
		v6 = w.randomAddr(ipaddress.IPv6)
	}
	op := fmt.Sprintf("AllocateDualStack(%v, %v)", v4, v6)
	r4, r6, err := w.a.AllocateDualStack(ctx, w.owner, v4, v6)
	if err != nil {
		w.allocErr(op, err)
		return
	}
	if !r4.Addr.Is4() || !r6.Addr.Is6() || (v4.IsValid() && r4.Addr != v4) || (v6.IsValid() && r6.Addr != v6) {
		w.t.Errorf("w%d: %s returned %s and %s", w.id, op, r4.Addr, r6.Addr)
	}
	w.got(op, r4, r6)
}

func (w *invWorker) anyHeld() netip.Addr {
	all := make([]netip.Addr, 0, len(w.held))
	for a := range w.held {
		all = append(all, a)
	}
	slices.SortFunc(all, netip.Addr.Compare)
	return all[w.rng.IntN(len(all))]
}

func (w *invWorker) release(ctx context.Context, addr netip.Addr) {
	delete(w.held, addr)
	w.h.drop(addr)
	if err := w.a.Release(ctx, addr); err != nil {
		// The worker held it: nobody else may have released it.
		w.unexpected("Release("+addr.String()+")", err)
		return
	}
	w.cnt.released.Add(1)
}

func (w *invWorker) releaseAll(ctx context.Context) {
	for len(w.held) > 0 {
		w.release(ctx, w.anyHeld())
	}
}

func (w *invWorker) createCIDR(ctx context.Context) {
	cd := w.cands[w.rng.IntN(len(w.cands))]
	_, err := w.a.CreateCIDR(ctx, cd.name, cd.prefixes...)
	switch {
	case err == nil:
		w.cnt.created.Add(1)
	case errors.Is(err, allocator.ErrExists): // live or still Terminating
		w.cnt.createExists.Add(1)
	default:
		w.unexpected("CreateCIDR("+cd.name+")", err)
	}
}

func (w *invWorker) deleteCIDR(ctx context.Context) {
	cd := w.cands[w.rng.IntN(len(w.cands))]
	err := w.a.DeleteCIDR(ctx, cd.name)
	switch {
	case err == nil:
		w.cnt.deleted.Add(1)
	case errors.Is(err, allocator.ErrDeletionBlocked):
		w.cnt.deleteBlocked.Add(1)
	case errors.Is(err, allocator.ErrNotFound):
		w.cnt.deleteNotFound.Add(1)
	default:
		w.unexpected("DeleteCIDR("+cd.name+")", err)
	}
}

// compact compacts etcd's history up to the current revision, so that
// allocators whose watch lags behind it must re-list. It stops at the
// oracle's revision, which must see every change.
func (w *invWorker) compact(ctx context.Context) {
	resp, err := w.cli.Get(ctx, "/compact-probe")
	if err != nil {
		w.unexpected("reading the revision to compact", err)
		return
	}
	rev := min(resp.Header.Revision, w.oracle.revision())
	_, err = w.cli.Compact(ctx, rev)
	switch {
	case err == nil:
		w.cnt.compactions.Add(1)
	case errors.Is(err, rpctypes.ErrCompacted): // another worker compacted past rev
	default:
		w.unexpected(fmt.Sprintf("compacting at %d", rev), err)
	}
}

// resetCounter counts the Resets an allocator's watch makes: after the
// first, each is a re-sync after a lost (compacted) history.
type resetCounter struct {
	*Store
	n *atomic.Int64
}

func (s resetCounter) Watch(ctx context.Context, w store.Watcher) error {
	return s.Store.Watch(ctx, resetCounting{w, s.n})
}

type resetCounting struct {
	store.Watcher
	n *atomic.Int64
}

func (w resetCounting) Reset(s store.Snapshot) {
	w.n.Add(1)
	w.Watcher.Reset(s)
}

// quickReconnectClient is newClient with a short reconnection backoff:
// gRPC's default waits about a second after forceResync cuts the
// connection, which would be most of the run.
func quickReconnectClient(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: 5 * time.Second,
		})},
	})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// forceResync makes allocator k lose part of etcd's history, as one that
// lags behind a compaction does: it cuts k off, changes the store through
// another allocator, compacts past the change and lets k reconnect. Its
// watch must then re-list and Reset, and its index show etcd's CIDRs.
// Random compactions during the rounds rarely catch a watch behind.
func forceResync(ctx context.Context, t *testing.T, k int, allocs []*allocator.Allocator, proxies []*tcpProxy, resets *atomic.Int64,
	checker *Store, cli *clientv3.Client, cands []invCIDR, orc *oracle, cnt *invCounters) {
	t.Helper()
	before := resets.Load()
	proxies[k].Pause()
	other := allocs[(k+1)%len(allocs)]
	const scratch = "resync-scratch" // in no range the workers use
	if _, err := other.CreateCIDR(ctx, scratch, netip.MustParsePrefix("192.168.255.0/30")); err != nil {
		t.Fatal(err)
	}
	if err := other.DeleteCIDR(ctx, scratch); err != nil {
		t.Fatal(err)
	}
	orc.waitCurrent(ctx, t)
	if _, err := cli.Compact(ctx, orc.revision()); err != nil {
		t.Fatalf("compacting: %v", err)
	}
	cnt.compactions.Add(1)
	proxies[k].Resume()
	eventually(t, fmt.Sprintf("allocator %d to re-sync after a compaction", k), func() bool { return resets.Load() > before })
	eventually(t, fmt.Sprintf("allocator %d to show etcd's CIDRs after re-syncing", k), func() bool {
		return describe(allocs[k].CIDRs()) == describe(readCIDRs(ctx, t, checker, cands))
	})
}

// readCIDRs reads the candidates' CIDRs from etcd, plainly, by name.
func readCIDRs(ctx context.Context, t *testing.T, s *Store, cands []invCIDR) []cidrset.CIDR {
	t.Helper()
	var out []cidrset.CIDR
	for _, cd := range cands {
		got, err := s.GetCIDR(ctx, cd.name)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, got)
	}
	return out
}

// checkQuiet checks invariants 1 and 4 (and 3, through the parents) on
// what etcd holds while nothing allocates or releases; the allocators may
// still remove Terminating CIDRs. The addresses are read before the CIDRs:
// a removal in between is one the oracle checks, and a CIDR that still
// exists afterwards existed when the addresses were read.
func checkQuiet(ctx context.Context, t *testing.T, when string, checker *Store, cli *clientv3.Client, cands []invCIDR, h *holdings, orc *oracle, cnt *invCounters) {
	t.Helper()
	cnt.quietPoints.Add(1)
	recs, err := checker.ListAddresses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cidrs := readCIDRs(ctx, t, checker, cands)
	index := cidrset.NewIndex(cidrs)
	h.mu.Lock()
	want := sortedAddrs(h.owner)
	inStore := map[netip.Addr]bool{}
	for _, r := range recs {
		inStore[r.Addr] = true
		// 1. No orphan.
		contained := false
		index.Containing(r.Addr, func(*cidrset.CIDR, netip.Prefix) bool { contained = true; return false })
		if !contained {
			t.Errorf("%s: record %s (parent %v) is host-contained by no CIDR; CIDRs: %s", when, r.Addr, r.Parent, describe(cidrs))
		}
		// 4. Nothing leaked; 3. held by its one owner.
		id, ok := h.owner[r.Addr]
		switch {
		case !ok:
			t.Errorf("%s: record %s (parent %v) is held by no caller: leaked", when, r.Addr, r.Parent)
		case r.Parent.Name != fmt.Sprintf("w%d", id):
			t.Errorf("%s: record %s has parent %v, but w%d holds it", when, r.Addr, r.Parent, id)
		}
	}
	// 4. Nothing lost.
	for _, a := range want {
		if !inStore[a] {
			t.Errorf("%s: w%d holds %s, but etcd has no record of it: lost", when, h.owner[a], a)
		}
	}
	h.mu.Unlock()
	// 2. Every removal and creation so far, checked at its revision.
	orc.waitCurrent(ctx, t)
	for _, v := range orc.violationList() {
		t.Errorf("%s: %s", when, v)
	}
}

func sortedAddrs(m map[netip.Addr]int) []netip.Addr {
	out := make([]netip.Addr, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

func describe(cidrs []cidrset.CIDR) string {
	var parts []string
	for _, c := range cidrs {
		s := fmt.Sprintf("%s%v@%d", c.Name, c.Prefixes, c.Revision)
		if c.Terminating {
			s += "(T)"
		}
		parts = append(parts, s)
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// oracle follows etcd's history of the store's keys, event by event, and
// checks each change against the state just before it (invariant 2):
//   - a CIDR removed leaves no address it host-contained without another
//     live (not Terminating) CIDR host-containing it (SPEC §4, Beyond);
//   - an address created is host-contained by a live CIDR (SPEC §3:
//     Terminating CIDRs serve nothing new).
//
// It reads from a plain etcd watch, not the store's, so that it sees every
// revision; compactions stop at its revision (invWorker.compact).
type oracle struct {
	mu         sync.Mutex
	rev        int64
	cidrs      map[string]cidrset.CIDR
	addrs      map[netip.Addr]int64 // address → revision of its creation
	violations []string
	cnt        *invCounters
	cli        *clientv3.Client
}

func startOracle(ctx context.Context, t *testing.T, cli *clientv3.Client, s *Store, cnt *invCounters) *oracle {
	t.Helper()
	start, end := s.watchRange()
	resp, err := cli.Get(ctx, start, clientv3.WithRange(end), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Fatalf("store prefix not empty: %d keys", resp.Count)
	}
	o := &oracle{rev: resp.Header.Revision, cidrs: map[string]cidrset.CIDR{}, addrs: map[netip.Addr]int64{}, cnt: cnt, cli: cli}
	wctx, cancel := context.WithCancel(ctx)
	ch := cli.Watch(wctx, start, clientv3.WithRange(end), clientv3.WithRev(o.rev+1))
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for resp := range ch {
			if err := resp.Err(); err != nil {
				o.violate(fmt.Sprintf("oracle: watch failed, history not checked past revision %d: %v", o.revision(), err))
				return
			}
			for _, ev := range resp.Events {
				if e, ok := s.event(ev); ok {
					o.apply(e)
				} else {
					o.violate(fmt.Sprintf("oracle: undecodable event for key %q", ev.Kv.Key))
				}
			}
		}
	}()
	return o
}

func (o *oracle) violate(v string) {
	o.mu.Lock()
	o.violations = append(o.violations, v)
	o.mu.Unlock()
}

func (o *oracle) violationList() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.violations)
}

func (o *oracle) revision() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.rev
}

// liveCoverLocked returns whether a CIDR other than except, not Terminating,
// host-contains a.
func (o *oracle) liveCoverLocked(a netip.Addr, except string) bool {
	for _, c := range o.cidrs {
		if c.Terminating || c.Name == except {
			continue
		}
		for _, p := range c.Prefixes {
			if cidrset.HostContains(p, a) {
				return true
			}
		}
	}
	return false
}

func (o *oracle) stateLocked() string {
	all := make([]cidrset.CIDR, 0, len(o.cidrs))
	for _, c := range o.cidrs {
		all = append(all, c)
	}
	return describe(all)
}

func (o *oracle) apply(e store.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.rev = e.Revision
	switch e.Kind {
	case store.CIDRPut:
		o.cidrs[e.CIDR.Name] = e.CIDR
	case store.CIDRDeleted:
		gone, ok := o.cidrs[e.CIDR.Name]
		delete(o.cidrs, e.CIDR.Name)
		if !ok {
			o.violations = append(o.violations, fmt.Sprintf("revision %d: CIDR %s removed, but it never existed", e.Revision, e.CIDR.Name))
			return
		}
		o.cnt.oracleDeletions.Add(1)
		if !gone.Terminating {
			o.violations = append(o.violations, fmt.Sprintf("revision %d: CIDR %s removed without being Terminating", e.Revision, gone.Name))
		}
		for a, created := range o.addrs {
			for _, p := range gone.Prefixes {
				if cidrset.HostContains(p, a) && !o.liveCoverLocked(a, gone.Name) {
					o.violations = append(o.violations, fmt.Sprintf(
						"revision %d: CIDR %s%v@%d removed while it held %s (created at revision %d), which no live CIDR host-contains; CIDRs left: %s",
						e.Revision, gone.Name, gone.Prefixes, gone.Revision, a, created, o.stateLocked()))
				}
			}
		}
	case store.AddressPut:
		o.cnt.oracleAddressCreations.Add(1)
		if !o.liveCoverLocked(e.Address.Addr, "") {
			o.violations = append(o.violations, fmt.Sprintf("revision %d: address %s (parent %v) created, but no live CIDR host-contains it; CIDRs: %s",
				e.Revision, e.Address.Addr, e.Address.Parent, o.stateLocked()))
		}
		o.addrs[e.Address.Addr] = e.Revision
	case store.AddressDeleted:
		delete(o.addrs, e.Address.Addr)
	}
}

// waitCurrent waits until the oracle has applied every change etcd had
// when it was called.
func (o *oracle) waitCurrent(ctx context.Context, t *testing.T) {
	t.Helper()
	resp, err := o.cli.Get(ctx, "/compact-probe")
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, fmt.Sprintf("the oracle to reach revision %d", resp.Header.Revision), func() bool {
		return o.revision() >= resp.Header.Revision || len(o.violationList()) > 0
	})
}
