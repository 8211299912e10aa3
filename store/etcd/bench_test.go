package etcd

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/internal/cputime"
	"github.com/netipam/netipam/internal/stress"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// BenchmarkAllocVsRaw measures, against one embedded member with fsync on,
// dynamic allocations per second through the allocator (AllocateNext on the
// etcd store) next to raw compare-and-create transactions per second
// (If CreateRevision(k)==0 Then Put), at 1, 4 and 16 concurrent callers,
// with the store's own fenced create (two compares, one put) in between.
// Then it measures raw and alloc again in alternating chunks ("paired"), so
// that load from outside the benchmark, which comes and goes over seconds
// on a shared machine, hits both alike. With -v it logs all side by side.
//
//	go test -run x -bench AllocVsRaw -benchtime 3000x ./store/etcd/
func BenchmarkAllocVsRaw(b *testing.B) {
	c := startCluster(b, 1)
	cli := c.newClient(b)
	ctx := context.Background()
	results := map[string]float64{} // ops/s
	cpus := map[string]float64{}    // CPU µs per op
	var runs atomic.Int64
	// A value the size of a stored record, so both sides write alike.
	value := string(encodeRecord(ipaddress.IPAddress{Parent: ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "svc-000000"}, Created: time.Now()}))

	// Warm up: a new member's first thousands of writes are slower.
	for i := range 2000 {
		k := fmt.Sprintf("/warmup/%d", i)
		if _, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).Then(clientv3.OpPut(k, value)).Commit(); err != nil {
			b.Fatal(err)
		}
	}

	for _, callers := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("raw/callers=%d", callers), func(b *testing.B) {
			run := runs.Add(1)
			elapsed, cpu := parallel(b, callers, func(i int) error {
				k := fmt.Sprintf("/raw/%d/%d", run, i)
				resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).Then(clientv3.OpPut(k, value)).Commit()
				if err == nil && !resp.Succeeded {
					err = fmt.Errorf("key %s exists", k)
				}
				return err
			})
			results[fmt.Sprintf("raw/%d", callers)] = float64(b.N) / elapsed.Seconds()
			cpus[fmt.Sprintf("raw/%d", callers)] = cpu
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
		})
		// The store alone: CreateAddresses fenced on a CIDR, the write an
		// allocation makes, without the allocator's choice or watch.
		b.Run(fmt.Sprintf("store/callers=%d", callers), func(b *testing.B) {
			run := runs.Add(1)
			st, err := New(cli, WithPrefix(fmt.Sprintf("/bench/%d", run)))
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			c, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: "bench", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
			if err != nil {
				b.Fatal(err)
			}
			fence := store.Fence{CIDR: c.Name, Revision: c.Revision}
			elapsed, cpu := parallel(b, callers, func(i int) error {
				rec := ipaddress.IPAddress{
					Addr:   netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}),
					Parent: ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: fmt.Sprintf("svc-%06d", i)},
				}
				_, err := st.CreateAddresses(ctx, []ipaddress.IPAddress{rec}, fence)
				return err
			})
			results[fmt.Sprintf("store/%d", callers)] = float64(b.N) / elapsed.Seconds()
			cpus[fmt.Sprintf("store/%d", callers)] = cpu
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
		})
		b.Run(fmt.Sprintf("alloc/callers=%d", callers), func(b *testing.B) {
			a := benchAllocator(b, cli, fmt.Sprintf("/bench/%d", runs.Add(1)), "10.0.0.0/12")
			elapsed, cpu := parallel(b, callers, func(i int) error {
				owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: fmt.Sprintf("svc-%06d", i)}
				_, err := a.AllocateNext(ctx, ipaddress.IPv4, owner)
				return err
			})
			results[fmt.Sprintf("alloc/%d", callers)] = float64(b.N) / elapsed.Seconds()
			cpus[fmt.Sprintf("alloc/%d", callers)] = cpu
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
		})
		// b.N raw creates and b.N allocations, in 12 chunks each, raw
		// first in every other pair (ABBA).
		b.Run(fmt.Sprintf("paired/callers=%d", callers), func(b *testing.B) {
			run := runs.Add(1)
			a := benchAllocator(b, cli, fmt.Sprintf("/bench/%d", run), "10.0.0.0/12")
			raw := func(i int) error {
				k := fmt.Sprintf("/raw/%d/%d", run, i)
				_, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).Then(clientv3.OpPut(k, value)).Commit()
				return err
			}
			alloc := func(i int) error {
				owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: fmt.Sprintf("svc-%06d", i)}
				_, err := a.AllocateNext(ctx, ipaddress.IPv4, owner)
				return err
			}
			size := max(b.N/12, 1)
			var tRaw, tAlloc time.Duration
			b.ResetTimer()
			for from, pair := 0, 0; from < b.N; from, pair = from+size, pair+1 {
				n := min(size, b.N-from)
				first, second, t1, t2 := raw, alloc, &tRaw, &tAlloc
				if pair%2 == 1 {
					first, second, t1, t2 = alloc, raw, &tAlloc, &tRaw
				}
				for _, step := range []struct {
					op func(int) error
					t  *time.Duration
				}{{first, t1}, {second, t2}} {
					took, err := runChunk(callers, from, n, step.op)
					if err != nil {
						b.Fatal(err)
					}
					*step.t += took
				}
			}
			b.StopTimer()
			results[fmt.Sprintf("paired/%d", callers)] = tRaw.Seconds() / tAlloc.Seconds()
			b.ReportMetric(float64(b.N)/tRaw.Seconds(), "raw-ops/s")
			b.ReportMetric(float64(b.N)/tAlloc.Seconds(), "alloc-ops/s")
			b.ReportMetric(100*tRaw.Seconds()/tAlloc.Seconds(), "alloc/raw-%")
		})
	}
	var lines []string
	for _, callers := range []int{1, 4, 16} {
		k := func(kind string) string { return fmt.Sprintf("%s/%d", kind, callers) }
		raw, st, alloc := results[k("raw")], results[k("store")], results[k("alloc")]
		if raw > 0 {
			lines = append(lines, fmt.Sprintf("callers=%-2d  raw %6.0f/s  store %6.0f/s (%3.0f%%)  alloc %6.0f/s (%3.0f%%)  paired alloc/raw %3.0f%%  CPU µs/op: raw %3.0f, store %3.0f, alloc %3.0f",
				callers, raw, st, 100*st/raw, alloc, 100*alloc/raw, 100*results[k("paired")], cpus[k("raw")], cpus[k("store")], cpus[k("alloc")]))
		}
	}
	sort.Strings(lines)
	b.Logf("\n%s", strings.Join(lines, "\n"))
}

// parallel runs op(0..b.N-1) on callers goroutines and returns the time it
// took and the process's CPU time per operation, which it also reports as
// cpu-µs/op: etcd runs in the process, so that is the whole cost of an
// operation (and of anything else the process does meanwhile).
func parallel(b *testing.B, callers int, op func(i int) error) (elapsed time.Duration, cpuPerOp float64) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Bool
	b.ResetTimer()
	start, cpu := time.Now(), cputime.Process()
	for range callers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N || failed.Load() {
					return
				}
				if err := op(i); err != nil {
					failed.Store(true)
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed, cpu = time.Since(start), cputime.Process()-cpu
	b.StopTimer()
	cpuPerOp = float64(cpu.Microseconds()) / float64(b.N)
	b.ReportMetric(cpuPerOp, "cpu-µs/op")
	return elapsed, cpuPerOp
}

// runChunk runs op(from..from+n-1) on callers goroutines and returns the
// time it took.
func runChunk(callers, from, n int, op func(i int) error) (time.Duration, error) {
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	start := time.Now()
	for range callers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= from+n {
					return
				}
				if err := op(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	select {
	case err := <-errs:
		return took, err
	default:
		return took, nil
	}
}

// BenchmarkAllocateReleaseOverEtcd is one allocation and its release by an
// allocator over the etcd store, one embedded member with fsync on: what a
// Service's create and delete cost the apiserver, serially.
//
//	go test -run x -bench AllocateReleaseOverEtcd -benchtime 2000x ./store/etcd/
func BenchmarkAllocateReleaseOverEtcd(b *testing.B) {
	ctx := context.Background()
	c := startCluster(b, 1)
	a := benchAllocator(b, c.newClient(b), "/bench-release", "10.0.0.0/16")
	owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "bench"}
	for b.Loop() {
		rec, err := a.AllocateNext(ctx, ipaddress.IPv4, owner)
		if err != nil {
			b.Fatal(err)
		}
		if err := a.Release(ctx, rec.Addr); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEnsureNextOverEtcd is a network plugin's setup over etcd, one
// embedded member with fsync on: EnsureNext for an owner holding no
// address, and its release (op=allocate); EnsureNext for an owner holding
// one, a setup retried (op=held).
//
//	go test -run x -bench EnsureNextOverEtcd -benchtime 1000x ./store/etcd/
func BenchmarkEnsureNextOverEtcd(b *testing.B) {
	ctx := context.Background()
	c := startCluster(b, 1)
	a := benchAllocator(b, c.newClient(b), "/bench-ensure", "10.0.0.0/16")
	owner := ipaddress.ParentRef{Resource: "pods", Namespace: "default", Name: "bench"}
	b.Run("op=allocate", func(b *testing.B) {
		for b.Loop() {
			rec, err := a.EnsureNext(ctx, ipaddress.IPv4, owner)
			if err != nil {
				b.Fatal(err)
			}
			if err := a.Release(ctx, rec.Addr); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("op=held", func(b *testing.B) {
		held, err := a.EnsureNext(ctx, ipaddress.IPv4, owner)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if rec, err := a.EnsureNext(ctx, ipaddress.IPv4, owner); err != nil || rec.Addr != held.Addr {
				b.Fatalf("EnsureNext = %s, %v; want %s", rec.Addr, err, held.Addr)
			}
		}
	})
}

// BenchmarkReleaseOwnerOverEtcd is a network plugin's teardown of a
// dual-stack pod over etcd, one embedded member with fsync on: the pair
// allocated (AllocateDualStack, one transaction), then given back by owner
// (ReleaseOwner: an owner lookup, then each address released at the
// revision it was listed at).
//
//	go test -run x -bench ReleaseOwnerOverEtcd -benchtime 500x ./store/etcd/
func BenchmarkReleaseOwnerOverEtcd(b *testing.B) {
	ctx := context.Background()
	c := startCluster(b, 1)
	a := benchAllocator(b, c.newClient(b), "/bench-release-owner", "10.0.0.0/16")
	if _, err := a.UpdateCIDR(ctx, "bench", netip.MustParsePrefix("10.0.0.0/16"), netip.MustParsePrefix("fd00::/112")); err != nil {
		b.Fatal(err)
	}
	owner := ipaddress.ParentRef{Resource: "pods", Namespace: "default", Name: "bench"}
	for b.Loop() {
		if _, _, err := a.AllocateDualStack(ctx, owner, netip.Addr{}, netip.Addr{}); err != nil {
			b.Fatal(err)
		}
		if got, err := a.ReleaseOwner(ctx, owner); err != nil || len(got) != 2 {
			b.Fatalf("ReleaseOwner = %v, %v; want a pair", got, err)
		}
	}
}

// BenchmarkRepairLeaksOverEtcd is a repair pass that finds 1,000 leaked
// records (their owners gone) and deletes them, over etcd, one embedded
// member with fsync on (stress.RepairLeaks).
//
//	go test -run '^$' -bench RepairLeaksOverEtcd -benchtime 5x ./store/etcd/
func BenchmarkRepairLeaksOverEtcd(b *testing.B) {
	c := startCluster(b, 1)
	stress.RepairLeaks(b, benchAllocator(b, c.newClient(b), "/bench-repair", "10.0.0.0/16"), 1000)
}

// BenchmarkRepairLostRecordsOverEtcd is a repair pass that writes back
// the records of 1,000 addresses their consumers hold, which the store
// lost, over etcd, one embedded member with fsync on
// (stress.RepairLostRecords).
//
//	go test -run '^$' -bench RepairLostRecordsOverEtcd -benchtime 5x ./store/etcd/
func BenchmarkRepairLostRecordsOverEtcd(b *testing.B) {
	c := startCluster(b, 1)
	stress.RepairLostRecords(b, benchAllocator(b, c.newClient(b), "/bench-repair", "10.0.0.0/16"), 1000)
}

// BenchmarkRepairAdoptionsOverEtcd is a repair pass that writes back the
// records of 1,000 addresses inside a Terminating CIDR, which the store
// lost, over etcd, one embedded member with fsync on
// (stress.RepairAdoptions).
//
//	go test -run '^$' -bench RepairAdoptionsOverEtcd -benchtime 5x ./store/etcd/
func BenchmarkRepairAdoptionsOverEtcd(b *testing.B) {
	c := startCluster(b, 1)
	stress.RepairAdoptions(b, benchAllocator(b, c.newClient(b), "/bench-adopt", "10.0.0.0/16"), 1000)
}

// BenchmarkRepairHandOversOverEtcd is a repair pass that gives 1,000
// records of owners gone to the consumers holding their addresses, over
// etcd, one embedded member with fsync on (stress.RepairHandOvers).
//
//	go test -run '^$' -bench RepairHandOversOverEtcd -benchtime 5x ./store/etcd/
func BenchmarkRepairHandOversOverEtcd(b *testing.B) {
	c := startCluster(b, 1)
	cli := c.newClient(b)
	stress.RepairHandOvers(b, func(i int) *allocator.Allocator {
		return benchAllocator(b, cli, fmt.Sprintf("/bench-handover-%d", i), "10.0.0.0/16")
	}, 1000)
}

// benchAllocator returns an allocator over a store under prefix holding one
// CIDR, "bench", of cidr; both are closed when b ends.
func benchAllocator(b *testing.B, cli *clientv3.Client, prefix, cidr string) *allocator.Allocator {
	b.Helper()
	ctx := context.Background()
	st, err := New(cli, WithPrefix(prefix))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	a, err := allocator.New(ctx, st)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Close() })
	if _, err := a.CreateCIDR(ctx, "bench", netip.MustParsePrefix(cidr)); err != nil {
		b.Fatal(err)
	}
	return a
}
