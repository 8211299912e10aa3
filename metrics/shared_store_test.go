package metrics_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/metrics"
	"github.com/netipam/netipam/store/memory"
)

// sharer is one of several allocators over one store, with its own
// metrics and registry, as each apiserver of a control plane has.
type sharer struct {
	a   *allocator.Allocator
	reg *prometheus.Registry
}

func newSharers(t *testing.T, ctx context.Context, n int) []sharer {
	t.Helper()
	st := memory.New()
	var out []sharer
	for range n {
		m := metrics.New()
		a := trackedBy(t, ctx, st, m)
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(m)
		out = append(out, sharer{a, reg})
	}
	return out
}

// waitAll waits until every allocator's index has applied rev.
func waitAll(t *testing.T, ctx context.Context, ss []sharer, rev int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, s := range ss {
		if err := s.a.WaitRevision(ctx, rev); err != nil {
			t.Fatal(err)
		}
	}
}

// With several allocators over one store, each one's per-CIDR gauges show
// the store's truth once its watch has applied the others' writes (the
// package computes them from the tracked allocator's index); the counters
// count only that allocator's own requests; a Terminating CIDR shows
// available 0 in every registry; and a CIDR the other allocator removes
// loses its gauges in every registry.
func TestGaugesOfAllocatorsSharingAStoreAgree(t *testing.T) {
	ctx := context.Background()
	ss := newSharers(t, ctx, 2)
	a, b := ss[0], ss[1]
	c, err := a.a.CreateCIDR(ctx, "kubernetes", netip.MustParsePrefix("10.96.0.0/28"), netip.MustParsePrefix("fd00:96::/120"))
	if err != nil {
		t.Fatal(err)
	}
	waitAll(t, ctx, ss, c.Revision)
	var last int64
	for i, addr := range []string{"10.96.0.1", "10.96.0.2", "fd00:96::1"} {
		r, err := b.a.Allocate(ctx, netip.MustParseAddr(addr), svc(fmt.Sprintf("static-%d", i)))
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		last = r.Revision
	}
	for range 2 {
		r, err := b.a.AllocateNext(ctx, ipaddress.IPv4, svc("dyn"))
		if err != nil {
			t.Fatal(err)
		}
		last = r.Revision
	}
	if _, err := b.a.Allocate(ctx, netip.MustParseAddr("10.96.0.1"), svc("taken")); err == nil {
		t.Fatal("allocated a taken address")
	}
	r, err := a.a.Allocate(ctx, netip.MustParseAddr("fd00:96::5"), svc("by-a"))
	if err != nil {
		t.Fatal(err)
	}
	waitAll(t, ctx, ss, max(last, r.Revision))

	for _, s := range []struct {
		name     string
		reg      prometheus.Gatherer
		static   float64
		dynamic  float64
		errorsSt float64
	}{
		{"a", a.reg, 1, -1, -1},
		{"b", b.reg, 3, 2, 1},
	} {
		if got := value(t, s.reg, "netipam_allocator_allocated_ips", "cidr", "kubernetes", "prefix", "10.96.0.0/28"); got != 4 {
			t.Errorf("%s: allocated IPv4 = %v, want 4", s.name, got)
		}
		if got := value(t, s.reg, "netipam_allocator_available_ips", "cidr", "kubernetes", "prefix", "10.96.0.0/28"); got != 10 {
			t.Errorf("%s: available IPv4 = %v, want 10", s.name, got)
		}
		if got := value(t, s.reg, "netipam_allocator_allocated_ips", "cidr", "kubernetes", "prefix", "fd00:96::/120"); got != 2 {
			t.Errorf("%s: allocated IPv6 = %v, want 2", s.name, got)
		}
		if got := value(t, s.reg, "netipam_allocator_available_ips", "cidr", "kubernetes", "prefix", "fd00:96::/120"); got != 253 {
			t.Errorf("%s: available IPv6 = %v, want 253", s.name, got)
		}
		if got := value(t, s.reg, "netipam_allocator_allocation_total", "cidr", "kubernetes", "scope", "static"); got != s.static {
			t.Errorf("%s: static allocations = %v, want %v", s.name, got, s.static)
		}
		if got := value(t, s.reg, "netipam_allocator_allocation_total", "cidr", "kubernetes", "scope", "dynamic"); got != s.dynamic {
			t.Errorf("%s: dynamic allocations = %v, want %v (-1: no series)", s.name, got, s.dynamic)
		}
		if got := value(t, s.reg, "netipam_allocator_allocation_errors_total", "cidr", "kubernetes", "scope", "static"); got != s.errorsSt {
			t.Errorf("%s: static errors = %v, want %v (-1: no series)", s.name, got, s.errorsSt)
		}
	}

	// A CIDR created by b appears in a's gauges; a's allocations in it
	// make a's series, and b deleting it while a's address holds it shows
	// it Terminating, available 0, in both.
	t2, err := b.a.CreateCIDR(ctx, "second", netip.MustParsePrefix("192.96.0.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	waitAll(t, ctx, ss, t2.Revision)
	held, err := a.a.Allocate(ctx, netip.MustParseAddr("192.96.0.10"), svc("held"))
	if err != nil {
		t.Fatal(err)
	}
	waitAll(t, ctx, ss, held.Revision)
	if err := b.a.DeleteCIDR(ctx, "second"); err == nil {
		t.Fatal("deleted a CIDR holding an address")
	}
	got, err := b.a.GetCIDR("second")
	if err != nil || !got.Terminating {
		t.Fatalf("second after delete: %+v, %v", got, err)
	}
	waitAll(t, ctx, ss, got.Revision)
	for name, reg := range map[string]prometheus.Gatherer{"a": a.reg, "b": b.reg} {
		if v := value(t, reg, "netipam_allocator_available_ips", "cidr", "second"); v != 0 {
			t.Errorf("%s: available of the terminating CIDR = %v, want 0", name, v)
		}
		if v := value(t, reg, "netipam_allocator_allocated_ips", "cidr", "second"); v != 1 {
			t.Errorf("%s: allocated of the terminating CIDR = %v, want 1", name, v)
		}
	}
	if v := value(t, a.reg, "netipam_allocator_allocation_total", "cidr", "second", "scope", "static"); v != 1 {
		t.Errorf("a: static allocations in second = %v, want 1", v)
	}
	if v := value(t, b.reg, "netipam_allocator_allocation_total", "cidr", "second", "scope", "static"); v != -1 {
		t.Errorf("b: static allocations in second = %v, want no series", v)
	}

	// b releases the last address: the CIDR goes, and with it every series
	// of it in both registries, once each has seen the removal.
	if err := b.a.Release(ctx, held.Addr); err != nil {
		t.Fatal(err)
	}
	if _, err := b.a.GetCIDR("second"); err == nil {
		t.Fatal("second still there after its last address was released")
	}
	deadline := time.Now().Add(10 * time.Second)
	for name, reg := range map[string]prometheus.Gatherer{"a": a.reg, "b": b.reg} {
		for {
			left := seriesOf(t, reg, "second")
			if len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s: series of the removed CIDR still exported: %v", name, left)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// Two allocators of one process, sharing a store, can expose their
// metrics in one registry, told apart by a constant label (WithConstLabels,
// "for example the name of the embedding component"): registering both
// succeeds, and a gather gives each one's series under its label.
func TestTwoAllocatorsMetricsInOneRegistry(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	reg := prometheus.NewPedanticRegistry()
	var as []*allocator.Allocator
	for _, name := range []string{"one", "two"} {
		m := metrics.New(metrics.WithConstLabels(prometheus.Labels{"component": name}))
		a := trackedBy(t, ctx, st, m)
		if err := reg.Register(m); err != nil {
			t.Fatalf("registering the metrics of %s: %v", name, err)
		}
		as = append(as, a)
	}
	c, err := as[0].CreateCIDR(ctx, "kubernetes", netip.MustParsePrefix("10.96.0.0/28"))
	if err != nil {
		t.Fatal(err)
	}
	if err := as[1].WaitRevision(ctx, c.Revision); err != nil {
		t.Fatal(err)
	}
	if _, err := as[1].Allocate(ctx, netip.MustParseAddr("10.96.0.1"), svc("x")); err != nil {
		t.Fatal(err)
	}
	if got := value(t, reg, "netipam_allocator_allocation_total", "component", "two", "cidr", "kubernetes"); got != 1 {
		t.Errorf("two's allocations = %v, want 1", got)
	}
	if got := value(t, reg, "netipam_allocator_allocation_total", "component", "one", "cidr", "kubernetes"); got != -1 {
		t.Errorf("one's allocations = %v, want no series", got)
	}
	if got := value(t, reg, "netipam_allocator_available_ips", "component", "two", "cidr", "kubernetes"); got != 13 {
		t.Errorf("two's available = %v, want 13", got)
	}
}
