package etcd

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// faultOps is how many AllocateNext+Release cycles the fault test runs:
// 50,000, fewer under the race detector (which slows the in-process etcd
// members too), or NETIPAM_FAULT_OPS.
func faultOps(t *testing.T) int {
	if s := os.Getenv("NETIPAM_FAULT_OPS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("NETIPAM_FAULT_OPS=%q", s)
		}
		return n
	}
	if raceEnabled {
		return 4000
	}
	return 50000
}

// faultStats counts what the fault test saw.
type faultStats struct {
	allocs, releases, kept             atomic.Int64
	allocErrs, allocErrsDown           atomic.Int64
	allocUnknown                       atomic.Int64 // errors matching store.ErrOutcomeUnknown
	releaseErrs, releaseErrsDown       atomic.Int64
	cidrsCreated, cidrsDeleted         atomic.Int64
	cidrsBlocked, cidrErrs             atomic.Int64
	fromExtra                          atomic.Int64
	ownerChecks, ownerErrs             atomic.Int64
	ownerUnknown                       atomic.Int64 // records of failed attempts that committed after all
	firstErrMu                         sync.Mutex
	firstErrs                          map[string]int
	memberDown                         atomic.Bool
	downFor                            time.Duration
	stopped                            string
	stoppedAtOps, restartedAtOps, done atomic.Int64
}

func (st *faultStats) noteErr(err error) {
	st.firstErrMu.Lock()
	defer st.firstErrMu.Unlock()
	msg := err.Error()
	if len(msg) > 120 {
		msg = msg[:120]
	}
	st.firstErrs[msg]++
}

// TestFaultMemberLoss runs three allocators, each with its own client of a
// 3-member cluster, 16 goroutines each allocating and releasing, while the
// leader is stopped and restarted and extra CIDRs are created and deleted.
// No caller may ever be handed an address another caller holds, another
// instance's AddressesOf must show every address it was handed, and at the
// end etcd must hold every acknowledged, unreleased address, each inside a
// CIDR that still exists, and every instance's owner index must match the
// records.
func TestFaultMemberLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("fault test skipped in -short mode")
	}
	ops := faultOps(t)
	const (
		instances = 3
		workers   = 16
		keepEvery = 100 // every keepEvery-th allocation of a worker is kept to the end
		prefix    = "/fault"
	)
	ctx := testCtx(t, 10*time.Minute)
	c := startCluster(t, 3)
	admin, err := New(c.newClient(t), WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()

	var allocs []*allocator.Allocator
	var stores []*Store
	for range instances {
		st, err := New(c.newClient(t), WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		stores = append(stores, st)
		// Build the owner index now, so that it follows the whole run.
		if _, err := st.AddressesOf(ctx, ipaddress.ParentRef{Resource: "services", Name: "nobody"}); err != nil {
			t.Fatal(err)
		}
		a, err := allocator.New(ctx, st, allocator.WithPolicy(allocator.RandomOrder()))
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		allocs = append(allocs, a)
	}
	base, err := allocs[0].CreateCIDR(ctx, "base", netip.MustParsePrefix("10.0.0.0/20"))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range allocs {
		if err := a.WaitRevision(ctx, base.Revision); err != nil {
			t.Fatal(err)
		}
	}

	st := &faultStats{firstErrs: map[string]int{}}
	var held sync.Map // address -> owner: acknowledged and not yet released
	var remaining atomic.Int64
	remaining.Store(int64(ops))
	start := time.Now()
	var wg sync.WaitGroup
	for i, a := range allocs {
		for g := range workers {
			wg.Go(func() { faultWorker(t, ctx, a, stores[(i+1)%instances], i, g, keepEvery, &remaining, &held, st) })
		}
	}

	// CIDR churn: extra IPv4 CIDRs come and go; "base" always stays.
	churnDone := make(chan struct{})
	churnStop := make(chan struct{})
	go func() {
		defer close(churnDone)
		faultChurn(ctx, allocs, churnStop, st)
	}()

	// The fault: stop the leader a quarter into the run, restart it after
	// five seconds or another 20% of the operations, whichever is later.
	faultDone := make(chan struct{})
	go func() {
		defer close(faultDone)
		waitOps := func(n int64) {
			for st.done.Load() < n && ctx.Err() == nil && remaining.Load() > 0 {
				time.Sleep(20 * time.Millisecond)
			}
		}
		waitOps(int64(ops / 4))
		leader := -1
		for i := range c.members {
			if e := c.Member(i); e != nil && e.Server.Leader() == e.Server.MemberID() {
				leader = i
			}
		}
		if leader < 0 {
			leader = 0
		}
		st.stoppedAtOps.Store(st.done.Load())
		st.stopped = fmt.Sprintf("member %d (the leader)", leader)
		st.memberDown.Store(true)
		down := time.Now()
		c.Stop(leader)
		time.Sleep(5 * time.Second)
		waitOps(st.stoppedAtOps.Load() + int64(ops/5))
		if err := c.start(leader); err != nil {
			t.Errorf("restarting member %d: %v", leader, err)
		}
		st.memberDown.Store(false)
		st.downFor = time.Since(down)
		st.restartedAtOps.Store(st.done.Load())
	}()

	wg.Wait()
	elapsed := time.Since(start)
	close(churnStop)
	<-churnDone
	<-faultDone

	// Logged whatever the outcome: a failure is read with them.
	t.Logf("%d AllocateNext+Release cycles by %d goroutines in %v (%.0f cycles/s); %d addresses kept",
		ops, instances*workers, elapsed.Round(time.Millisecond), float64(ops)/elapsed.Seconds(), st.kept.Load())
	t.Logf("stopped %s after %d cycles for %v, restarted after %d", st.stopped, st.stoppedAtOps.Load(), st.downFor.Round(time.Millisecond), st.restartedAtOps.Load())
	var readBacks int64
	for _, s := range stores {
		readBacks += s.readBacks.Load()
	}
	t.Logf("errors: AllocateNext %d (%d while the member was down, %d of unknown outcome), Release %d (%d while down); all retried; %d failed creates found applied by read-back and reported as successes",
		st.allocErrs.Load(), st.allocErrsDown.Load(), st.allocUnknown.Load(), st.releaseErrs.Load(), st.releaseErrsDown.Load(), readBacks)
	t.Logf("CIDRs: %d extra created, %d removed, %d deletions left terminating, %d churn errors; %d allocations came from extra CIDRs",
		st.cidrsCreated.Load(), st.cidrsDeleted.Load(), st.cidrsBlocked.Load(), st.cidrErrs.Load(), st.fromExtra.Load())
	t.Logf("owner index: %d AddressesOf checks on another instance, %d errors (retried); %d records of attempts reported failed found beside the handed one", st.ownerChecks.Load(), st.ownerErrs.Load(), st.ownerUnknown.Load())
	for msg, n := range st.firstErrs {
		t.Logf("  %dx %s", n, msg)
	}
	if t.Failed() {
		return
	}

	checkFaultEnd(t, ctx, c, admin, stores, &held, st.allocUnknown.Load())
}

// faultWorker runs cycles until none remain: AllocateNext (retried until it
// succeeds), a check against every address held, every tenth cycle a check
// that other (another instance's store) shows the address as the owner's,
// then Release (retried; after an outcome unknown, at the record's
// revision), except every keepEvery-th address, which it keeps.
func faultWorker(t *testing.T, ctx context.Context, a *allocator.Allocator, other *Store, inst, g, keepEvery int, remaining *atomic.Int64, held *sync.Map, st *faultStats) {
	for n := 0; remaining.Add(-1) >= 0; n++ {
		owner := ipaddress.ParentRef{Resource: "services", Namespace: fmt.Sprintf("i%d", inst), Name: fmt.Sprintf("w%d-%d", g, n)}
		var rec ipaddress.IPAddress
		var failed []error // this owner's failed attempts, for a failure's message
		deadline := time.Now().Add(time.Minute)
		for {
			octx, cancel := context.WithTimeout(ctx, 10*time.Second)
			r, err := a.AllocateNext(octx, ipaddress.IPv4, owner)
			cancel()
			if err == nil {
				rec = r
				break
			}
			failed = append(failed, err)
			st.allocErrs.Add(1)
			if errors.Is(err, store.ErrOutcomeUnknown) {
				st.allocUnknown.Add(1)
			}
			if st.memberDown.Load() {
				st.allocErrsDown.Add(1)
			}
			st.noteErr(err)
			if errors.Is(err, allocator.ErrFull) || errors.Is(err, allocator.ErrMismatch) || time.Now().After(deadline) || ctx.Err() != nil {
				t.Errorf("AllocateNext for %v: %v", owner, err)
				return
			}
			time.Sleep(time.Duration(10+rand.IntN(40)) * time.Millisecond)
		}
		if prev, loaded := held.LoadOrStore(rec.Addr, owner); loaded {
			t.Errorf("AllocateNext gave %s to %v while %v holds it", rec.Addr, owner, prev)
			return
		}
		if !netip.MustParsePrefix("10.0.0.0/20").Contains(rec.Addr) {
			st.fromExtra.Add(1)
		}
		st.allocs.Add(1)
		if n%10 == 0 && !checkOwnerIndex(t, ctx, other, rec, failed, deadline, st) {
			return
		}
		if n%keepEvery == keepEvery-1 {
			st.kept.Add(1)
			st.done.Add(1)
			continue
		}
		// No longer claimed from here on: once Release starts, the address
		// may be free for others.
		held.Delete(rec.Addr)
		unknown := false // a release of unknown outcome was tried
		for {
			octx, cancel := context.WithTimeout(ctx, 10*time.Second)
			var err error
			if unknown {
				// It may have been applied, and the address handed to
				// another owner since: only this record may go.
				err = a.ReleaseAt(octx, rec.Addr, rec.Revision)
			} else {
				err = a.Release(octx, rec.Addr)
			}
			cancel()
			if err == nil || errors.Is(err, store.ErrNotFound) || (unknown && errors.Is(err, store.ErrConflict)) {
				break
			}
			unknown = unknown || errors.Is(err, store.ErrOutcomeUnknown)
			st.releaseErrs.Add(1)
			if st.memberDown.Load() {
				st.releaseErrsDown.Add(1)
			}
			st.noteErr(err)
			if time.Now().After(deadline) || ctx.Err() != nil {
				t.Errorf("Release(%s): %v", rec.Addr, err)
				return
			}
			time.Sleep(time.Duration(10+rand.IntN(40)) * time.Millisecond)
		}
		st.releases.Add(1)
		st.done.Add(1)
	}
}

// checkOwnerIndex checks that other's AddressesOf shows rec for its owner
// (owners are unique per cycle), retrying errors until deadline, and no
// other record, but for one per failed attempt of unknown outcome
// (store.ErrOutcomeUnknown): a create whose answer was lost may commit
// after the read-back found nothing (see CreateAddresses), as the end's
// count of records nobody was told of allows too. Any other failure left
// nothing.
func checkOwnerIndex(t *testing.T, ctx context.Context, other *Store, rec ipaddress.IPAddress, failed []error, deadline time.Time, st *faultStats) bool {
	st.ownerChecks.Add(1)
	unknown := 0
	for _, err := range failed {
		if errors.Is(err, store.ErrOutcomeUnknown) {
			unknown++
		}
	}
	for {
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		recs, err := other.AddressesOf(octx, rec.Parent)
		cancel()
		if err == nil {
			handed := slices.IndexFunc(recs, func(r ipaddress.IPAddress) bool {
				return r.Addr == rec.Addr && r.Parent == rec.Parent && r.Revision == rec.Revision && r.Created.Equal(rec.Created)
			})
			if extra := len(recs) - 1; extra > 0 && handed >= 0 && extra <= unknown {
				st.ownerUnknown.Add(int64(extra))
			}
			if handed < 0 || len(recs)-1 > unknown {
				t.Errorf("another instance's AddressesOf(%v) = %+v right after it was handed %+v, after %d failed attempts (%d of unknown outcome): %v", rec.Parent, recs, rec, len(failed), unknown, failed)
				return false
			}
			return true
		}
		st.ownerErrs.Add(1)
		st.noteErr(fmt.Errorf("AddressesOf: %w", err))
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Errorf("AddressesOf(%v): %v", rec.Parent, err)
			return false
		}
		time.Sleep(time.Duration(10+rand.IntN(40)) * time.Millisecond)
	}
}

// faultChurn creates an extra CIDR every 300 ms and asks for the deletion of
// the oldest extra once more than two exist. Some extras lie inside "base"
// (their deletion goes through at once), the others outside (it waits for
// their addresses).
func faultChurn(ctx context.Context, allocs []*allocator.Allocator, stop <-chan struct{}, st *faultStats) {
	var live []string
	for k := 0; ; k++ {
		select {
		case <-stop:
			return
		case <-time.After(300 * time.Millisecond):
		}
		a := allocs[k%len(allocs)]
		name := fmt.Sprintf("extra-%d", k)
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 1, byte(k % 64), 0}), 24)
		if k%3 == 0 {
			p = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, byte(k % 16), 0}), 24)
		}
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := a.CreateCIDR(octx, name, p)
		cancel()
		if err == nil || errors.Is(err, store.ErrExists) {
			if err == nil {
				st.cidrsCreated.Add(1)
			}
			live = append(live, name)
		} else {
			st.cidrErrs.Add(1)
			st.noteErr(fmt.Errorf("CreateCIDR: %w", err))
		}
		if len(live) <= 2 {
			continue
		}
		octx, cancel = context.WithTimeout(ctx, 10*time.Second)
		err = a.DeleteCIDR(octx, live[0])
		cancel()
		switch {
		case err == nil:
			st.cidrsDeleted.Add(1)
			live = live[1:]
		case errors.Is(err, allocator.ErrDeletionBlocked):
			st.cidrsBlocked.Add(1)
			live = live[1:] // Terminating: the allocators remove it once free
		default:
			st.cidrErrs.Add(1)
			st.noteErr(fmt.Errorf("DeleteCIDR: %w", err))
		}
	}
}

// checkFaultEnd checks etcd's content against what callers were told, and
// the owner index of each of stores against etcd's content. Of the
// allocations reported failed, only the unknown ones, of which there were
// unknown, may have left a record.
func checkFaultEnd(t *testing.T, ctx context.Context, c *testCluster, admin *Store, stores []*Store, held *sync.Map, unknown int64) {
	cli := admin.cli
	// Every member is back and holds the same revision eventually; read
	// through the admin client (linearizable).
	resp, err := cli.Get(ctx, admin.ipPfx, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	rev := resp.Header.Revision
	records := map[netip.Addr]ipaddress.IPAddress{}
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		a, err := addrFromKey(key, admin.ipPfx)
		if err != nil {
			t.Fatal(err)
		}
		r, err := recordFromKV(key, a, kv.Value, kv.CreateRevision)
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := records[a]; dup {
			t.Fatalf("address %s stored twice", a)
		}
		records[a] = r
	}
	// Layout 2 writes no owner key; every instance's owner index holds
	// exactly the records.
	oresp, err := cli.Get(ctx, admin.ownerPfx, clientv3.WithPrefix(), clientv3.WithRev(rev), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if oresp.Count != 0 {
		t.Errorf("%d owner keys", oresp.Count)
	}
	for i, s := range stores {
		x := s.owners.Load()
		if err := x.waitFor(ctx, rev); err != nil {
			t.Fatal(err)
		}
		x.mu.Lock()
		if len(x.byAddr) != len(records) || len(x.corrupt) != 0 {
			t.Errorf("instance %d: owner index holds %d addresses and %d corrupt keys, etcd %d records", i, len(x.byAddr), len(x.corrupt), len(records))
		}
		for a, r := range records {
			at, ok := x.byAddr[a]
			if !ok || at.o.ref != r.Parent {
				t.Errorf("instance %d: owner index has %s as %+v's, etcd as %v's", i, a, at.o, r.Parent)
				continue
			}
			if e := at.o.addrs[at.i]; e.addr != a || e.rev != r.Revision || e.created != r.Created.UnixNano() {
				t.Errorf("instance %d: owner index entry %d of %+v for %+v", i, at.i, at.o.addrs, r)
			}
		}
		x.mu.Unlock()
	}
	// CIDRs present at the same revision.
	cresp, err := cli.Get(ctx, admin.cidrPfx, clientv3.WithPrefix(), clientv3.WithRev(rev))
	if err != nil {
		t.Fatal(err)
	}
	var cidrs []cidrset.CIDR
	terminating := 0
	for _, kv := range cresp.Kvs {
		key := string(kv.Key)
		cd, err := cidrFromKV(key, key[len(admin.cidrPfx):], kv.Value, kv.ModRevision)
		if err != nil {
			t.Fatal(err)
		}
		if cd.Terminating {
			terminating++
		}
		cidrs = append(cidrs, cd)
	}
	// Every acknowledged, unreleased address is in etcd, with its owner.
	nHeld := 0
	held.Range(func(k, v any) bool {
		nHeld++
		a, owner := k.(netip.Addr), v.(ipaddress.ParentRef)
		if r, ok := records[a]; !ok {
			t.Errorf("acknowledged address %s of %v is not in etcd", a, owner)
		} else if r.Parent != owner {
			t.Errorf("acknowledged address %s of %v is held by %v in etcd", a, owner, r.Parent)
		}
		return true
	})
	// Every record lies inside a CIDR that still exists (live or Terminating).
	for a := range records {
		in := false
		for _, cd := range cidrs {
			for _, p := range cd.Prefixes {
				in = in || cidrset.HostContains(p, a)
			}
		}
		if !in {
			t.Errorf("address %s lies outside every CIDR in etcd", a)
		}
	}
	leaked := len(records) - nHeld
	t.Logf("end: %d records in etcd, %d acknowledged and held, %d not acknowledged (creates whose outcome the caller never learned); %d CIDRs (%d terminating)",
		len(records), nHeld, leaked, len(cidrs), terminating)
	if leaked < 0 {
		t.Errorf("fewer records than held addresses")
	}
	if int64(leaked) > unknown {
		t.Errorf("%d records nobody was told of, but only %d allocations failed with an outcome unknown: a failure said to leave nothing left a record", leaked, unknown)
	}
	var _ store.Store = admin
}
