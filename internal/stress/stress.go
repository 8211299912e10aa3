package stress

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go4.org/netipx"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// Duration is how long a stress run lasts: STRESS_MS milliseconds, 3 s by
// default.
func Duration() time.Duration {
	if n, err := strconv.Atoi(os.Getenv("STRESS_MS")); err == nil && n > 0 {
		return time.Duration(n) * time.Millisecond
	}
	return 3 * time.Second
}

// Seed is STRESS_SEED, or a new seed; t logs it. A run is not replayed by
// its seed: the workers share state and the scheduler interleaves them
// differently every time. The seed only starts the random draws again.
func Seed(t testing.TB) uint64 {
	s, err := strconv.ParseUint(os.Getenv("STRESS_SEED"), 10, 64)
	if err != nil {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d", s)
	return s
}

// Report fails t with every violation Run found, by rule.
func Report(t testing.TB, v map[string][]string) {
	t.Helper()
	for _, rule := range slices.Sorted(maps.Keys(v)) {
		for _, m := range v[rule] {
			t.Errorf("%s: %s", rule, m)
		}
	}
}

// Config shapes one run.
type Config struct {
	Allocators int
	Workers    int
	Duration   time.Duration
	Seed       uint64
	// Ops enables operation kinds by name (nil: all). See opNames.
	Ops []string
	// V4, V6 are the prefixes CIDRs are made of.
	V4, V6 []netip.Prefix
	// Names is how many CIDR names ("c0".."cN-1") there are.
	Names int
	// Excluded is given to every allocator.
	Excluded []netipx.IPRange
	// StrictBands checks the lower-band rule against the recorder's model;
	// exact only where choice and create are one critical section (memory).
	StrictBands bool
	// Observer gives every other allocator an observer (general path).
	Observer bool
	// Checkpoints is how many quiescent checks to make during the run.
	Checkpoints int
	// CloseEvery replaces an allocator this often (0: never).
	CloseEvery time.Duration
	// Policy, Strategy options for the allocators (nil: defaults).
	Policy   func(i int) allocator.Policy
	Strategy func(i int) allocator.Strategy
	// Setup runs once, with the first allocator, before the workers.
	Setup func(ctx context.Context, a *allocator.Allocator) error
	// Revision returns the store's current revision, if it can tell.
	Revision func(ctx context.Context) (int64, error)
}

// opNames are the operation kinds, by name.
func opNames() []string {
	return []string{"next4", "next6", "static", "dual", "release", "releaseOwner", "create", "update", "delete", "ensure", "ensureNext", "dryrun"}
}

// Excluded are ranges for Config.Excluded inside the default prefixes:
// one in an IPv4 upper band, one IPv6 address in a lower band.
func Excluded() []netipx.IPRange {
	return []netipx.IPRange{
		netipx.IPRangeFrom(netip.MustParseAddr("10.0.0.200"), netip.MustParseAddr("10.0.0.203")),
		netipx.IPRangeFrom(netip.MustParseAddr("fd00::5"), netip.MustParseAddr("fd00::5")),
	}
}

// defaultV4 are nested and overlapping IPv4 prefixes.
func defaultV4() []netip.Prefix {
	return []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/24"),
		netip.MustParsePrefix("10.0.0.0/25"),
		netip.MustParsePrefix("10.0.0.128/25"),
		netip.MustParsePrefix("10.0.0.0/23"),
		netip.MustParsePrefix("10.0.1.0/24"),
		netip.MustParsePrefix("10.0.0.0/28"),
		netip.MustParsePrefix("10.0.0.16/28"),
		netip.MustParsePrefix("10.0.0.0/27"),
	}
}

// defaultV6 are nested and overlapping IPv6 prefixes.
func defaultV6() []netip.Prefix {
	return []netip.Prefix{
		netip.MustParsePrefix("fd00::/120"),
		netip.MustParsePrefix("fd00::/121"),
		netip.MustParsePrefix("fd00::80/121"),
		netip.MustParsePrefix("fd00::/119"),
		netip.MustParsePrefix("fd00::100/120"),
		netip.MustParsePrefix("fd00::/124"),
	}
}

// Lifecycle returns cfg set up for a lifecycle run: two CIDR names over
// a few nested prefixes, so that CIDRs of the same names are created,
// updated and deleted between allocations from them (every operation but
// ensure and dryrun). Such a run found a deletion-safety race once.
func Lifecycle(cfg Config) Config {
	cfg.Names = 2
	cfg.Ops = []string{"next4", "next6", "static", "dual", "release", "releaseOwner", "create", "update", "delete"}
	cfg.V4 = []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/24"),
		netip.MustParsePrefix("10.0.0.0/25"),
		netip.MustParsePrefix("10.0.0.0/27"),
		netip.MustParsePrefix("10.0.0.0/23"),
	}
	cfg.V6 = []netip.Prefix{netip.MustParsePrefix("fd00::/120"), netip.MustParsePrefix("fd00::/123")}
	return cfg
}

type apiAlloc struct {
	addr    netip.Addr
	rev     int64
	owner   ipaddress.ParentRef
	dynamic bool
	exact   bool // the allocator was not replaced during the call
	op      string
}

type slot struct {
	a   atomic.Pointer[allocator.Allocator]
	gen atomic.Int64
}

// Harness runs one configuration.
type Harness struct {
	t     testing.TB
	cfg   Config
	st    store.Store
	rec   *recorder
	slots []*slot
	opts  func(i int) []allocator.Option

	gate sync.RWMutex // workers hold R per op; checkpoints hold W

	mu         sync.Mutex
	allocs     []apiAlloc
	held       map[netip.Addr]bool // addresses handed out, for Release
	violations map[string][]string
	opCount    map[string]int
	errCount   map[string]int
	dualSeq    atomic.Int64
	// unsure are the owners and families of EnsureNext calls that failed
	// with an error that may leave the owner a second address (see
	// allocator.EnsureNext): the check that it holds one at most skips
	// them.
	unsure map[ensureKey]bool
}

// ensureKey is an owner of EnsureNext's calls and a family.
type ensureKey struct {
	owner string
	fam   ipaddress.Family
}

// ensureOwner is one of the few owners only EnsureNext allocates for, so
// that each holds at most one address of a family (see step).
func ensureOwner(i int) ipaddress.ParentRef {
	return ipaddress.ParentRef{Resource: "pods", Namespace: "ensure", Name: fmt.Sprintf("e-%d", i)}
}

func (h *Harness) violate(rule, format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.violations[rule]) < 20 {
		h.violations[rule] = append(h.violations[rule], fmt.Sprintf(format, args...))
	} else {
		h.violations[rule+"(more)"] = []string{"..."}
	}
}

// Run runs the configuration over st and returns the violations by rule.
func Run(t testing.TB, st store.Store, cfg Config) map[string][]string {
	if cfg.V4 == nil {
		cfg.V4 = defaultV4()
	}
	if cfg.V6 == nil {
		cfg.V6 = defaultV6()
	}
	if cfg.Names == 0 {
		cfg.Names = 6
	}
	if cfg.Allocators == 0 {
		cfg.Allocators = 3
	}
	if cfg.Workers == 0 {
		cfg.Workers = 4
	}
	if cfg.Ops == nil {
		cfg.Ops = opNames()
	}
	h := &Harness{t: t, cfg: cfg, st: st, rec: newRecorder(cfg.Excluded),
		held: map[netip.Addr]bool{}, violations: map[string][]string{}, opCount: map[string]int{}, errCount: map[string]int{},
		unsure: map[ensureKey]bool{}}
	h.opts = func(i int) []allocator.Option {
		o := []allocator.Option{allocator.WithExcluded(cfg.Excluded...)}
		if cfg.Observer && i%2 == 1 {
			o = append(o, allocator.WithObserver(nopObserver{}))
		}
		if cfg.Policy != nil {
			o = append(o, allocator.WithPolicy(cfg.Policy(i)))
		}
		if cfg.Strategy != nil {
			if st := cfg.Strategy(i); st != nil {
				o = append(o, allocator.WithStrategy(st))
			}
		}
		return o
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := st.Watch(ctx, h.rec); err != nil {
		t.Fatalf("watch: %v", err)
	}
	for i := 0; i < cfg.Allocators; i++ {
		a, err := allocator.New(ctx, st, h.opts(i)...)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		s := &slot{}
		s.a.Store(a)
		h.slots = append(h.slots, s)
	}
	defer func() {
		for _, s := range h.slots {
			s.a.Load().Close()
		}
	}()

	if cfg.Setup != nil {
		if err := cfg.Setup(ctx, h.slots[0].a.Load()); err != nil {
			t.Fatalf("setup: %v", err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < cfg.Workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(w)+1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				h.gate.RLock()
				h.step(ctx, rng)
				h.gate.RUnlock()
			}
		}(w)
	}
	if cfg.CloseEvery > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(cfg.Seed, 999))
			tick := time.NewTicker(cfg.CloseEvery)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				// Under the gate like a worker: an allocator may be closed
				// under another worker's call (ErrClosed is allowed there),
				// never under a checkpoint's, which holds the gate alone.
				h.gate.RLock()
				i := rng.IntN(len(h.slots))
				s := h.slots[i]
				n, err := allocator.New(ctx, st, h.opts(i)...)
				if err != nil {
					h.violate("NewDuringChurn", "New: %v", err)
					h.gate.RUnlock()
					continue
				}
				// Swap before the new generation: a worker that reads the
				// new generation gets the new allocator, and one that read
				// the old gets either and is told its call was not exact.
				old := s.a.Swap(n)
				s.gen.Add(1)
				old.Close()
				h.gate.RUnlock()
			}
		}()
	}
	if cfg.Checkpoints > 0 {
		every := cfg.Duration / time.Duration(cfg.Checkpoints+1)
		for i := 0; i < cfg.Checkpoints; i++ {
			time.Sleep(every)
			h.gate.Lock()
			h.quiescentCheck(ctx, fmt.Sprintf("checkpoint %d", i))
			h.gate.Unlock()
		}
		time.Sleep(every)
	} else {
		time.Sleep(cfg.Duration)
	}
	close(stop)
	wg.Wait()
	h.quiescentCheck(ctx, "end")
	h.historyCheck()

	h.rec.mu.Lock()
	for k, v := range h.rec.violations {
		h.violations[k] = append(h.violations[k], v...)
	}
	h.rec.mu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	t.Logf("ops: %v", h.opCount)
	t.Logf("errors: %v", h.errCount)
	return h.violations
}

type nopObserver struct{}

func (nopObserver) Allocated(allocator.AllocationEvent) {}

func (h *Harness) pick(rng *rand.Rand) (*allocator.Allocator, *slot, int64) {
	s := h.slots[rng.IntN(len(h.slots))]
	g := s.gen.Load()
	return s.a.Load(), s, g
}

func (h *Harness) count(op string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.opCount[op]++
	if err != nil {
		msg := err.Error()
		if i := strings.IndexAny(msg, "0123456789"); i > 0 && i < 40 {
			msg = msg[:i]
		}
		if len(msg) > 50 {
			msg = msg[:50]
		}
		h.errCount[op+": "+msg]++
	}
}

// typed checks err against the sentinels allowed for op.
func (h *Harness) typed(op string, err error, allowed ...error) {
	h.count(op, err)
	if err == nil {
		return
	}
	allowed = append(allowed, allocator.ErrClosed)
	for _, s := range allowed {
		if errors.Is(err, s) {
			return
		}
	}
	h.violate("ErrorsAreTyped", "%s: untyped/unexpected error %T: %v", op, err, err)
}

func (h *Harness) owner(rng *rand.Rand) ipaddress.ParentRef {
	return ipaddress.ParentRef{Resource: "services", Namespace: "ns", Name: fmt.Sprintf("svc-%d", rng.IntN(6))}
}

func (h *Harness) recordAlloc(rec ipaddress.IPAddress, dynamic, exact bool, op string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.allocs = append(h.allocs, apiAlloc{addr: rec.Addr, rev: rec.Revision, owner: rec.Parent, dynamic: dynamic, exact: exact, op: op})
	h.held[rec.Addr] = true
}

func (h *Harness) randomAddr(rng *rand.Rand, v6 bool) netip.Addr {
	ps := h.cfg.V4
	if v6 {
		ps = h.cfg.V6
	}
	p := ps[rng.IntN(len(ps))]
	r, _ := cidrset.HostRange(p)
	// mostly in the lower band, sometimes the network/broadcast address
	switch rng.IntN(8) {
	case 0:
		return p.Addr()
	case 1, 2, 3:
		return r.From().Next().Prev()
	}
	lower, upper, has, _ := cidrset.Bands(p)
	if has && rng.IntN(2) == 0 {
		n := 1 + rng.IntN(16)
		a := lower.From()
		for i := 1; i < n && a != lower.To(); i++ {
			a = a.Next()
		}
		return a
	}
	n := rng.IntN(40)
	a := upper.From()
	for i := 0; i < n && a != upper.To(); i++ {
		a = a.Next()
	}
	return a
}

func (h *Harness) enabled(op string) bool { return slices.Contains(h.cfg.Ops, op) }

func (h *Harness) step(ctx context.Context, rng *rand.Rand) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	a, s, gen := h.pick(rng)
	exact := func() bool { return s.gen.Load() == gen }
	names := opNames()
	op := names[rng.IntN(len(names))]
	// weight allocation and release up
	switch rng.IntN(10) {
	case 0, 1:
		op = []string{"next4", "next6"}[rng.IntN(2)]
	case 2, 3:
		op = "release"
	case 4:
		op = "static"
	}
	if !h.enabled(op) {
		return
	}
	switch op {
	case "next4", "next6":
		f := ipaddress.IPv4
		if op == "next6" {
			f = ipaddress.IPv6
		}
		rec, err := a.AllocateNext(ctx, f, h.owner(rng))
		h.typed(op, err, allocator.ErrFull, allocator.ErrMismatch)
		if err == nil {
			if ipaddress.FamilyOf(rec.Addr) != f {
				h.violate("AllocateNextFamily", "%s returned %s", op, rec.Addr)
			}
			h.recordAlloc(rec, true, exact(), op)
		}
	case "static":
		addr := h.randomAddr(rng, rng.IntN(2) == 0)
		rec, err := a.Allocate(ctx, addr, h.owner(rng))
		h.typed(op, err, allocator.ErrAllocated, allocator.ErrNotInRange, allocator.ErrMismatch, allocator.ErrExcluded)
		if err == nil {
			if rec.Addr != addr {
				h.violate("StaticReturnsAddr", "asked %s got %s", addr, rec.Addr)
			}
			h.recordAlloc(rec, false, exact(), op)
		}
	case "dual":
		owner := ipaddress.ParentRef{Resource: "services", Namespace: "dual", Name: fmt.Sprintf("d-%d", h.dualSeq.Add(1))}
		var v4, v6 netip.Addr
		if rng.IntN(3) == 0 {
			v4 = h.randomAddr(rng, false)
		}
		if rng.IntN(3) == 0 {
			v6 = h.randomAddr(rng, true)
		}
		r4, r6, err := a.AllocateDualStack(ctx, owner, v4, v6)
		h.typed(op, err, allocator.ErrFull, allocator.ErrMismatch, allocator.ErrAllocated, allocator.ErrNotInRange, allocator.ErrExcluded)
		got, gerr := h.st.AddressesOf(context.Background(), owner)
		if gerr != nil && !errors.Is(gerr, store.ErrClosed) {
			h.violate("ErrorsAreTyped", "AddressesOf: %v", gerr)
		}
		if err != nil {
			if len(got) != 0 {
				h.violate("DualStackBothOrNeither", "failed (%v) but store holds %v for %s", err, got, owner.Name)
			}
			if r4.Addr.IsValid() || r6.Addr.IsValid() {
				h.violate("DualStackBothOrNeither", "failed (%v) but returned %v %v", err, r4.Addr, r6.Addr)
			}
			return
		}
		// got may miss one: a random Release can free it at once.
		okGot := len(got) <= 2
		for _, g := range got {
			okGot = okGot && (g.Addr == r4.Addr || g.Addr == r6.Addr)
		}
		if !r4.Addr.Is4() || !r6.Addr.Is6() || !okGot || r4.Revision != r6.Revision {
			h.violate("DualStackBothOrNeither", "succeeded with %v %v, store holds %v", r4, r6, got)
		}
		if v4.IsValid() && r4.Addr != v4 || v6.IsValid() && r6.Addr != v6 {
			h.violate("StaticReturnsAddr", "dual asked %s %s got %s %s", v4, v6, r4.Addr, r6.Addr)
		}
		h.recordAlloc(r4, !v4.IsValid(), exact(), op)
		h.recordAlloc(r6, !v6.IsValid(), exact(), op)
	case "release":
		var addr netip.Addr
		h.mu.Lock()
		if rng.IntN(10) > 0 && len(h.held) > 0 {
			n := rng.IntN(len(h.held))
			for x := range h.held {
				if n == 0 {
					addr = x
					break
				}
				n--
			}
			delete(h.held, addr)
		}
		h.mu.Unlock()
		if !addr.IsValid() {
			addr = h.randomAddr(rng, rng.IntN(2) == 0)
		}
		err := a.Release(ctx, addr)
		h.typed(op, err, allocator.ErrNotFound)
	case "releaseOwner":
		if rng.IntN(4) != 0 {
			return
		}
		out, err := a.ReleaseOwner(ctx, h.owner(rng))
		h.typed(op, err, allocator.ErrNotFound)
		h.mu.Lock()
		for _, x := range out {
			delete(h.held, x)
		}
		h.mu.Unlock()
	case "create":
		name := fmt.Sprintf("c%d", rng.IntN(h.cfg.Names))
		var ps []netip.Prefix
		switch rng.IntN(3) {
		case 0:
			ps = []netip.Prefix{h.cfg.V4[rng.IntN(len(h.cfg.V4))]}
		case 1:
			ps = []netip.Prefix{h.cfg.V6[rng.IntN(len(h.cfg.V6))]}
		default:
			ps = []netip.Prefix{h.cfg.V4[rng.IntN(len(h.cfg.V4))], h.cfg.V6[rng.IntN(len(h.cfg.V6))]}
		}
		_, err := a.CreateCIDR(ctx, name, ps...)
		h.typed(op, err, allocator.ErrExists)
	case "update":
		name := fmt.Sprintf("c%d", rng.IntN(h.cfg.Names))
		c, err := a.GetCIDR(name)
		if err != nil {
			h.typed(op, err, allocator.ErrNotFound)
			return
		}
		if len(c.Prefixes) != 1 {
			return
		}
		other := h.cfg.V6[rng.IntN(len(h.cfg.V6))]
		if c.Prefixes[0].Addr().Is6() {
			other = h.cfg.V4[rng.IntN(len(h.cfg.V4))]
		}
		_, err = a.UpdateCIDR(ctx, name, c.Prefixes[0], other)
		// ErrInvalid: it became dual-stack meanwhile (or was replaced by
		// one of another family).
		h.typed(op, err, allocator.ErrNotFound, allocator.ErrInvalid)
	case "delete":
		name := fmt.Sprintf("c%d", rng.IntN(h.cfg.Names))
		if rng.IntN(8) == 0 {
			name = cidrset.DefaultName
		}
		err := a.DeleteCIDR(ctx, name)
		h.typed(op, err, allocator.ErrNotFound, allocator.ErrDeletionBlocked)
	case "ensure":
		ps := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}
		if rng.IntN(2) == 0 {
			ps = append(ps, netip.MustParsePrefix("fd00::/120"))
		}
		_, err := a.EnsureDefault(ctx, ps...)
		h.count(op, err)
		if err != nil && !errors.Is(err, allocator.ErrDefaultMismatch) && !errors.Is(err, allocator.ErrClosed) {
			h.violate("EnsureDefaultEnsures", "EnsureDefault(%v): %v", ps, err)
		}
	case "ensureNext":
		// Few owners, emptied now and then, so that EnsureNext and
		// EnsureDualStack allocate again and not only return what the
		// owner holds. (Calls at once
		// for an owner holding none are stress.EnsureNextAgrees' to meet:
		// here they seldom do.)
		owner := ensureOwner(rng.IntN(2))
		if rng.IntN(4) == 0 {
			_, err := a.ReleaseOwner(ctx, owner)
			h.typed("ensureNext-release", err)
			return
		}
		if rng.IntN(3) == 0 {
			v4, v6, err := a.EnsureDualStack(ctx, owner)
			h.typed("ensureDualStack", err, allocator.ErrFull, allocator.ErrMismatch)
			if err != nil {
				if !errors.Is(err, allocator.ErrFull) && !errors.Is(err, allocator.ErrMismatch) {
					h.mu.Lock()
					h.unsure[ensureKey{owner.Name, ipaddress.IPv4}] = true
					h.unsure[ensureKey{owner.Name, ipaddress.IPv6}] = true
					h.mu.Unlock()
				}
				return
			}
			if !v4.Addr.Is4() || !v6.Addr.Is6() || v4.Parent != owner || v6.Parent != owner {
				h.violate("EnsureDualStackGivesTheOwnersPair", "EnsureDualStack(%s) returned %s of %s and %s of %s", owner.Name, v4.Addr, v4.Parent, v6.Addr, v6.Parent)
			}
			return
		}
		f := []ipaddress.Family{ipaddress.IPv4, ipaddress.IPv6}[rng.IntN(2)]
		rec, err := a.EnsureNext(ctx, f, owner)
		h.typed(op, err, allocator.ErrFull, allocator.ErrMismatch)
		if err != nil {
			if !errors.Is(err, allocator.ErrFull) && !errors.Is(err, allocator.ErrMismatch) {
				h.mu.Lock()
				h.unsure[ensureKey{owner.Name, f}] = true
				h.mu.Unlock()
			}
			return
		}
		if ipaddress.FamilyOf(rec.Addr) != f || rec.Parent != owner {
			h.violate("EnsureNextGivesTheOwnersAddress", "EnsureNext(%v, %s) returned %s of %s", f, owner.Name, rec.Addr, rec.Parent)
		}
	case "dryrun":
		d := a.DryRun()
		switch rng.IntN(4) {
		case 0:
			_, err := d.AllocateNext(ctx, ipaddress.IPv4, h.owner(rng))
			h.typed("dry-next", err, allocator.ErrFull, allocator.ErrMismatch)
		case 1:
			err := d.Allocate(ctx, h.randomAddr(rng, rng.IntN(2) == 0), h.owner(rng))
			h.typed("dry-static", err, allocator.ErrAllocated, allocator.ErrNotInRange, allocator.ErrMismatch, allocator.ErrExcluded)
		case 2:
			_, err := d.DeleteCIDR(ctx, fmt.Sprintf("c%d", rng.IntN(h.cfg.Names)))
			h.typed("dry-delete", err, allocator.ErrNotFound)
		case 3:
			err := d.CreateCIDR(ctx, fmt.Sprintf("c%d", rng.IntN(h.cfg.Names)), h.cfg.V4[rng.IntN(len(h.cfg.V4))])
			h.typed("dry-create", err, allocator.ErrExists)
		}
	}
}

// removable reports whether Terminating c may go per SPEC §4 (Beyond):
// every record it host-contains is host-contained by another live CIDR.
// Callers hold rec.mu.
func (r *recorder) removable(c cidrset.CIDR) (bool, []netip.Addr) {
	var blocking []netip.Addr
	for a := range r.addrs {
		inside := false
		for _, p := range c.Prefixes {
			if cidrset.HostContains(p, a) {
				inside = true
			}
		}
		if !inside {
			continue
		}
		if live, _ := r.anyHolding(a, c.Name); len(live) == 0 {
			blocking = append(blocking, a)
		}
	}
	return len(blocking) == 0, blocking
}

func (h *Harness) quiescentCheck(ctx context.Context, when string) {
	// Wait for removable Terminating CIDRs to go (background reconcilers),
	// and for the store to stop changing.
	// Longer than the reconciler's longest backoff (10 s): a re-check that
	// failed during the churn may wait that long before it runs again.
	deadline := time.Now().Add(12 * time.Second)
	var stuck []string
	for {
		stuck = stuck[:0]
		h.rec.mu.Lock()
		for _, c := range h.rec.cidrs {
			if c.Terminating {
				if ok, _ := h.rec.removable(c); ok {
					stuck = append(stuck, fmt.Sprintf("%s %v rev %d", c.Name, c.Prefixes, c.Revision))
				}
			}
		}
		h.rec.mu.Unlock()
		if len(stuck) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(stuck) > 0 {
		sort.Strings(stuck)
		h.violate("NoCIDRStuckTerminating", "%s: removable Terminating CIDRs still present after 12s: %v", when, stuck)
	}
	// Let the store settle: no revision change over 100 ms.
	var rev int64
	for i := 0; i < 50; i++ {
		h.rec.mu.Lock()
		r1 := h.rec.rev
		h.rec.mu.Unlock()
		time.Sleep(100 * time.Millisecond)
		h.rec.mu.Lock()
		r2 := h.rec.rev
		h.rec.mu.Unlock()
		if r1 == r2 {
			rev = r2
			break
		}
	}
	if h.cfg.Revision != nil {
		if r, err := h.cfg.Revision(ctx); err == nil && r != rev {
			h.violate("RecorderInSync", "%s: recorder at %d, store at %d", when, rev, r)
		}
	}
	// Store contents and every allocator's view against a copy of the
	// recorder's model (no lock held while calling the allocators: their
	// lock is the store's, under which the recorder is called). Redone if
	// a background reconciler wrote meanwhile.
	for attempt := 0; ; attempt++ {
		m := h.rec.clone()
		var found [][2]string
		add := func(rule, format string, args ...any) {
			found = append(found, [2]string{rule, fmt.Sprintf(format, args...)})
		}
		list, err := h.st.ListAddresses(ctx)
		if err != nil {
			h.violate("ErrorsAreTyped", "ListAddresses: %v", err)
			return
		}
		if len(list) != len(m.addrs) {
			add("RecorderInSync", "%s: store has %d records, recorder %d", when, len(list), len(m.addrs))
		}
		ensured := map[ensureKey][]netip.Addr{}
		for _, r := range list {
			if _, ok := m.addrs[r.Addr]; !ok {
				add("RecorderInSync", "%s: %s in store, not in recorder", when, r.Addr)
			}
			live, dying := m.anyHolding(r.Addr, "")
			if len(live)+len(dying) == 0 {
				add("EveryRecordInsideACIDR", "%s: record %s (owner %s) inside no CIDR", when, r.Addr, r.Parent)
			}
			if r.Parent.Namespace == ensureOwner(0).Namespace {
				k := ensureKey{r.Parent.Name, ipaddress.FamilyOf(r.Addr)}
				ensured[k] = append(ensured[k], r.Addr)
			}
		}
		h.mu.Lock()
		for k, addrs := range ensured {
			if len(addrs) > 1 && !h.unsure[k] {
				add("EnsureNextKeepsOne", "%s: %s holds %v of %v, every EnsureNext for it having succeeded", when, k.owner, addrs, k.fam)
			}
		}
		h.mu.Unlock()
		for i, s := range h.slots {
			a := s.a.Load()
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := a.WaitRevision(wctx, m.rev)
			cancel()
			if err != nil {
				add("AllocatorCatchesUp", "%s: allocator %d WaitRevision(%d): %v", when, i, m.rev, err)
				continue
			}
			compareIndex(add, m, when, i, a)
			h.probeNext(ctx, add, m, when, i, a)
		}
		h.rec.mu.Lock()
		same := h.rec.rev == m.rev
		h.rec.mu.Unlock()
		if same || attempt >= 5 {
			for _, f := range found {
				h.violate(f[0], "%s", f[1])
			}
			return
		}
	}
}

// clone copies the model. Callers do not hold rec.mu.
func (r *recorder) clone() *recorder {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := newRecorder(r.excluded)
	m.rev = r.rev
	for k, v := range r.cidrs {
		m.cidrs[k] = v.Clone()
	}
	for k, v := range r.addrs {
		m.addrs[k] = v
	}
	return m
}

// probeNext asks a (dry run, then for real and released again) for the
// next address of each family: it must be free, live, not excluded, upper
// band first, and ErrFull only when nothing is free.
func (h *Harness) probeNext(ctx context.Context, add func(string, string, ...any), m *recorder, when string, i int, a *allocator.Allocator) {
	for _, f := range []ipaddress.Family{ipaddress.IPv4, ipaddress.IPv6} {
		free := false
		anyLive := false
		for _, c := range m.cidrs {
			p, ok := c.Prefix(f)
			if !ok || c.Terminating {
				continue
			}
			anyLive = true
			r, ok := cidrset.HostRange(p)
			if !ok {
				continue
			}
			for x := r.From(); ; x = x.Next() {
				if _, held := m.addrs[x]; !held && !m.isExcluded(x) {
					free = true
					break
				}
				if x == r.To() {
					break
				}
			}
		}
		got, err := a.DryRun().AllocateNext(ctx, f, ipaddress.ParentRef{Resource: "probe", Name: "p"})
		switch {
		case err == nil:
			if _, held := m.addrs[got]; held {
				add("QuiescentNextIsFree", "%s: allocator %d dry-run next %v = %s, held", when, i, f, got)
			}
			if len(m.liveHolding(got)) == 0 {
				add("QuiescentNextIsLive", "%s: allocator %d dry-run next %v = %s, in no live CIDR", when, i, f, got)
			}
			if m.isExcluded(got) {
				add("NoAllocationOfExcludedAddress", "%s: allocator %d dry-run next %v = %s, excluded", when, i, f, got)
			}
			bad := true
			for _, p := range m.liveHolding(got) {
				if !inLower(p, got) || !m.upperHasRoom(p) {
					bad = false
				}
			}
			if bad && len(m.liveHolding(got)) > 0 {
				add("DynamicUpperBandFirst", "%s: allocator %d dry-run next %v = %s, lower band with upper room in %v", when, i, f, got, m.liveHolding(got))
			}
		case errors.Is(err, allocator.ErrFull):
			if free {
				add("FullOnlyWhenFull", "%s: allocator %d dry-run next %v: %v though live CIDRs have free addresses", when, i, f, err)
			}
		case errors.Is(err, allocator.ErrMismatch):
			if anyLive {
				add("FullOnlyWhenFull", "%s: allocator %d dry-run next %v: %v though live CIDRs serve it", when, i, f, err)
			}
		default:
			add("ErrorsAreTyped", "%s: allocator %d dry-run next %v: %v", when, i, f, err)
		}
	}
}

// compareIndex checks a's CIDRs, Usage and FamilyUsage against the
// recorder's model. Callers hold rec.mu.
func compareIndex(violate func(string, string, ...any), r *recorder, when string, i int, a *allocator.Allocator) {
	got := a.CIDRs()
	if len(got) != len(r.cidrs) {
		violate("IndexMatchesStore", "%s: allocator %d knows %d CIDRs, store %d", when, i, len(got), len(r.cidrs))
	}
	for _, c := range got {
		m, ok := r.cidrs[c.Name]
		if !ok || m.Revision != c.Revision || m.Terminating != c.Terminating || !slices.Equal(m.Prefixes, c.Prefixes) {
			violate("IndexMatchesStore", "%s: allocator %d has %+v, store %+v", when, i, c, m)
		}
	}
	for name, c := range r.cidrs {
		u, err := a.Usage(name)
		if err != nil {
			violate("UsageMatchesStore", "%s: allocator %d Usage(%s): %v", when, i, name, err)
			continue
		}
		if u.Terminating != c.Terminating || len(u.Prefixes) != len(c.Prefixes) {
			violate("UsageMatchesStore", "%s: allocator %d Usage(%s) = %+v for %+v", when, i, name, u, c)
			continue
		}
		for j, p := range c.Prefixes {
			want := r.usageOf([]netip.Prefix{p})
			if gotU := u.Prefixes[j].Usage; gotU != want {
				violate("UsageMatchesStore", "%s: allocator %d Usage(%s)[%s] = %v, want %v", when, i, name, p, fmtUsage(gotU), fmtUsage(want))
			}
		}
	}
	for _, f := range []ipaddress.Family{ipaddress.IPv4, ipaddress.IPv6} {
		var ps []netip.Prefix
		for _, c := range r.cidrs {
			if p, ok := c.Prefix(f); ok && !c.Terminating {
				ps = append(ps, p)
			}
		}
		want := r.usageOf(ps)
		if gotU := a.FamilyUsage(f); gotU != want {
			violate("FamilyUsageMatchesStore", "%s: allocator %d FamilyUsage(%v) = %v, want %v (live %v)", when, i, f, fmtUsage(gotU), fmtUsage(want), ps)
		}
	}
}

func fmtUsage(u allocator.Usage) string {
	return fmt.Sprintf("{Size:%s Used:%s Free:%s}", u.Size, u.Used, u.Free)
}

// usageOf counts the union of the host ranges of ps, arithmetically.
func (r *recorder) usageOf(ps []netip.Prefix) allocator.Usage {
	var b netipx.IPSetBuilder
	for _, p := range ps {
		if hr, ok := cidrset.HostRange(p); ok {
			b.AddRange(hr)
		}
	}
	set, _ := b.IPSet()
	size := new(big.Int)
	for _, rg := range set.Ranges() {
		size.Add(size, rangeLen(rg))
	}
	var used int64
	for a := range r.addrs {
		if set.Contains(a) {
			used++
		}
	}
	exclFree := new(big.Int)
	for _, x := range r.excluded {
		var eb netipx.IPSetBuilder
		eb.AddSet(set)
		var xb netipx.IPSetBuilder
		xb.AddRange(x)
		xs, _ := xb.IPSet()
		eb.Intersect(xs)
		es, _ := eb.IPSet()
		for _, rg := range es.Ranges() {
			exclFree.Add(exclFree, rangeLen(rg))
		}
		for a := range r.addrs {
			if es.Contains(a) {
				exclFree.Sub(exclFree, big.NewInt(1))
			}
		}
	}
	free := new(big.Int).Sub(size, big.NewInt(used))
	free.Sub(free, exclFree)
	return allocator.Usage{Size: countOf(size), Used: cidrset.CountOf(uint64(used)), Free: countOf(free)}
}

func rangeLen(rg netipx.IPRange) *big.Int {
	f, t := rg.From().As16(), rg.To().As16()
	n := new(big.Int).Sub(new(big.Int).SetBytes(t[:]), new(big.Int).SetBytes(f[:]))
	return n.Add(n, big.NewInt(1))
}

func countOf(n *big.Int) cidrset.Count {
	var b [16]byte
	n.FillBytes(b[:])
	return cidrset.Count{Hi: binary.BigEndian.Uint64(b[:8]), Lo: binary.BigEndian.Uint64(b[8:])}
}

// historyCheck matches the API's results against the store's history.
func (h *Harness) historyCheck() {
	h.rec.mu.Lock()
	defer h.rec.mu.Unlock()
	h.mu.Lock()
	allocs := slices.Clone(h.allocs)
	h.mu.Unlock()
	byAddr := map[netip.Addr][]apiAlloc{}
	for _, x := range allocs {
		info, ok := h.rec.puts[putKey{x.addr, x.rev}]
		if !ok {
			h.violate("AllocationIsAStoreRecord", "%s returned %s at rev %d, no such put in the store", x.op, x.addr, x.rev)
			continue
		}
		if info.owner != x.owner {
			h.violate("AllocationIsAStoreRecord", "%s returned %s for %s, store put it for %s", x.op, x.addr, x.owner, info.owner)
		}
		if h.cfg.StrictBands && x.dynamic && x.exact && info.lowerBandWithRoom {
			h.violate("DynamicUpperBandFirst", "%s rev %d: %s", x.op, x.rev, info.detail)
		}
		byAddr[x.addr] = append(byAddr[x.addr], x)
	}
	for a, xs := range byAddr {
		slices.SortFunc(xs, func(p, q apiAlloc) int { return int(p.rev - q.rev) })
		dels := h.rec.deletes[a]
		for k := 1; k < len(xs); k++ {
			if xs[k].rev == xs[k-1].rev {
				h.violate("NoDoubleAllocation", "%s returned twice at rev %d", a, xs[k].rev)
				continue
			}
			if !slices.ContainsFunc(dels, func(d int64) bool { return d > xs[k-1].rev && d < xs[k].rev }) {
				h.violate("NoDoubleAllocation", "%s returned at rev %d (%s) and %d (%s) with no release between", a, xs[k-1].rev, xs[k-1].owner.Name, xs[k].rev, xs[k].owner.Name)
			}
		}
	}
}
