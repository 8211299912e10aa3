package metrics_test

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/metrics"
	"github.com/netipam/netipam/repair"
	"github.com/netipam/netipam/store/memory"
)

// Wiring one Metrics into the allocator (counters, histogram), the usage
// gauges and the repair loop, served on /metrics.
func Example() {
	ctx := context.Background()
	m := metrics.New()
	a, err := allocator.New(ctx, memory.New(), allocator.WithObserver(m))
	if err != nil {
		panic(err)
	}
	defer a.Close()
	m.Track(a)

	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	// Repair findings are counted too. Consumers must be the owners' whole
	// truth (here a fixed list; an apiserver lists its Services): a record
	// whose owner it leaves out is deleted as leaked.
	consumers := repair.NewStatic(repair.Consumer{
		Ref:   ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "kubernetes"},
		Addrs: []string{"10.96.0.1"},
	})
	r := &repair.Repairer{Allocator: a, Consumers: consumers, Observer: m}
	_, _ = r.Run(ctx)
}
