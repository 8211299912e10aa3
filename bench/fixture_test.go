package bench

import (
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"testing"
)

// full enables the expensive cases: 10M-address fixtures, /12 and /16 for
// the IPAddress allocator, 1M-address memory, cold-start and finalizer
// fixtures. run.sh sets it; without it (as in CI with -benchtime 1x) every
// benchmark function still runs reduced cases.
var full = os.Getenv("NETIPAM_BENCH_FULL") == "1"

// fixtureKey names a fixture: an implementation over a prefix, filled along
// one address sequence.
type fixtureKey struct {
	impl   string
	prefix netip.Prefix
	layout Layout // "" for the shuffled sequence of a small prefix
}

// The one cached fixture. Only one lives at a time: the big ones take
// gigabytes. A request for the same key with more addresses extends it.
var fx struct {
	key fixtureKey
	a   Allocator
	n   int
	seq []netip.Addr // the shuffled sequence of a small prefix
}

// dropFixture closes the cached fixture and collects its memory.
func dropFixture() {
	if fx.a != nil {
		fx.a.Close()
	}
	fx.a, fx.seq, fx.n = nil, nil, 0
	runtime.GC()
}

// sequence returns addresses [from, to) of the fixture's sequence.
func sequence(key fixtureKey, from, to int) []netip.Addr {
	if key.layout != "" {
		return LargeAddrs(key.prefix, key.layout, from, to)
	}
	if fx.seq == nil {
		fx.seq = Shuffled(key.prefix, 1)
	}
	return fx.seq[from:to]
}

// fixture returns the implementation key.impl over key.prefix holding the
// first n addresses of the key's sequence, reusing the cached fixture
// whenever it can.
func fixture(b *testing.B, key fixtureKey, n int) Allocator {
	b.Helper()
	if fx.a == nil || fx.key != key || fx.n > n {
		dropFixture()
		a, err := New(key.impl, key.prefix)
		if err != nil {
			b.Fatal(err)
		}
		fx.key, fx.a = key, a
	}
	if n > fx.n {
		if err := fx.a.Fill(sequence(key, fx.n, n)); err != nil {
			b.Fatal(err)
		}
		fx.n = n
		// A collection the fill started (hundreds of MiB at 10M
		// addresses) would still be marking through the start of the
		// measured loop, whose pointer writes would pay its write
		// barrier; the loops allocate nothing, so none starts later. The
		// testing package collects before each benchmark for the same
		// reason, but before the fixture exists. With collection off
		// (GOGC=off, as bench/ir.sh runs) none is in flight.
		if gcOn() {
			runtime.GC()
		}
	}
	return fx.a
}

// gcOn reports whether the garbage collector runs (GOGC is not off).
func gcOn() bool {
	pct := debug.SetGCPercent(-1)
	debug.SetGCPercent(pct)
	return pct >= 0
}

// freeAddrs returns up to max addresses of the cached small-prefix fixture
// that are not allocated.
func freeAddrs(max int) []netip.Addr {
	rest := fx.seq[fx.n:]
	return rest[:min(max, len(rest))]
}

func fmtFill(pct float64) string { return strconv.FormatFloat(pct, 'f', -1, 64) }

// fmtCount writes 1000000 as 1M, 100000 as 100k.
func fmtCount(n int) string {
	switch {
	case n >= 1e6 && n%1e6 == 0:
		return strconv.Itoa(n/1e6) + "M"
	case n >= 1e3 && n%1e3 == 0:
		return strconv.Itoa(n/1e3) + "k"
	}
	return strconv.Itoa(n)
}
