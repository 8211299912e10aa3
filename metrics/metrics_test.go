package metrics_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/metrics"
	"github.com/netipam/netipam/repair"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/memory"
)

// countingStore counts ListAddresses calls: scrapes must make none.
type countingStore struct {
	store.Store
	lists atomic.Int64
}

func (s *countingStore) ListAddresses(ctx context.Context) ([]ipaddress.IPAddress, error) {
	s.lists.Add(1)
	return s.Store.ListAddresses(ctx)
}

type env struct {
	ctx context.Context
	st  *countingStore
	a   *allocator.Allocator
	m   *metrics.Metrics
	reg *prometheus.Registry
}

// trackedBy returns an allocator over st that m observes and tracks,
// closed with the test.
func trackedBy(t *testing.T, ctx context.Context, st store.Store, m *metrics.Metrics, opts ...allocator.Option) *allocator.Allocator {
	t.Helper()
	a, err := allocator.New(ctx, st, append([]allocator.Option{allocator.WithObserver(m)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	m.Track(a)
	return a
}

func newEnv(t *testing.T, opts ...metrics.Option) *env {
	t.Helper()
	ctx := context.Background()
	st := &countingStore{Store: memory.New()}
	m := metrics.New(opts...)
	a := trackedBy(t, ctx, st, m, allocator.WithStrategy(allocator.Sequential()))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	return &env{ctx: ctx, st: st, a: a, m: m, reg: reg}
}

func svc(name string) ipaddress.ParentRef {
	return ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: name}
}

func compare(t *testing.T, reg prometheus.Gatherer, want string, names ...string) {
	t.Helper()
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

// Walkthrough 8.1 through the metrics: a /28 with the default service,
// filled up, then a second CIDR.
func TestAllocationMetricsFollowTheExhaustionWalkthrough(t *testing.T) {
	e := newEnv(t)
	if _, err := e.a.CreateCIDR(e.ctx, "kubernetes", netip.MustParsePrefix("10.96.0.0/28")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.a.Allocate(e.ctx, netip.MustParseAddr("10.96.0.1"), svc("kubernetes")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.a.Allocate(e.ctx, netip.MustParseAddr("10.96.0.1"), svc("again")); !errors.Is(err, allocator.ErrAllocated) {
		t.Fatalf("second static = %v", err)
	}
	for i := range 13 {
		if _, err := e.a.AllocateNext(e.ctx, ipaddress.IPv4, svc("s"+string(rune('a'+i)))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.a.AllocateNext(e.ctx, ipaddress.IPv4, svc("full")); !errors.Is(err, allocator.ErrFull) {
		t.Fatalf("14th = %v", err)
	}
	compare(t, e.reg, `
# HELP netipam_allocator_allocated_ips Gauge measuring the number of allocated IPs, per CIDR and prefix
# TYPE netipam_allocator_allocated_ips gauge
netipam_allocator_allocated_ips{cidr="kubernetes",prefix="10.96.0.0/28"} 14
# HELP netipam_allocator_available_ips Gauge measuring the number of available IPs, per CIDR and prefix (0 while the CIDR is terminating)
# TYPE netipam_allocator_available_ips gauge
netipam_allocator_available_ips{cidr="kubernetes",prefix="10.96.0.0/28"} 0
# HELP netipam_allocator_allocation_total Number of IP allocations, per CIDR and scope (static or dynamic)
# TYPE netipam_allocator_allocation_total counter
netipam_allocator_allocation_total{cidr="kubernetes",scope="dynamic"} 13
netipam_allocator_allocation_total{cidr="kubernetes",scope="static"} 1
# HELP netipam_allocator_allocation_errors_total Number of errors trying to allocate IPs, per CIDR (empty when none was chosen) and scope
# TYPE netipam_allocator_allocation_errors_total counter
netipam_allocator_allocation_errors_total{cidr="kubernetes",scope="dynamic"} 1
netipam_allocator_allocation_errors_total{cidr="kubernetes",scope="static"} 1
`, "netipam_allocator_allocated_ips", "netipam_allocator_available_ips", "netipam_allocator_allocation_total", "netipam_allocator_allocation_errors_total")

	if _, err := e.a.CreateCIDR(e.ctx, "newcidr1", netip.MustParsePrefix("192.96.0.0/24"), netip.MustParsePrefix("fd00:96::/64")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.a.AllocateNext(e.ctx, ipaddress.IPv4, svc("more")); err != nil {
		t.Fatal(err)
	}
	compare(t, e.reg, `
# HELP netipam_allocator_allocated_ips Gauge measuring the number of allocated IPs, per CIDR and prefix
# TYPE netipam_allocator_allocated_ips gauge
netipam_allocator_allocated_ips{cidr="kubernetes",prefix="10.96.0.0/28"} 14
netipam_allocator_allocated_ips{cidr="newcidr1",prefix="192.96.0.0/24"} 1
netipam_allocator_allocated_ips{cidr="newcidr1",prefix="fd00:96::/64"} 0
# HELP netipam_allocator_available_ips Gauge measuring the number of available IPs, per CIDR and prefix (0 while the CIDR is terminating)
# TYPE netipam_allocator_available_ips gauge
netipam_allocator_available_ips{cidr="kubernetes",prefix="10.96.0.0/28"} 0
netipam_allocator_available_ips{cidr="newcidr1",prefix="192.96.0.0/24"} 253
netipam_allocator_available_ips{cidr="newcidr1",prefix="fd00:96::/64"} 1.8446744073709552e+19
`, "netipam_allocator_allocated_ips", "netipam_allocator_available_ips")
	if got := value(t, e.reg, "netipam_allocator_allocation_total", "cidr", "newcidr1", "scope", "dynamic"); got != 1 {
		t.Errorf("newcidr1 dynamic allocations = %v", got)
	}

	// The histogram saw every successful allocation, none of the errors.
	n, err := histogramCount(e.reg, "netipam_allocator_allocation_duration_seconds")
	if err != nil || n != 15 {
		t.Errorf("histogram count = %d, %v; want 15", n, err)
	}

	// Terminating: nothing available any more, allocated still shown.
	if err := e.a.DeleteCIDR(e.ctx, "newcidr1"); !errors.Is(err, allocator.ErrDeletionBlocked) {
		t.Fatalf("DeleteCIDR = %v", err)
	}
	compare(t, e.reg, `
# HELP netipam_allocator_available_ips Gauge measuring the number of available IPs, per CIDR and prefix (0 while the CIDR is terminating)
# TYPE netipam_allocator_available_ips gauge
netipam_allocator_available_ips{cidr="kubernetes",prefix="10.96.0.0/28"} 0
netipam_allocator_available_ips{cidr="newcidr1",prefix="192.96.0.0/24"} 0
netipam_allocator_available_ips{cidr="newcidr1",prefix="fd00:96::/64"} 0
`, "netipam_allocator_available_ips")

	if n := e.st.lists.Load(); n != 0 {
		t.Errorf("scrapes listed the addresses %d times", n)
	}
}

// value returns the value of the counter or gauge name with the given
// label pairs, -1 when absent.
func value(t *testing.T, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue metric
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

func histogramCount(g prometheus.Gatherer, name string) (uint64, error) {
	mfs, err := g.Gather()
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return n, nil
}

// Repair findings are counted by type; every type starts at zero.
func TestRepairErrorsByType(t *testing.T) {
	e := newEnv(t)
	if _, err := e.a.CreateCIDR(e.ctx, "kubernetes", netip.MustParsePrefix("10.96.0.0/28")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.a.Allocate(e.ctx, netip.MustParseAddr("10.96.0.5"), svc("gone")); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Add(time.Hour)
	r := &repair.Repairer{
		Allocator: e.a,
		Observer:  e.m,
		Now:       func() time.Time { return now },
		Consumers: repair.NewStatic(
			repair.Consumer{Ref: svc("bad"), Addrs: []string{"10.96.0.999", "192.168.0.1"}},
			repair.Consumer{Ref: svc("a"), Addrs: []string{"10.96.0.2", "10.96.0.3"}},
			repair.Consumer{Ref: svc("b"), Addrs: []string{"10.96.0.3"}},
		),
	}
	if _, err := r.Run(e.ctx); err != nil {
		t.Fatal(err)
	}
	compare(t, e.reg, `
# HELP netipam_repair_ip_errors_total Number of errors detected on IPs by the repair loop broken down by type of error: leak, repair, full, outOfRange, duplicate, unknown, invalid
# TYPE netipam_repair_ip_errors_total counter
netipam_repair_ip_errors_total{type="duplicate"} 1
netipam_repair_ip_errors_total{type="full"} 0
netipam_repair_ip_errors_total{type="invalid"} 1
netipam_repair_ip_errors_total{type="leak"} 1
netipam_repair_ip_errors_total{type="outOfRange"} 1
netipam_repair_ip_errors_total{type="repair"} 1
netipam_repair_ip_errors_total{type="unknown"} 0
# HELP netipam_repair_reconcile_errors_total Number of reconciliation failures on the IP repair reconcile loop
# TYPE netipam_repair_reconcile_errors_total counter
netipam_repair_reconcile_errors_total 0
`, "netipam_repair_ip_errors_total", "netipam_repair_reconcile_errors_total")
	// The record repair wrote back is no allocation: only the one made
	// above for "gone" counts, as in the reference, whose repair writes
	// records past its allocator.
	if got := value(t, e.reg, "netipam_allocator_allocation_total", "cidr", "kubernetes", "scope", "static"); got != 1 {
		t.Errorf("static allocations = %v after a repair pass, want 1: the repair was counted as one", got)
	}

	// A pass that fails counts as a reconcile error.
	r.Consumers = failing{}
	if _, err := r.Run(e.ctx); err == nil {
		t.Fatal("Run did not fail")
	}
	if got := value(t, e.reg, "netipam_repair_reconcile_errors_total"); got != 1 {
		t.Errorf("reconcile errors = %v", got)
	}
}

type failing struct{ repair.Consumers }

func (failing) List(context.Context) ([]repair.Consumer, error) { return nil, errors.New("down") }

// KubernetesNames exposes the reference's names.
func TestKubernetesNames(t *testing.T) {
	e := newEnv(t, metrics.WithNames(metrics.KubernetesNames()))
	if _, err := e.a.CreateCIDR(e.ctx, "kubernetes", netip.MustParsePrefix("10.96.0.0/28")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.a.AllocateNext(e.ctx, ipaddress.IPv4, svc("x")); err != nil {
		t.Fatal(err)
	}
	// An error too, or its counter would have no series to name.
	if _, err := e.a.Allocate(e.ctx, netip.MustParseAddr("10.96.1.1"), svc("y")); err == nil {
		t.Fatal("allocated an address outside every CIDR")
	}
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		got[mf.GetName()] = true
	}
	for _, name := range []string{
		"kube_apiserver_clusterip_allocator_allocated_ips",
		"kube_apiserver_clusterip_allocator_available_ips",
		"kube_apiserver_clusterip_allocator_allocation_total",
		"kube_apiserver_clusterip_allocator_allocation_errors_total",
		"kube_apiserver_clusterip_allocator_allocation_duration_seconds",
		"apiserver_clusterip_repair_ip_errors_total",
		"apiserver_clusterip_repair_reconcile_errors_total",
	} {
		if !got[name] {
			t.Errorf("%s not exposed (have %v)", name, got)
		}
	}
	if err := testutil.CollectAndCompare(e.m, strings.NewReader(`
# HELP kube_apiserver_clusterip_allocator_allocated_ips Gauge measuring the number of allocated IPs, per CIDR and prefix
# TYPE kube_apiserver_clusterip_allocator_allocated_ips gauge
kube_apiserver_clusterip_allocator_allocated_ips{cidr="kubernetes",prefix="10.96.0.0/28"} 1
`), "kube_apiserver_clusterip_allocator_allocated_ips"); err != nil {
		t.Error(err)
	}
}

// Without a source the gauges are absent; the collector still lints clean.
func TestLintAndNoSource(t *testing.T) {
	m := metrics.New()
	problems, err := testutil.CollectAndLint(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	if n := testutil.CollectAndCount(m, "netipam_allocator_allocated_ips"); n != 0 {
		t.Errorf("%d gauges without a source", n)
	}
}

// Tracking the nil *allocator.Allocator of a New that failed is no
// source, as Track(nil) is: scrapes still gather every other metric, and
// Collect does not panic.
func TestTrackingANilAllocatorIsNoSource(t *testing.T) {
	m := metrics.New()
	var failed *allocator.Allocator
	m.Track(failed)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("Gather after Track of a nil *Allocator: %v", err)
	}
	if n := testutil.CollectAndCount(m, "netipam_allocator_allocated_ips"); n != 0 {
		t.Errorf("%d gauges from a nil allocator", n)
	}
}

// The repair error types are the package's alone: what a caller does with
// the slice it was given changes no other Metrics. (The names are a
// struct, returned by value.)
func TestDefaultsAreNotSharedState(t *testing.T) {
	types := metrics.RepairErrorTypes()
	types[0] = "changed_by_a_caller"

	e := newEnv(t)
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, mf := range mfs {
		if mf.GetName() != "netipam_repair_ip_errors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				seen = append(seen, l.GetValue())
			}
		}
	}
	if !slices.Contains(seen, "leak") || slices.Contains(seen, "changed_by_a_caller") {
		t.Errorf("repair error types exposed = %v, want the reference's, starting with leak", seen)
	}
}
