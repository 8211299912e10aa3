package metrics_test

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
)

// seriesOf returns, per metric name, how many series carry cidr="name".
func seriesOf(t *testing.T, g prometheus.Gatherer, name string) map[string]int {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "cidr" && l.GetValue() == name {
					out[mf.GetName()]++
				}
			}
		}
	}
	return out
}

// A CIDR removed from the store takes every series labelled with it
// along, the counters and the histogram as well as the gauges; other
// CIDRs' series and the errors of no CIDR stay. Removed by the tracked
// allocator itself, and by another allocator sharing the store.
func TestSeriesOfADeletedCIDRDisappear(t *testing.T) {
	for _, by := range []string{"tracked allocator", "another allocator"} {
		t.Run(by, func(t *testing.T) {
			e := newEnv(t)
			deleter := e.a
			if by == "another allocator" {
				b, err := allocator.New(e.ctx, e.st)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { b.Close() })
				deleter = b
			}
			if _, err := e.a.CreateCIDR(e.ctx, "kept", netip.MustParsePrefix("10.96.0.0/28")); err != nil {
				t.Fatal(err)
			}
			if _, err := e.a.CreateCIDR(e.ctx, "gone", netip.MustParsePrefix("192.96.0.0/24"), netip.MustParsePrefix("fd00:96::/64")); err != nil {
				t.Fatal(err)
			}
			kept, err := e.a.Allocate(e.ctx, netip.MustParseAddr("10.96.0.1"), svc("kept"))
			if err != nil {
				t.Fatal(err)
			}
			static, err := e.a.Allocate(e.ctx, netip.MustParseAddr("192.96.0.10"), svc("static"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.a.Allocate(e.ctx, static.Addr, svc("again")); err == nil {
				t.Fatal("allocated a taken address")
			}
			dynamic, err := e.a.AllocateNext(e.ctx, ipaddress.IPv6, svc("dynamic"))
			if err != nil {
				t.Fatal(err)
			}
			// An error of no CIDR: its series has cidr="" and must stay.
			if _, err := e.a.Allocate(e.ctx, netip.MustParseAddr("172.16.0.1"), svc("nowhere")); err == nil {
				t.Fatal("allocated outside every CIDR")
			}
			before := seriesOf(t, e.reg, "gone")
			for _, name := range []string{
				"netipam_allocator_allocated_ips", "netipam_allocator_available_ips",
				"netipam_allocator_allocation_total", "netipam_allocator_allocation_errors_total",
				"netipam_allocator_allocation_duration_seconds",
			} {
				if before[name] == 0 {
					t.Fatalf("no %s series for gone before the deletion (have %v): the test proves nothing", name, before)
				}
			}

			for _, r := range []ipaddress.IPAddress{static, dynamic} {
				if err := e.a.Release(e.ctx, r.Addr); err != nil {
					t.Fatal(err)
				}
			}
			if err := deleter.DeleteCIDR(e.ctx, "gone"); err != nil {
				t.Fatalf("DeleteCIDR = %v", err)
			}
			if _, err := e.a.GetCIDR("gone"); err == nil {
				t.Fatal("the tracked allocator still knows gone")
			}

			if after := seriesOf(t, e.reg, "gone"); len(after) != 0 {
				t.Errorf("series of the deleted CIDR still exported: %v", after)
			}
			if got := value(t, e.reg, "netipam_allocator_allocation_total", "cidr", "kept", "scope", "static"); got != 1 {
				t.Errorf("kept static allocations = %v, want 1", got)
			}
			if got := value(t, e.reg, "netipam_allocator_allocated_ips", "cidr", "kept"); got != 1 {
				t.Errorf("kept allocated = %v, want 1", got)
			}
			if got := value(t, e.reg, "netipam_allocator_allocation_errors_total", "cidr", "", "scope", "static"); got != 1 {
				t.Errorf("errors of no CIDR = %v, want 1", got)
			}
			if err := e.a.Release(e.ctx, kept.Addr); err != nil {
				t.Fatal(err)
			}

			// A CIDR of the same name created again counts from zero.
			if _, err := e.a.CreateCIDR(e.ctx, "gone", netip.MustParsePrefix("192.96.0.0/24")); err != nil {
				t.Fatal(err)
			}
			if _, err := e.a.Allocate(e.ctx, netip.MustParseAddr("192.96.0.20"), svc("new")); err != nil {
				t.Fatal(err)
			}
			if got := value(t, e.reg, "netipam_allocator_allocation_total", "cidr", "gone", "scope", "static"); got != 1 {
				t.Errorf("static allocations of the new gone = %v, want 1", got)
			}
			if got := value(t, e.reg, "netipam_allocator_allocation_total", "cidr", "gone", "scope", "dynamic"); got != -1 {
				t.Errorf("dynamic allocations of the new gone = %v, want no series", got)
			}
		})
	}
}

// Scrapes pruning removed CIDRs while allocations run lose no count of a
// live CIDR, and leave nothing of the removed one once it is gone.
func TestPruningLosesNoCountOfALiveCIDR(t *testing.T) {
	e := newEnv(t)
	if _, err := e.a.CreateCIDR(e.ctx, "live", netip.MustParsePrefix("10.0.0.0/16")); err != nil {
		t.Fatal(err)
	}
	const workers, each = 4, 200
	done := make(chan struct{})
	churned := make(chan error, 1)
	go func() {
		defer close(churned)
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			if _, err := e.a.CreateCIDR(e.ctx, "churn", netip.MustParsePrefix("192.168.0.0/24")); err != nil {
				churned <- err
				return
			}
			r, err := e.a.Allocate(e.ctx, netip.MustParseAddr("192.168.0.7"), svc("churn"))
			if err != nil {
				churned <- err
				return
			}
			if _, err := e.reg.Gather(); err != nil {
				churned <- err
				return
			}
			if err := e.a.Release(e.ctx, r.Addr); err != nil {
				churned <- err
				return
			}
			if err := e.a.DeleteCIDR(e.ctx, "churn"); err != nil {
				churned <- err
				return
			}
		}
	}()
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			for i := range each {
				r, err := e.a.AllocateNext(e.ctx, ipaddress.IPv4, svc(fmt.Sprintf("w%d-%d", w, i)))
				if err == nil {
					err = e.a.Release(e.ctx, r.Addr)
				}
				if err != nil {
					errs <- err
					return
				}
				if _, err := e.reg.Gather(); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	close(done)
	if err := <-churned; err != nil {
		t.Fatal(err)
	}
	if got := value(t, e.reg, "netipam_allocator_allocation_total", "cidr", "live", "scope", "dynamic"); got != workers*each {
		t.Errorf("live dynamic allocations = %v, want %d", got, workers*each)
	}
	if n, err := histogramCount(e.reg, "netipam_allocator_allocation_duration_seconds"); err != nil || n != workers*each {
		t.Errorf("histogram count = %d, %v; want %d (the removed CIDR's observations gone)", n, err, workers*each)
	}
	if after := seriesOf(t, e.reg, "churn"); len(after) != 0 {
		t.Errorf("series of the removed CIDR after the last scrape: %v", after)
	}
}

// reversed is a UsageSource listing the allocator's CIDRs out of order.
type reversed struct{ *allocator.Allocator }

func (r reversed) CIDRs() []cidrset.CIDR {
	cs := r.Allocator.CIDRs()
	slices.Reverse(cs)
	return cs
}

// A source need not sort its CIDRs: a scrape prunes none that it lists.
func TestPruningTakesASourceInAnyOrder(t *testing.T) {
	e := newEnv(t)
	e.m.Track(reversed{e.a})
	for i, name := range []string{"a", "b", "c"} {
		if _, err := e.a.CreateCIDR(e.ctx, name, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i), 0, 0}), 24)); err != nil {
			t.Fatal(err)
		}
		if _, err := e.a.Allocate(e.ctx, netip.AddrFrom4([4]byte{10, byte(i), 0, 1}), svc(name)); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		for _, name := range []string{"a", "b", "c"} {
			if n := seriesOf(t, e.reg, name)["netipam_allocator_allocation_total"]; n != 1 {
				t.Errorf("CIDR %s: %d allocation series, want 1", name, n)
			}
		}
	}
}
