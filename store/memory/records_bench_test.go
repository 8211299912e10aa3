package memory

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/netipam/netipam/ipaddress"
)

// benchRecords is the table size of the record benchmarks: about a million.
const benchRecords = 1 << 20

// benchNames are benchRecords distinct 32-byte owner names, built once so
// that neither benchmark measures their making.
var benchNames = func() []string {
	out := make([]string, benchRecords)
	for i := range out {
		out[i] = fmt.Sprintf("payments-api-%019d", i)
	}
	return out
}()

// benchAddr is the i-th address of a benchmark: 10.0.0.0/8 counted up for
// IPv4 (wrapping after 2^24, far more than a window of benchRecords), and
// fd00::/64 counted up for IPv6.
func benchAddr(v6 bool, i int) netip.Addr {
	if !v6 {
		return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
	}
	var b [16]byte
	b[0] = 0xfd
	for j := range 8 {
		b[15-j] = byte(uint64(i) >> (8 * j))
	}
	return netip.AddrFrom16(b)
}

// benchOwner owns address i. The scope changes every 1024 addresses, so
// scope interning sees both repeats and switches.
func benchOwner(i int) ipaddress.ParentRef {
	return ipaddress.ParentRef{
		Resource:  "services",
		Namespace: benchNamespaces[(i>>10)&7],
		Name:      benchNames[i&(benchRecords-1)],
	}
}

var benchNamespaces = []string{"default", "kube-system", "payments", "ingress", "monitoring", "team-a", "team-b", "team-c"}

// fillRecords puts the addresses 0..n-1, keeping the owner index from
// the first if indexed (as after a lookup by owner), else none.
func fillRecords(v6 bool, n int, indexed bool) *records {
	r := newRecords()
	if indexed {
		r.indexOwners()
	}
	for i := range n {
		r.put(benchAddr(v6, i), benchOwner(i), 1700000000+int64(i), int64(i+1))
	}
	return r
}

var families = []struct {
	name string
	v6   bool
}{{"ipv4", false}, {"ipv6", true}}

// indexings are the owner index's two states: none kept, as until the first
// lookup by owner, and kept by every write, as after it.
var indexings = []struct {
	name    string
	indexed bool
}{{"owners=unindexed", false}, {"owners=indexed", true}}

// eachCase runs fn for each family and indexing.
func eachCase(b *testing.B, fn func(b *testing.B, v6, indexed bool)) {
	for _, f := range families {
		for _, x := range indexings {
			b.Run(f.name+"/"+x.name, func(b *testing.B) { fn(b, f.v6, x.indexed) })
		}
	}
}

// BenchmarkRecordsPutDelete slides a window of benchRecords live records:
// one op deletes the oldest record and puts a new one, so the table stays
// at a constant size while every slot and the name arena churn.
func BenchmarkRecordsPutDelete(b *testing.B) {
	eachCase(b, func(b *testing.B, v6, indexed bool) {
		r := fillRecords(v6, benchRecords, indexed)
		lo := 0
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := r.delete(benchAddr(v6, lo)); !ok {
				b.Fatalf("record %d missing", lo)
			}
			hi := lo + benchRecords
			r.put(benchAddr(v6, hi), benchOwner(hi), 1700000000, int64(hi+1))
			lo++
		}
		if r.len() != benchRecords {
			b.Fatalf("len %d, want %d", r.len(), benchRecords)
		}
	})
}

// BenchmarkRecordsHeavyOwner deletes and puts back a random record of an
// owner that holds n of them (a load balancer's pool, a node's pods): the
// cost must not grow with n.
func BenchmarkRecordsHeavyOwner(b *testing.B) {
	for _, n := range []int{1 << 10, 1 << 16} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			r := newRecords()
			r.indexOwners() // what must not grow with n
			owner := ipaddress.ParentRef{Resource: "services", Namespace: "lb", Name: "pool"}
			for i := range n {
				r.put(benchAddr(false, i), owner, 1700000000, int64(i+1))
			}
			order := rand.New(rand.NewPCG(1, 2)).Perm(n)
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				a := benchAddr(false, order[i])
				if !r.remove(a) {
					b.Fatalf("record %s missing", a)
				}
				r.put(a, owner, 1700000000, int64(n+i+1))
				i = (i + 1) % n
			}
		})
	}
}

// BenchmarkRecordsGet looks up live records at a table of benchRecords.
func BenchmarkRecordsGet(b *testing.B) {
	for _, f := range families {
		b.Run(f.name, func(b *testing.B) {
			r := fillRecords(f.v6, benchRecords, false)
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := r.get(benchAddr(f.v6, i)); !ok {
					b.Fatalf("record %d missing", i)
				}
				i = (i + 7919) & (benchRecords - 1)
			}
		})
	}
}

// BenchmarkRecordsHasAbsent looks up addresses the store does not hold in
// a store of benchRecords records, as every allocation does before it
// writes: the probe reads the home group and, for a slot whose fragment
// matches by chance (about one lookup in 40), its entry in the arena.
func BenchmarkRecordsHasAbsent(b *testing.B) {
	for _, f := range families {
		b.Run(f.name, func(b *testing.B) {
			r := fillRecords(f.v6, benchRecords, false)
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				if r.has(benchAddr(f.v6, benchRecords+i)) {
					b.Fatalf("address %d found", benchRecords+i)
				}
				i = (i + 7919) & (benchRecords - 1)
			}
		})
	}
}

// BenchmarkRecordsHeap reports the heap a table of benchRecords records
// holds, per record, names included (the owner names are 32 bytes). Run it
// with -benchtime=1x: every iteration builds a whole table.
func BenchmarkRecordsHeap(b *testing.B) {
	eachCase(b, func(b *testing.B, v6, indexed bool) {
		var per float64
		for b.Loop() {
			per = heapPerRecord(v6, benchRecords, indexed)
		}
		b.ReportMetric(per, "B/record")
	})
}

func heapPerRecord(v6 bool, n int, indexed bool) float64 {
	before := settledHeap()
	r := fillRecords(v6, n, indexed)
	after := settledHeap()
	runtime.KeepAlive(r)
	return float64(int64(after)-int64(before)) / float64(n)
}

func settledHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkRecordsFill puts benchRecords records into an empty table, growth
// included; ns/op is per record.
func BenchmarkRecordsFill(b *testing.B) {
	eachCase(b, func(b *testing.B, v6, indexed bool) {
		for b.Loop() {
			fillRecords(v6, benchRecords, indexed)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchRecords), "ns/record")
	})
}

// BenchmarkRecordsIndexOwners is the first lookup by owner in a store of
// benchRecords records: the owner index built from them all, which the
// lookup waits for, with the store locked. Metric: ns/record.
func BenchmarkRecordsIndexOwners(b *testing.B) {
	for _, f := range families {
		b.Run(f.name, func(b *testing.B) {
			var took time.Duration
			for range b.N {
				b.StopTimer()
				r := fillRecords(f.v6, benchRecords, false)
				b.StartTimer()
				start := time.Now()
				if got := r.of(benchOwner(0)); len(got) != 1 {
					b.Fatalf("of(%v) = %d records, want 1", benchOwner(0), len(got))
				}
				took += time.Since(start)
			}
			b.ReportMetric(float64(took.Nanoseconds())/float64(b.N*benchRecords), "ns/record")
		})
	}
}
