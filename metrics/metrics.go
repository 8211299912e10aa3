// Package metrics exposes an allocator's state and outcomes as Prometheus
// metrics, the set the Kubernetes ClusterIP allocator and repair loop
// expose (SPEC section 7):
//
//	netipam_allocator_allocated_ips{cidr,prefix}                  gauge
//	netipam_allocator_available_ips{cidr,prefix}                  gauge
//	netipam_allocator_allocation_total{cidr,scope}                counter
//	netipam_allocator_allocation_errors_total{cidr,scope}         counter
//	netipam_allocator_allocation_duration_seconds{cidr,scope}     histogram
//	netipam_repair_ip_errors_total{type}                          counter
//	netipam_repair_reconcile_errors_total                         counter
//
// Each maps to the Kubernetes metric of the same suffix:
//
//	netipam_allocator_*              kube_apiserver_clusterip_allocator_*
//	netipam_repair_ip_errors_total   apiserver_clusterip_repair_ip_errors_total
//	netipam_repair_reconcile_errors_total
//	                                 apiserver_clusterip_repair_reconcile_errors_total
//
// and WithNames(KubernetesNames) exposes the Kubernetes names themselves.
// Labels differ in two ways: the "cidr" label holds the CIDR object's name
// (Kubernetes uses the prefix, one allocator per prefix) and the gauges add
// a "prefix" label, one series per prefix of a dual-stack CIDR; and the
// duration histogram carries "scope" too (Kubernetes has only "cidr").
//
// The two gauges are computed at scrape time from allocator.Usage, which
// costs O(CIDRs): nothing is listed per address. The counters and the
// histogram are fed by the allocator through allocator.WithObserver; the
// repair counters by the repair package through Repairer.Observer. One
// Metrics serves all three:
//
//	m := metrics.New()
//	a, _ := allocator.New(ctx, st, allocator.WithObserver(m))
//	m.Track(a)
//	prometheus.MustRegister(m)
//	r := &repair.Repairer{Allocator: a, Consumers: c, Observer: m}
//
// A CIDR removed from the store (not one Terminating) loses every series
// labelled with it: the gauges at once, the per-CIDR counters and the
// histogram at the first scrape after the tracked allocator has seen the
// removal. So a CIDR created again under that name before that scrape
// continues the old counts. Without a tracked source (Track) nothing is
// known to be removed, and the counters keep every CIDR they have seen.
package metrics

import (
	"math"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/repair"
)

// Names are the fully qualified names of the metrics.
type Names struct {
	AllocatedIPs          string
	AvailableIPs          string
	Allocations           string
	AllocationErrors      string
	AllocationDuration    string
	RepairIPErrors        string
	RepairReconcileErrors string
}

// DefaultNames returns the names under the netipam_ namespace. Each call
// returns a fresh value, so a caller changing it changes no one else's.
func DefaultNames() Names {
	return Names{
		AllocatedIPs:          "netipam_allocator_allocated_ips",
		AvailableIPs:          "netipam_allocator_available_ips",
		Allocations:           "netipam_allocator_allocation_total",
		AllocationErrors:      "netipam_allocator_allocation_errors_total",
		AllocationDuration:    "netipam_allocator_allocation_duration_seconds",
		RepairIPErrors:        "netipam_repair_ip_errors_total",
		RepairReconcileErrors: "netipam_repair_reconcile_errors_total",
	}
}

// KubernetesNames returns the names the Kubernetes apiserver uses, for
// dashboards and alerts written for it.
func KubernetesNames() Names {
	return Names{
		AllocatedIPs:          "kube_apiserver_clusterip_allocator_allocated_ips",
		AvailableIPs:          "kube_apiserver_clusterip_allocator_available_ips",
		Allocations:           "kube_apiserver_clusterip_allocator_allocation_total",
		AllocationErrors:      "kube_apiserver_clusterip_allocator_allocation_errors_total",
		AllocationDuration:    "kube_apiserver_clusterip_allocator_allocation_duration_seconds",
		RepairIPErrors:        "apiserver_clusterip_repair_ip_errors_total",
		RepairReconcileErrors: "apiserver_clusterip_repair_reconcile_errors_total",
	}
}

// RepairErrorTypes returns the values of the repair counter's "type"
// label, as Kubernetes has them; each starts at zero. The slice is the
// caller's own.
func RepairErrorTypes() []string {
	return []string{"leak", "repair", "full", "outOfRange", "duplicate", "unknown", "invalid"}
}

// Option configures Metrics.
type Option func(*config)

type config struct {
	names   Names
	buckets []float64
	labels  prometheus.Labels
}

// WithNames sets the metric names (default DefaultNames()).
func WithNames(n Names) Option { return func(c *config) { c.names = n } }

// WithBuckets sets the buckets of the duration histogram (default
// prometheus.DefBuckets, as Kubernetes).
func WithBuckets(b []float64) Option { return func(c *config) { c.buckets = b } }

// WithConstLabels adds constant labels to every metric (for example the
// name of the embedding component).
func WithConstLabels(l prometheus.Labels) Option { return func(c *config) { c.labels = l } }

// UsageSource is what the gauges are computed from; *allocator.Allocator
// is one.
type UsageSource interface {
	CIDRs() []cidrset.CIDR
	Usage(name string) (allocator.CIDRUsage, error)
}

// Metrics is a prometheus.Collector for the metrics above. It is also an
// allocator.Observer and a repair.Observer. Safe for concurrent use.
type Metrics struct {
	allocated, available *prometheus.Desc

	allocations     *prometheus.CounterVec
	errors          *prometheus.CounterVec
	duration        *prometheus.HistogramVec
	repairErrors    *prometheus.CounterVec
	reconcileErrors prometheus.Counter

	source atomic.Pointer[UsageSource]

	// seen counts the events per CIDR name that the counters hold series
	// for, so a scrape can tell a removed CIDR's series from those of one
	// created again while it ran. Events hold mu shared, a scrape's pruning
	// holds it alone: a series is never removed between an event's count
	// and its increment.
	mu   sync.RWMutex
	seen map[string]*cidrSeries
}

// cidrSeries is what Metrics keeps per CIDR name seen: the count of its
// events, and the series its events write, each looked up in its vector
// by its first event (the series appears then, as WithLabelValues makes
// it) and kept, so that later events hash no labels.
type cidrSeries struct {
	events atomic.Uint64
	scopes [2]scopeSeries // static, dynamic: see scopeIndex
}

// scopeSeries are the series of one CIDR name and scope.
type scopeSeries struct {
	allocations, errors atomic.Pointer[prometheus.Counter]
	duration            atomic.Pointer[prometheus.Observer]
}

// scopeIndex returns the place of scope in cidrSeries.scopes.
func scopeIndex(scope allocator.Scope) (int, bool) {
	switch scope {
	case allocator.ScopeStatic:
		return 0, true
	case allocator.ScopeDynamic:
		return 1, true
	}
	return 0, false
}

// seriesOf returns the series *p holds, or, the first time, the one vec
// holds for cidr and scope, which it keeps in *p. Calls at once for one
// series agree: vec gives each the same. (The labels are not a variadic
// parameter: their slice would be made, on the heap, on every call.)
func seriesOf[T any](p *atomic.Pointer[T], vec func(...string) T, cidr, scope string) T {
	if s := p.Load(); s != nil {
		return *s
	}
	s := vec(cidr, scope)
	p.CompareAndSwap(nil, &s)
	return s
}

var (
	_ prometheus.Collector = (*Metrics)(nil)
	_ allocator.Observer   = (*Metrics)(nil)
	_ repair.Observer      = (*Metrics)(nil)
)

// New returns the metrics, with no usage source yet (see Track).
func New(opts ...Option) *Metrics {
	cfg := config{names: DefaultNames(), buckets: prometheus.DefBuckets}
	for _, o := range opts {
		o(&cfg)
	}
	n := cfg.names
	m := &Metrics{
		seen: map[string]*cidrSeries{},
		allocated: prometheus.NewDesc(n.AllocatedIPs,
			"Gauge measuring the number of allocated IPs, per CIDR and prefix", []string{"cidr", "prefix"}, cfg.labels),
		available: prometheus.NewDesc(n.AvailableIPs,
			"Gauge measuring the number of available IPs, per CIDR and prefix (0 while the CIDR is terminating)", []string{"cidr", "prefix"}, cfg.labels),
		allocations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: n.Allocations, Help: "Number of IP allocations, per CIDR and scope (static or dynamic)", ConstLabels: cfg.labels,
		}, []string{"cidr", "scope"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: n.AllocationErrors, Help: "Number of errors trying to allocate IPs, per CIDR (empty when none was chosen) and scope", ConstLabels: cfg.labels,
		}, []string{"cidr", "scope"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: n.AllocationDuration, Help: "Duration in seconds to allocate an IP, per CIDR and scope (successful allocations)", Buckets: cfg.buckets, ConstLabels: cfg.labels,
		}, []string{"cidr", "scope"}),
		repairErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: n.RepairIPErrors, Help: "Number of errors detected on IPs by the repair loop broken down by type of error: leak, repair, full, outOfRange, duplicate, unknown, invalid", ConstLabels: cfg.labels,
		}, []string{"type"}),
		reconcileErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: n.RepairReconcileErrors, Help: "Number of reconciliation failures on the IP repair reconcile loop", ConstLabels: cfg.labels,
		}),
	}
	for _, t := range RepairErrorTypes() {
		m.repairErrors.WithLabelValues(t)
	}
	return m
}

// Track sets the source of the per-CIDR gauges, usually the allocator
// this Metrics observes. It also tells which CIDRs have been removed, whose
// counter series go (see the package doc), so it should be that allocator:
// another one sharing the store may not have seen a CIDR created yet.
// Until it is called the gauges are not exposed; nil, or a nil
// *allocator.Allocator (from a New that failed), removes the source rather
// than fail every scrape.
func (m *Metrics) Track(src UsageSource) {
	if a, ok := src.(*allocator.Allocator); src == nil || ok && a == nil {
		m.source.Store(nil)
		return
	}
	m.source.Store(&src)
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.allocated
	ch <- m.available
	m.allocations.Describe(ch)
	m.errors.Describe(ch)
	m.duration.Describe(ch)
	m.repairErrors.Describe(ch)
	m.reconcileErrors.Describe(ch)
}

// Collect implements prometheus.Collector. The gauges cost O(CIDRs).
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	if p := m.source.Load(); p != nil {
		src := *p
		// Taken before the CIDRs: an event counted by then was for a CIDR
		// the allocator knew then, so one missing from the list after has
		// been removed since.
		before := m.seenCounts()
		cidrs := src.CIDRs()
		m.prune(before, cidrs)
		for _, c := range cidrs {
			u, err := src.Usage(c.Name)
			if err != nil {
				continue // removed since CIDRs was read
			}
			for _, pu := range u.Prefixes {
				free := Float(pu.Free)
				if u.Terminating {
					free = 0
				}
				prefix := pu.Prefix.String()
				ch <- prometheus.MustNewConstMetric(m.allocated, prometheus.GaugeValue, Float(pu.Used), c.Name, prefix)
				ch <- prometheus.MustNewConstMetric(m.available, prometheus.GaugeValue, free, c.Name, prefix)
			}
		}
	}
	m.allocations.Collect(ch)
	m.errors.Collect(ch)
	m.duration.Collect(ch)
	m.repairErrors.Collect(ch)
	m.reconcileErrors.Collect(ch)
}

// seenCounts returns the count of events of every CIDR name seen.
func (m *Metrics) seenCounts() map[string]uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make(map[string]uint64, len(m.seen))
	for name, cs := range m.seen {
		out[name] = cs.events.Load()
	}
	return out
}

// prune removes the counter and histogram series of the CIDRs counted in
// before that are not among live, unless an event came for that name
// since before was taken: that may be a CIDR of the name created again,
// left for the next scrape to judge.
func (m *Metrics) prune(before map[string]uint64, live []cidrset.CIDR) {
	// A set, not a search: a UsageSource need not sort its CIDRs.
	names := make(map[string]bool, len(live))
	for _, c := range live {
		names[c.Name] = true
	}
	var gone []string
	for name := range before {
		if !names[name] {
			gone = append(gone, name)
		}
	}
	if len(gone) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, name := range gone {
		if cs, ok := m.seen[name]; !ok || cs.events.Load() != before[name] {
			continue
		}
		delete(m.seen, name)
		l := prometheus.Labels{"cidr": name}
		m.allocations.DeletePartialMatch(l)
		m.errors.DeletePartialMatch(l)
		m.duration.DeletePartialMatch(l)
	}
}

// Float converts a count to float64, rounding counts above 2^53 (IPv6).
func Float(c cidrset.Count) float64 {
	return float64(c.Hi)*math.Exp2(64) + float64(c.Lo)
}

// Allocated implements allocator.Observer: it counts the allocation or
// its error, and observes the duration of successful ones.
func (m *Metrics) Allocated(ev allocator.AllocationEvent) {
	var ss *scopeSeries
	if ev.CIDR != "" {
		cs := m.count(ev.CIDR)
		defer m.mu.RUnlock()
		if i, ok := scopeIndex(ev.Scope); ok {
			ss = &cs.scopes[i]
		}
	}
	if ss == nil {
		// No CIDR (the request failed before one was chosen), whose
		// series no scrape prunes, or a scope of no allocator's: looked
		// up anew, as the event is rare.
		ss = new(scopeSeries)
	}
	scope := string(ev.Scope)
	if ev.Err != nil {
		seriesOf(&ss.errors, m.errors.WithLabelValues, ev.CIDR, scope).Inc()
		return
	}
	seriesOf(&ss.allocations, m.allocations.WithLabelValues, ev.CIDR, scope).Inc()
	seriesOf(&ss.duration, m.duration.WithLabelValues, ev.CIDR, scope).Observe(ev.Duration.Seconds())
}

// count counts an event for the CIDR name and returns its series, holding
// m.mu shared, so that no scrape prunes the name (and its series) before
// the event's series are written.
func (m *Metrics) count(name string) *cidrSeries {
	for {
		m.mu.RLock()
		if cs := m.seen[name]; cs != nil {
			cs.events.Add(1)
			return cs
		}
		m.mu.RUnlock()
		m.mu.Lock()
		if m.seen[name] == nil {
			m.seen[name] = new(cidrSeries)
		}
		m.mu.Unlock()
		// A scrape may prune the new entry before the read lock is taken
		// again; the loop then adds it anew.
	}
}

// RepairEvent implements repair.Observer: it counts the finding under its
// error type (repair.Event.ErrorType); pending findings count nothing.
func (m *Metrics) RepairEvent(e repair.Event) {
	if t := e.ErrorType(); t != "" {
		m.repairErrors.WithLabelValues(t).Inc()
	}
}

// RepairDone implements repair.Observer: a pass that failed counts as a
// reconcile error.
func (m *Metrics) RepairDone(_ repair.Report, err error) {
	if err != nil {
		m.reconcileErrors.Inc()
	}
}
