package etcd

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// nthOwner is the owner of the i-th allocation of the outage test.
func nthOwner(i int) ipaddress.ParentRef {
	return ipaddress.ParentRef{Resource: "services", Namespace: "churn", Name: fmt.Sprintf("svc-%d", i)}
}

// typedOutage reports whether err, the error of a call made while the
// allocator's etcd was unreachable, is one a caller can act on: its ctx's
// error, or an outcome unknown.
func typedOutage(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, store.ErrOutcomeUnknown)
}

// usedIn counts the records the store holds inside p.
func usedIn(t *testing.T, ctx context.Context, s *Store, p netip.Prefix) int {
	t.Helper()
	recs, err := s.ListAddresses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range recs {
		if p.Contains(r.Addr) {
			n++
		}
	}
	return n
}

// An allocator cut off from etcd fails its calls with typed errors and
// writes nothing; once back, after other allocators filled and partly
// emptied the range and etcd compacted past its watch, its index matches
// the store: it serves exactly the free addresses, then says the range is
// full.
func TestAnAllocatorCutOffPastACompactionResumesWithTheStoresState(t *testing.T) {
	ctx := testCtx(t, 3*time.Minute)
	c := startCluster(t, 1)
	px := startProxy(t, c.members[0].client.Host)
	const prefix = "/outage"
	cli := c.newClient(t)
	s1, err := New(cli, WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	s2, err := New(c.newClient(t, "http://"+px.Addr()), WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	a1, err := allocator.New(ctx, s1)
	if err != nil {
		t.Fatal(err)
	}
	defer a1.Close()
	a2, err := allocator.New(ctx, s2)
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	base := netip.MustParsePrefix("10.0.0.0/26") // 62 addresses
	bc, err := a1.CreateCIDR(ctx, "base", base)
	if err != nil {
		t.Fatal(err)
	}
	if err := a2.WaitRevision(ctx, bc.Revision); err != nil {
		t.Fatal(err)
	}
	var mine []netip.Addr
	for i := range 10 {
		r, err := a2.AllocateNext(ctx, ipaddress.IPv4, nthOwner(i))
		if err != nil {
			t.Fatal(err)
		}
		mine = append(mine, r.Addr)
	}

	px.Pause()
	cut := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, time.Second) }
	cctx, cancel := cut()
	_, err = a2.AllocateNext(cctx, ipaddress.IPv4, nthOwner(100))
	cancel()
	if err == nil || !typedOutage(err) {
		t.Errorf("AllocateNext cut off: %v, want a ctx error or ErrOutcomeUnknown", err)
	}
	cctx, cancel = cut()
	err = a2.Release(cctx, mine[0])
	cancel()
	if err == nil || !typedOutage(err) {
		t.Errorf("Release cut off: %v, want a ctx error or ErrOutcomeUnknown", err)
	}
	cctx, cancel = cut()
	_, err = a2.CreateCIDR(cctx, "other", netip.MustParsePrefix("10.1.0.0/24"))
	cancel()
	if err == nil || !typedOutage(err) {
		t.Errorf("CreateCIDR cut off: %v, want a ctx error or ErrOutcomeUnknown", err)
	}

	// Meanwhile: the others release a2's addresses, fill the range, free
	// some, and etcd compacts past a2's watch.
	for _, addr := range mine {
		if err := a1.Release(ctx, addr); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for ; ; n++ {
		if _, err := a1.AllocateNext(ctx, ipaddress.IPv4, nthOwner(1000+n)); errors.Is(err, allocator.ErrFull) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if n != 62 {
		t.Fatalf("a1 allocated %d addresses of %s, want 62", n, base)
	}
	freed := []netip.Addr{netip.MustParseAddr("10.0.0.3"), netip.MustParseAddr("10.0.0.40"), netip.MustParseAddr("10.0.0.62")}
	for _, addr := range freed {
		if err := a1.Release(ctx, addr); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := cli.Get(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	px.Resume()

	sync, err := a1.CreateCIDR(ctx, "sync", netip.MustParsePrefix("fd00:5::/120"))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	err = a2.WaitRevision(wctx, sync.Revision)
	cancel()
	if err != nil {
		t.Fatalf("a2 back online did not reach revision %d: %v", sync.Revision, err)
	}
	for _, a := range []*allocator.Allocator{a1, a2} {
		u, err := a.Usage("base")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := u.Prefixes[0].Used.String(), fmt.Sprint(usedIn(t, ctx, s1, base)); got != want {
			t.Errorf("index counts %s used in %s, the store holds %s", got, base, want)
		}
	}
	// No record was left by a call made while cut off.
	if got, err := s1.AddressesOf(ctx, nthOwner(100)); err != nil || len(got) > 0 {
		t.Errorf("the allocation made cut off left %v, %v", got, err)
	}
	if _, err := s1.GetCIDR(ctx, "other"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the CIDR created cut off: %v, want ErrNotFound", err)
	}
	// a2 serves exactly the freed addresses, then the range is full.
	got := map[netip.Addr]bool{}
	for i := range len(freed) {
		r, err := a2.AllocateNext(ctx, ipaddress.IPv4, nthOwner(2000+i))
		if err != nil {
			t.Fatalf("a2 allocation %d after the outage: %v", i, err)
		}
		got[r.Addr] = true
	}
	for _, addr := range freed {
		if !got[addr] {
			t.Errorf("a2 did not hand out %s, freed while it was cut off (got %v)", addr, got)
		}
	}
	if _, err := a2.AllocateNext(ctx, ipaddress.IPv4, nthOwner(3000)); !errors.Is(err, allocator.ErrFull) {
		t.Errorf("a2 on a full range: %v, want ErrFull", err)
	}
}

// With its only member stopped, calls fail with typed errors and write
// nothing; once it is back, allocations resume and every allocator's index
// matches the store.
func TestAllocationsResumeAfterTheWholeClusterRestarts(t *testing.T) {
	ctx := testCtx(t, 3*time.Minute)
	c := startCluster(t, 1)
	const prefix = "/restart"
	var as []*allocator.Allocator
	var ss []*Store
	for range 2 {
		s, err := New(c.newClient(t), WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		a, err := allocator.New(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		as, ss = append(as, a), append(ss, s)
	}
	base := netip.MustParsePrefix("10.0.0.0/27") // 30 addresses
	bc, err := as[0].CreateCIDR(ctx, "base", base)
	if err != nil {
		t.Fatal(err)
	}
	if err := as[1].WaitRevision(ctx, bc.Revision); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := as[i%2].AllocateNext(ctx, ipaddress.IPv4, nthOwner(i)); err != nil {
			t.Fatal(err)
		}
	}
	c.Stop(0)
	for i, a := range as {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := a.AllocateNext(cctx, ipaddress.IPv4, nthOwner(100+i))
		cancel()
		if err == nil || !typedOutage(err) {
			t.Errorf("allocator %d, etcd down: AllocateNext %v, want a ctx error or ErrOutcomeUnknown", i, err)
		}
		cctx, cancel = context.WithTimeout(ctx, time.Second)
		err = a.Release(cctx, netip.MustParseAddr("10.0.0.1"))
		cancel()
		if err == nil || !typedOutage(err) {
			t.Errorf("allocator %d, etcd down: Release %v, want a ctx error or ErrOutcomeUnknown", i, err)
		}
	}
	c.Restart(0)
	n := 10
	for i := 0; ; i++ {
		_, err := as[i%2].AllocateNext(ctx, ipaddress.IPv4, nthOwner(1000+i))
		if errors.Is(err, allocator.ErrFull) {
			break
		}
		if err != nil {
			t.Fatalf("allocation %d after the restart: %v", i, err)
		}
		n++
	}
	if n != 30 {
		t.Errorf("%d addresses allocated in all, want the 30 of %s", n, base)
	}
	sc, err := as[0].CreateCIDR(ctx, "sync", netip.MustParsePrefix("fd00:6::/120"))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprint(usedIn(t, ctx, ss[0], base))
	for i, a := range as {
		if err := a.WaitRevision(ctx, sc.Revision); err != nil {
			t.Fatal(err)
		}
		u, err := a.Usage("base")
		if err != nil {
			t.Fatal(err)
		}
		if got := u.Prefixes[0].Used.String(); got != want {
			t.Errorf("allocator %d counts %s used, the store holds %s", i, got, want)
		}
	}
	for i := range 2 {
		if got, err := ss[0].AddressesOf(ctx, nthOwner(100+i)); err != nil || len(got) > 0 {
			t.Errorf("an allocation made with etcd down left %v, %v", got, err)
		}
	}
}
