// Package allocator hands out IP addresses from a set of CIDRs kept in a
// store: static (a chosen address) and dynamic (the next free one, in the
// KEP-3070 bands), for IPv4, IPv6 of any prefix length, and dual-stack.
//
// An address is held by at most one owner across all CIDRs and across every
// allocator sharing the store: uniqueness is the store's create-if-absent,
// and every creation is fenced on the revision of the CIDR it came from, so a
// CIDR marked Terminating never receives another address; a creation inside
// a Terminating CIDR (from a live one over it) also touches it, so that a
// removal of it decided before the address existed fails. The allocator
// keeps only an index of the store (the used addresses, per-prefix
// counters, the CIDRs), rebuilt from a snapshot on start and kept current by
// the store's watch. Dynamic allocation never scans: a prefix of up to 2^24
// addresses keeps a bitmap with summary levels, where finding a free
// address takes a few word reads at any fill; larger ones (IPv6) use a
// B+tree of used runs, O(log n) in the number of runs, and, for addresses
// with no used neighbour (those the default strategy spreads at random),
// an ordered hash table per prefix: a line or two read.
//
// Over a store.Locked store (store/memory) an allocation is one critical
// section under the store's own lock; over others (bbolt, etcd) the chosen
// addresses are marked in flight while the store is written, and a lost
// race is retried. Another call of the same allocator steps over an
// address in flight; when that leaves it nothing to answer but ErrFull,
// or ErrAllocated for that very address, it waits for the create's
// outcome first, as the create may fail.
//
// An allocator serves from the CIDRs its index holds. A CIDR call returns
// once its own index shows the write; another allocator sharing the store
// serves the CIDR once its watch has applied it (WaitRevision with the
// CIDR's Revision waits for that), and until then may answer ErrMismatch
// or ErrFull for it.
//
// Any other error of the store ends the call and is returned as is. So is
// one matching store.ErrOutcomeUnknown (etcd: the create's answer was lost):
// the address may be the owner's now or later, and trying another could
// leave the owner two. The caller reads (AddressesOf) before it allocates
// again, or allocates with EnsureNext or EnsureDualStack, which read
// first; either way a create still in flight may land after the read, and
// a record of a create its caller was never told of is repair's, as a
// leak.
package allocator

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go4.org/netipx"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/finalizer"
	"github.com/netipam/netipam/internal/bitmap"
	"github.com/netipam/netipam/internal/runset"
	"github.com/netipam/netipam/internal/sparse"
	"github.com/netipam/netipam/internal/u128"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// Option configures an Allocator.
type Option func(*config)

type config struct {
	strategy Strategy
	policy   Policy
	excluded []netipx.IPRange
	logger   *slog.Logger
	observer Observer
	admit    []Admission
}

// Admission decides whether a CIDR may be created (old is nil) or updated
// to c. It runs before the store is written; a non-nil error refuses the
// change and is returned to the caller as is.
type Admission func(ctx context.Context, old *cidrset.CIDR, c cidrset.CIDR) error

// WithAdmission adds admission checks, run in order on every CIDR create
// and update. A nil check is left out. The checks are those given when it
// is called: changing the caller's slice after changes no Option.
func WithAdmission(checks ...Admission) Option {
	checks = slices.DeleteFunc(slices.Clone(checks), func(check Admission) bool { return check == nil })
	return func(c *config) { c.admit = append(c.admit, checks...) }
}

// WithStrategy sets the dynamic strategy (default RandomStart(nil), also
// for nil).
func WithStrategy(s Strategy) Option { return func(c *config) { c.strategy = s } }

// WithPolicy sets how to choose among several CIDRs (default OldestFirst(),
// also for nil or a nil PolicyFunc).
func WithPolicy(p Policy) Option { return func(c *config) { c.policy = p } }

// WithExcluded keeps the given ranges out of every allocation, static or
// dynamic (for example addresses used outside the allocator's control).
// New refuses an invalid range, and one of IPv4-mapped addresses
// (ErrInvalid): those are always excluded, and such a range is more likely
// meant as the IPv4 range it spells. The ranges are those given when it is
// called: changing the caller's slice after changes no Option.
func WithExcluded(ranges ...netipx.IPRange) Option {
	ranges = slices.Clone(ranges)
	return func(c *config) { c.excluded = append(c.excluded, ranges...) }
}

// WithLogger sets a logger for CIDR lifecycle events. Quiet by default.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithObserver receives allocation outcomes, for metrics.
func WithObserver(o Observer) Option { return func(c *config) { c.observer = o } }

// Allocator allocates addresses from the CIDRs of a store. It is safe for
// concurrent use. Create it with New and Close it when done. The zero value
// is a closed Allocator with no CIDRs.
type Allocator struct {
	st     store.Store
	cfg    config
	fin    finalizer.Reconciler
	cancel context.CancelFunc
	kick   chan struct{} // wakes the background reconciler to read recheck
	done   chan struct{}
	// isOpen is set by New and cleared by Close, and closing closed with it:
	// calls made after Close fail, and waits for the index, which stops
	// following the store then, end. An Allocator New did not make is
	// closed.
	isOpen  atomic.Bool
	closing chan struct{}

	// reconcileMu orders the removals of Terminating CIDRs this allocator
	// makes (reconcile): one that finds its CIDR already gone knows then
	// that the index has forgotten it, if this allocator removed it.
	reconcileMu sync.Mutex

	// mu guards what follows. Over a store.Locked store it is the store's
	// own lock, under which the store applies every write to the index:
	// the watcher then takes no lock, and an allocation chooses and
	// creates in one critical section.
	mu         *sync.Mutex
	locked     store.Locked     // st, when it shares its lock; else nil
	prefetcher store.Prefetcher // locked, when it can prefetch; else nil
	pairs      store.PairLocked // locked, when it creates pairs; else nil
	// ownStart is cfg.strategy when it is the built-in default, whose
	// starts are drawn ahead (lookahead); else nil.
	ownStart *ownedStart
	// self is the watcher New registered with st. Over a locked store, the
	// single-address paths apply their own writes to the index and have
	// the store skip it.
	self store.Watcher
	// dyingCount mirrors dying for Release, which reads it without mu.
	dyingCount atomic.Int32
	// full says, per family, that every live pool is known full (see
	// pool.knownFull), so that AllocateNext on a full range fails without
	// taking mu. Set under mu whenever live or a pool's count changes.
	full [2]atomic.Bool
	// open marks, per family, the pools of live that are not known full,
	// by their place in live: full is set from it, and a walk over live
	// skips full pools a word at a time.
	open [2]bitList
	// mostFree holds MostFree's choice per family, when that is the
	// policy; nil otherwise.
	mostFree [2]*freeTree
	// owners checks the owners of allocateOneLocked, remembering the
	// scope of the last that passed; owner is the last it passed, kept
	// here for the store to read, not copied to it.
	owners ipaddress.ParentRefChecker
	owner  ipaddress.ValidParentRef
	// scratch for allocations over a locked store, used under mu.
	recBuf   [2]ipaddress.IPAddress
	fenceBuf [2]store.Fence

	rev      int64         // last revision applied
	revWait  chan struct{} // closed when rev advances, if someone waits
	waiters  int
	index    *cidrset.Index
	sparse   [2]sparse.Index // used addresses in no dense pool, per family (used.go)
	excluded [2]runset.Set
	// pending holds the addresses chosen whose creation is in flight: a
	// slice, since there are at most as many as concurrent callers.
	pending []netip.Addr
	// inFlightWait is closed when an address leaves pending, if a call
	// waits for that (inFlightWaiters, awaitInFlight).
	inFlightWait    chan struct{}
	inFlightWaiters int
	pools           map[netip.Prefix]*pool
	// Derived from index and pools on every CIDR change, so that the
	// allocation path does not walk the CIDRs:
	poolList [2][]*pool // every pool, per family, by first address
	// reach[f][i] is the greatest last address of poolList[f][:i+1], so
	// that the pools containing an address are found by a binary search
	// and a short walk back (poolsAt).
	reach [2][]u128.U128
	// recheck names the Terminating CIDRs the background reconciler is
	// to look at again (recheckLocked).
	recheck map[string]struct{}
	// forgotten holds, per CIDR this allocator removed and dropped from
	// the index ahead of the watch (forgetRemoved), the revision of the
	// copy it removed: a put of that name up to it, still on its way
	// through the watch, is stale. Cleared by the name's next deletion or
	// newer put, and by Reset.
	forgotten map[string]int64
	live      [2][]liveSource // pools live CIDRs serve, per family, deduplicated, oldest first (compareLive)
	cands     []Candidate     // scratch for Policy, reused under mu
	holding   []*pool         // scratch for poolsHolding, reused under mu
	// lastAlone is, per family, the pool poolsHolding found last when it
	// was alone, or nil; reset whenever the family's pools change.
	lastAlone [2][1]*pool
	// ahead holds, per family, the default strategy's next starts, drawn
	// in advance (lookahead.go): apart, so that dual-stack allocations,
	// which alternate, do not drop each other's.
	ahead [2]lookahead
}

// liveSource is a pool that a live CIDR serves; allocations from it are
// fenced on that CIDR.
type liveSource struct {
	cidr    string
	rev     int64
	created time.Time
	pool    *pool
}

// pool is the allocation state of one prefix; CIDRs with the same prefix
// share it.
type pool struct {
	prefix      netip.Prefix
	fam         int
	first, last u128.U128 // host range
	lowerLast   u128.U128 // last of the lower band, when hasLower
	hasLower    bool
	upperFirst  u128.U128 // first of the upper band: first, or lowerLast+1
	size        u128.U128 // addresses offered
	used        u128.U128 // allocated within [first, last]
	excluded    u128.U128 // excluded within [first, last]
	// excludedUsed is how many of the excluded are allocated all the same
	// (by another allocator, or repair), kept as addresses come and go so
	// that MostFree's free count needs no scan.
	excludedUsed u128.U128
	dying        []string // Terminating CIDRs with this prefix
	// liveAt is the pool's place in live, or -1. It finds the pool's mark
	// in open and its leaf in mostFree, and the place of a candidate a
	// Policy returns, whatever order it put them in.
	liveAt int
	// bits holds the used addresses of [first, last], offset by first,
	// when the pool is dense (used.go); nil otherwise.
	bits *bitmap.Bitmap
	// alone: no other pool shares an address with this one, so an
	// address in it is in no other (reindexPoolsLocked; false when
	// unsure).
	alone bool
}

func (p *pool) contains(x u128.U128) bool {
	return !p.size.IsZero() && !x.Less(p.first) && !p.last.Less(x)
}

func famIndex(a netip.Addr) int {
	if a.Is4() {
		return 0
	}
	return 1
}

func famOf(f ipaddress.Family) (int, bool) {
	switch f {
	case ipaddress.IPv4:
		return 0, true
	case ipaddress.IPv6:
		return 1, true
	}
	return 0, false
}

// New returns an allocator over st, in sync with it. It watches st until
// Close. Before it returns, it decides the Terminating CIDRs st holds, and
// removes those no address holds any more (over a writable store). A nil
// st is ErrInvalid; a nil Option is ignored.
func New(ctx context.Context, st store.Store, opts ...Option) (*Allocator, error) {
	if st == nil {
		return nil, &ipaddress.FieldError{Field: "store", Required: true}
	}
	a := &Allocator{
		st:      st,
		kick:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		closing: make(chan struct{}),
		index:   cidrset.NewIndex(nil),
		pools:   map[netip.Prefix]*pool{},
	}
	a.isOpen.Store(true)
	for _, o := range opts {
		if o != nil {
			o(&a.cfg)
		}
	}
	if ls, ok := st.(store.Locked); ok {
		a.locked, a.mu = ls, ls.Mutex()
		a.prefetcher, _ = ls.(store.Prefetcher)
		a.pairs, _ = ls.(store.PairLocked)
	} else {
		a.mu = new(sync.Mutex)
	}
	if a.cfg.strategy == nil {
		a.cfg.strategy = RandomStart(nil)
	}
	if ms, ok := a.cfg.strategy.(mixedStart); ok {
		a.ownStart = ms.own() // Start is called under a.mu only
		a.cfg.strategy = a.ownStart
	}
	if f, ok := a.cfg.policy.(PolicyFunc); a.cfg.policy == nil || ok && f == nil {
		a.cfg.policy = OldestFirst()
	}
	if _, ok := a.cfg.policy.(mostFree); ok {
		a.mostFree = [2]*freeTree{{}, {}}
	}
	if a.cfg.logger == nil {
		a.cfg.logger = slog.New(slog.DiscardHandler)
	}
	for _, r := range a.cfg.excluded {
		if !r.IsValid() {
			return nil, &ipaddress.FieldError{Field: "excluded", Value: r.String(), Detail: "must be a valid address range"}
		}
		// A mapped range is most likely meant as IPv4, which it would not
		// exclude; the mapped block itself is always excluded (below).
		if ipaddress.ValidateAddr(r.From()) != nil || ipaddress.ValidateAddr(r.To()) != nil {
			return nil, &ipaddress.FieldError{Field: "excluded", Value: r.String(), Detail: "must not be a range of IPv4-mapped addresses"}
		}
		a.excluded[famIndex(r.From())].AddRange(u128.FromAddr(r.From()), u128.FromAddr(r.To()))
	}
	// No record may hold an IPv4-mapped address (SPEC §1), yet a valid IPv6
	// prefix such as ::fffe:0:0/95 or ::/64 contains all of them: they are
	// never offered, nor counted free.
	a.excluded[1].AddRange(mappedBlock())
	a.fin = finalizer.Reconciler{Store: st, View: view{a}}
	// The watch outlives New, so its context is not ctx; but a store that
	// cannot answer must not hold New past ctx.
	wctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	stop := context.AfterFunc(ctx, cancel)
	a.self = watcher{a}
	err := st.Watch(wctx, a.self)
	if !stop() && err == nil {
		err = ctx.Err() // ctx ended: the watch was canceled
	}
	if err != nil {
		cancel()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	// The Terminating CIDRs of the snapshot are decided now, not only in
	// the background: one that nothing blocks any more (its removal
	// decided by a process that stopped before making it) would outlive a
	// short-lived process (ipamctl) that started the check and exited. A
	// check that fails is left to the background reconciler.
	a.recheckNow(ctx)
	go a.reconcileLoop(wctx)
	return a, nil
}

// Close stops watching the store; it does not close the store. Later
// calls that take a context fail with ErrClosed, and so do calls in flight
// that wait for the index to show their write; CIDRs, GetCIDR, Usage and
// FamilyUsage keep answering from the index as it was. Close may be called
// more than once; of a nil *Allocator, or one New did not make, it does
// nothing.
func (a *Allocator) Close() error {
	if a == nil || a.done == nil {
		return nil
	}
	if a.isOpen.Swap(false) {
		close(a.closing)
	}
	a.cancel()
	<-a.done
	return nil
}

// checkOpen returns ErrClosed once Close was called.
func (a *Allocator) checkOpen() error {
	if !a.isOpen.Load() {
		return ErrClosed
	}
	return nil
}

// Store returns the store the allocator works on.
func (a *Allocator) Store() store.Store { return a.st }

// AllocateNext allocates a free address of family f to owner, from a live
// CIDR chosen by the Policy, in its upper band first (KEP-3070). On a
// full family it fails with ErrFull whatever the owner; a family whose
// CIDRs are all Terminating is full, one that no CIDR serves is
// ErrMismatch.
func (a *Allocator) AllocateNext(ctx context.Context, f ipaddress.Family, owner ipaddress.ParentRef) (rec ipaddress.IPAddress, err error) {
	if err := a.checkOpen(); err != nil {
		return rec, err
	}
	if a.locked != nil {
		if a.cfg.observer == nil {
			if done, _, err := a.allocateOneLocked(ctx, &owner, request{family: f}, &rec); done {
				return rec, err
			}
		} else if done, err := a.allocateOneObserved(ctx, &owner, request{family: f}, &rec); done {
			return rec, err
		}
	}
	var out results
	err = a.allocate(ctx, owner, []request{{family: f}}, false, &out)
	return out[0], err
}

// Allocate allocates addr to owner. addr must be inside a live CIDR; the
// lower band may be used.
func (a *Allocator) Allocate(ctx context.Context, addr netip.Addr, owner ipaddress.ParentRef) (rec ipaddress.IPAddress, err error) {
	if err := a.checkOpen(); err != nil {
		return rec, err
	}
	if err := ipaddress.ValidateAddr(addr); err != nil {
		return rec, err
	}
	if a.locked != nil {
		if a.cfg.observer == nil {
			if done, _, err := a.allocateOneLocked(ctx, &owner, request{addr: addr}, &rec); done {
				return rec, err
			}
		} else if done, err := a.allocateOneObserved(ctx, &owner, request{addr: addr}, &rec); done {
			return rec, err
		}
	}
	var out results
	err = a.allocate(ctx, owner, []request{{addr: addr}}, false, &out)
	return out[0], err
}

// Restore allocates addr to owner as Allocate does, for a caller that
// writes back the record of an address owner already holds (a repair),
// not one serving a request: the observer is not told, as the reference's
// repair writes such records past its allocator and its metrics.
func (a *Allocator) Restore(ctx context.Context, addr netip.Addr, owner ipaddress.ParentRef) (ipaddress.IPAddress, error) {
	if err := a.checkOpen(); err != nil {
		return ipaddress.IPAddress{}, err
	}
	if err := ipaddress.ValidateAddr(addr); err != nil {
		return ipaddress.IPAddress{}, err
	}
	var out results
	_, err := a.allocateOnce(ctx, owner, []request{{addr: addr}}, false, &out)
	return out[0], err
}

// RestoreRecords restores each record of recs, its address to its Parent,
// as Restore does: for a caller writing back many records (a repair pass
// after the store lost them). errs[i] is the outcome for recs[i], the error
// Restore would give; one that fails does not stop the others. Once ctx
// ends, the records not yet restored get its error.
//
// Over a store whose writes are round trips (store/etcd, store/bolt), the
// records whose addresses a live CIDR serves are created up to 64 in one
// write, fenced as Restore's are. The records of a write the store refuses
// (an address taken, a CIDR changed since the allocator read it, more than
// the store takes at once) are restored one by one, as are the records of
// addresses no live CIDR serves, and every record over the memory store.
func (a *Allocator) RestoreRecords(ctx context.Context, recs []ipaddress.IPAddress) []error {
	var batched func(todo []int, errs []error) []int
	if a.locked == nil {
		batched = func(todo []int, errs []error) []int { return a.createRecords(ctx, recs, todo, errs) }
	}
	return a.writeRecords(ctx, len(recs), batched, func(i int) error {
		_, err := a.Restore(ctx, recs[i].Addr, recs[i].Parent)
		return err
	})
}

// createRecords creates the records of recs at the indexes of todo, in
// writes of at most writeBatch records, setting their outcomes in errs,
// and returns the indexes left for the caller to restore one by one: those
// a write cannot take as they are (an invalid address or owner, an address
// no live CIDR serves or that is in flight, given twice), and those of
// every write the store refused as a whole (ErrExists, ErrFenced,
// ErrInvalid).
func (a *Allocator) createRecords(ctx context.Context, recs []ipaddress.IPAddress, todo []int, errs []error) (left []int) {
	for len(todo) > 0 {
		if err := ctx.Err(); err != nil {
			for _, i := range todo {
				errs[i] = err
			}
			return left
		}
		var choices []choice
		var at []int
		a.mu.Lock()
		for len(todo) > 0 && len(at) < writeBatch {
			i := todo[0]
			todo = todo[1:]
			var c choice
			if ipaddress.ValidateAddr(recs[i].Addr) != nil || recs[i].Parent.Validate() != nil ||
				a.chooseOneLocked(request{addr: recs[i].Addr}, nil, &c) != nil {
				left = append(left, i)
				continue
			}
			// In flight from here: a record given twice is chosen once.
			a.pending = append(a.pending, c.addr)
			choices = append(choices, c)
			at = append(at, i)
		}
		var fences []store.Fence
		if len(choices) > 0 {
			fences = a.fencesLocked(make([]store.Fence, 0, len(choices)), choices)
		}
		a.mu.Unlock()
		if len(choices) == 0 {
			continue
		}
		batch := make([]ipaddress.IPAddress, len(at))
		for j, i := range at {
			batch[j] = ipaddress.IPAddress{Addr: recs[i].Addr, Parent: recs[i].Parent}
		}
		created, err := a.st.CreateAddresses(ctx, batch, fences...)
		a.settle(choices, created)
		switch {
		case err == nil:
		case errors.Is(err, store.ErrExists), errors.Is(err, store.ErrFenced), errors.Is(err, ipaddress.ErrInvalid):
			left = append(left, at...)
		default:
			for _, i := range at {
				errs[i] = err
			}
		}
	}
	return left
}

// AllocateDualStack allocates one address of each family to owner, both or
// neither, in one atomic store write. A family may be given a static
// address; the zero Addr means "the next free one". A static address of
// the other family is ErrInvalid (a *ipaddress.FieldError for "address").
// Either family failing fails the call, with that family's error as
// Allocate or AllocateNext gives it, and nothing is allocated.
func (a *Allocator) AllocateDualStack(ctx context.Context, owner ipaddress.ParentRef, v4, v6 netip.Addr) (ipv4, ipv6 ipaddress.IPAddress, err error) {
	if err := a.checkOpen(); err != nil {
		return ipv4, ipv6, err
	}
	reqs := []request{{family: ipaddress.IPv4, addr: v4}, {family: ipaddress.IPv6, addr: v6}}
	if err := validateStatic(reqs); err != nil {
		return ipv4, ipv6, err
	}
	if a.pairs != nil {
		var start time.Time
		if a.cfg.observer != nil {
			start = time.Now()
		}
		if done, from, err := a.allocatePairLocked(ctx, &owner, v4, v6, &ipv4, &ipv6); done {
			if a.cfg.observer != nil {
				a.report(reqs, from, err, time.Since(start))
			}
			return ipv4, ipv6, err
		}
	}
	var out results
	err = a.allocate(ctx, owner, reqs, false, &out)
	return out[0], out[1], err
}

// validateStatic refuses a static address of reqs that Allocate would
// refuse, or that is not of its request's family (a *ipaddress.FieldError
// for "address"): AllocateDualStack's input checks, and its dry run's.
func validateStatic(reqs []request) error {
	for _, r := range reqs {
		if !r.addr.IsValid() {
			continue // the next free one
		}
		if err := ipaddress.ValidateAddr(r.addr); err != nil {
			return err
		}
		if ipaddress.FamilyOf(r.addr) != r.family {
			return &ipaddress.FieldError{Field: "address", Value: r.addr.String(), Detail: "must be of family " + r.family.String()}
		}
	}
	return nil
}

// allocatePairLocked serves AllocateDualStack as allocateOneLocked serves
// AllocateNext, over a store.PairLocked store: both choices and the pair's
// create in one critical section, the index updated here, no request or
// result slices. done false hands over to the general path, as there (a
// static address taken, an invalid owner, a Terminating CIDR to touch);
// *out4 and *out6 are set only when done without error. from is where
// the requests were served from, or which failed, for the observer.
func (a *Allocator) allocatePairLocked(ctx context.Context, owner *ipaddress.ParentRef, v4, v6 netip.Addr, out4, out6 *ipaddress.IPAddress) (done bool, from sources, err error) {
	from.failed = -1
	// The order of allocateOnce, whose doc says why: the first request
	// known full decides before the owner is validated (with an observer,
	// which is told the CIDR to blame, choosing decides).
	if err := ctx.Err(); err != nil {
		return true, from, err
	}
	if !v4.IsValid() && a.cfg.observer == nil && a.full[0].Load() {
		return true, from, ErrFull
	}
	a.mu.Lock()
	var c4, c6 choice
	err = a.chooseOneLocked(request{family: ipaddress.IPv4, addr: v4}, nil, &c4)
	if err != nil {
		from.failed = 0
	} else if err = a.chooseOneLocked(request{family: ipaddress.IPv6, addr: v6}, nil, &c6); err != nil {
		from.failed = 1
	}
	from.cidr = [2]string{c4.fence.CIDR, c6.fence.CIDR}
	var ok bool
	if a.owner, ok = a.owners.Check(*owner); !ok || err == errInFlight {
		a.mu.Unlock()
		return false, from, nil
	}
	if err != nil {
		a.mu.Unlock()
		return true, from, err
	}
	if len(a.index.Terminating()) > 0 && (len(a.touchDyingLocked(a.fenceBuf[:0], c4.addr)) > 0 || len(a.touchDyingLocked(a.fenceBuf[:0], c6.addr)) > 0) {
		a.mu.Unlock()
		return false, from, nil
	}
	rev, created, err := a.pairs.CreatePairLocked(c4.addr, c6.addr, &a.owner, c4.fence, c6.fence, a.self)
	if err != nil {
		a.mu.Unlock()
		return false, from, nil
	}
	a.markValueLocked(c4.x, 0, true)
	a.markValueLocked(c6.x, 1, true)
	a.advanceLocked(rev)
	*out4 = ipaddress.IPAddress{Addr: c4.addr, Parent: *owner, Created: created, Revision: rev}
	*out6 = ipaddress.IPAddress{Addr: c6.addr, Parent: *owner, Created: created, Revision: rev}
	a.mu.Unlock()
	return true, from, nil
}

// chooseOneLocked chooses where r is served from, into *c: its static
// address, or the next free one of its family but those in skip.
func (a *Allocator) chooseOneLocked(r request, skip []netip.Addr, c *choice) (err error) {
	if r.addr.IsValid() {
		*c, err = a.chooseStaticLocked(r.addr)
		return err
	}
	return a.chooseNextLocked(r.family, skip, c)
}

// allocateOneObserved is allocateOneLocked for an allocator with an
// observer, which it tells what was done.
func (a *Allocator) allocateOneObserved(ctx context.Context, owner *ipaddress.ParentRef, r request, out *ipaddress.IPAddress) (bool, error) {
	start := time.Now()
	done, from, err := a.allocateOneLocked(ctx, owner, r, out)
	if done {
		failed := -1
		if err != nil {
			failed = 0
		}
		a.report([]request{r}, sources{cidr: [2]string{from}, failed: failed}, err, time.Since(start))
	}
	return done, err
}

// allocateOneLocked serves AllocateNext and Allocate over a store.Locked
// store, the common embedded case: one choice and one record, with
// neither request nor result slices, and the index updated here rather
// than through the watch. Under the store's lock the index is
// exact, so the store refuses the choice only if something is amiss, or a
// static address is taken; done is then false and the general path, which
// retries, maps the refusal and reports, takes over. The record goes to
// *out, the caller's result, when done without error; *out is left as it
// was otherwise. from names the CIDR the request was served from, or
// failed in, for the observer (see AllocationEvent.CIDR).
func (a *Allocator) allocateOneLocked(ctx context.Context, owner *ipaddress.ParentRef, r request, out *ipaddress.IPAddress) (done bool, from string, err error) {
	// The order of allocateOnce, whose doc says why (with an observer,
	// which is told the CIDR to blame, choosing decides a full range).
	if err := ctx.Err(); err != nil {
		return true, "", err
	}
	if a.knownFull(r) && a.cfg.observer == nil {
		return true, "", ErrFull
	}
	// Unlocked by hand on every return below, as Release does: a defer
	// costs 24 of the cycle's ~2,400 instructions.
	a.mu.Lock()
	// The owner is validated after the choice, so that the chosen
	// address's slot in the store loads meanwhile (chooseNextLocked
	// prefetches it). With an invalid owner, whatever choosing found,
	// allocateOnce answers: it puts the errors in their order.
	var c choice
	if r.addr.IsValid() {
		c, err = a.chooseStaticLocked(r.addr)
	} else {
		if a.prefetchesLocked(r.family) {
			// Its slot in the owner table loads while the search runs.
			a.prefetcher.PrefetchOwnerLocked(*owner)
		}
		err = a.chooseNextLocked(r.family, nil, &c)
	}
	var ok bool
	if a.owner, ok = a.owners.Check(*owner); !ok {
		a.mu.Unlock()
		return false, "", nil
	}
	if err != nil {
		a.mu.Unlock()
		return true, c.fence.CIDR, err
	}
	// (touchDyingLocked checks for Terminating CIDRs too; checked here
	// first so that the common case, none, makes no call.)
	if len(a.index.Terminating()) > 0 && len(a.touchDyingLocked(a.fenceBuf[:0], c.addr)) > 0 {
		// Inside a Terminating CIDR: the create must touch it, which
		// takes more than the one fence this path has.
		a.mu.Unlock()
		return false, "", nil
	}
	rev, created, err := a.locked.CreateAddressLocked(c.addr, &a.owner, c.fence, a.self)
	if err != nil {
		a.mu.Unlock()
		return false, "", nil
	}
	// addressChangedLocked, from the value chosen.
	a.markValueLocked(c.x, famIndex(c.addr), true)
	a.advanceLocked(rev)
	// Field by field: a record built aside and then copied whole is read
	// back in 16-byte blocks, each spanning stores of 8 bytes that cannot
	// be forwarded to it, and the processor waits for them to reach the
	// cache.
	out.Addr = c.addr
	out.Parent = *owner
	out.Created = created
	out.Revision = rev
	a.mu.Unlock()
	return true, c.fence.CIDR, nil
}

// prefetchFrom is how many addresses a pool holds from which a search of
// it asks the store to prefetch (store.Prefetcher): about where the memory
// store's tables outgrow the caches, so that below it a search does not
// pay for hints that would not pay back.
const prefetchFrom = 1 << 16

// prefetchesLocked reports whether an allocation of family f will search
// a sparse pool large enough to prefetch for, in a store that can: the
// owner's slot then loads while the search runs. Not a dense one: its
// search is a few words of a bitmap, too short to hide that load behind,
// and the prefetches only added to the cycle (+9 to +11 % at 90 to 99 % of
// a /12, measured). A dense pool prefetches the address it chose instead
// (chooseNextLocked).
func (a *Allocator) prefetchesLocked(f ipaddress.Family) bool {
	fam, ok := famOf(f)
	if !ok || a.prefetcher == nil || len(a.live[fam]) == 0 {
		return false
	}
	pl := a.live[fam][0].pool
	return pl.bits == nil && pl.large()
}

// large reports whether p holds prefetchFrom addresses or more.
func (p *pool) large() bool { return p.used.Hi != 0 || p.used.Lo >= prefetchFrom }

// request is one address of an allocation: addr for static, else family.
type request struct {
	family ipaddress.Family
	addr   netip.Addr
}

// choice is where a request will be served from.
type choice struct {
	addr  netip.Addr
	x     u128.U128 // addr's value (u128.FromAddr), when addr is valid
	fence store.Fence
}

// maxAttempts bounds the retries of one allocation after the store refused
// it because another allocator got there first.
const maxAttempts = 64

// results receives the records of an allocation, one per request; a value
// rather than a slice so that the hot path does not allocate. They are
// zero when the allocation fails.
type results [2]ipaddress.IPAddress

// allocate serves reqs atomically into out and reports the outcome to the
// observer. With dryRun it only chooses.
func (a *Allocator) allocate(ctx context.Context, owner ipaddress.ParentRef, reqs []request, dryRun bool, out *results) error {
	if a.cfg.observer == nil || dryRun {
		_, err := a.allocateOnce(ctx, owner, reqs, dryRun, out)
		return err
	}
	start := time.Now()
	from, err := a.allocateOnce(ctx, owner, reqs, dryRun, out)
	a.report(reqs, from, err, time.Since(start))
	return err
}

// report tells the observer the outcome of an allocation of reqs, which
// took took: each request's, served from where from says, or failed.
func (a *Allocator) report(reqs []request, from sources, err error, took time.Duration) {
	for i, r := range reqs {
		if err != nil && from.failed >= 0 && i != from.failed {
			// Chosen but not created, or never tried, because the other
			// request failed: no allocation, and no error, of its CIDR.
			continue
		}
		ev := AllocationEvent{Scope: ScopeDynamic, Family: r.family, Err: err, Duration: took, CIDR: from.cidr[i]}
		if r.addr.IsValid() {
			ev.Scope, ev.Family = ScopeStatic, ipaddress.FamilyOf(r.addr)
		}
		a.cfg.observer.Allocated(ev)
	}
}

// sources names, per request, the CIDR it was (or would have been) served
// from; requests are one address per family, so two at most. failed is the
// request that failed the allocation, or -1 when none did or the failure
// was not one request's (the store's, the context's, the owner's).
type sources struct {
	cidr   [2]string
	failed int
}

func sourcesOf(choices []choice) sources {
	s := sources{failed: -1}
	for i, c := range choices {
		s.cidr[i] = c.fence.CIDR
	}
	return s
}

// failedAt is s with request i as the one that failed.
func (s sources) failedAt(i int) sources {
	s.failed = i
	return s
}

// allocateOnce serves reqs atomically, retrying when another allocator won
// a race for an address; it returns where the last choices came from.
func (a *Allocator) allocateOnce(ctx context.Context, owner ipaddress.ParentRef, reqs []request, dryRun bool, out *results) (sources, error) {
	// Whatever the path, store or observer, the first of these decides: an
	// ended context; a range that cannot serve a request (ErrFull), as in
	// the reference, which finds no address before it builds an IPAddress
	// to validate; an invalid owner; then whatever choosing and creating
	// find. A context ending later is checked per attempt below.
	if err := ctx.Err(); err != nil {
		return sourcesOf(nil), err
	}
	if a.cfg.observer == nil && a.knownFull(reqs...) {
		// Cheap, and what choosing would answer; but an observer is told
		// which CIDR the policy blamed, which takes choosing.
		return sourcesOf(nil), ErrFull
	}
	if err := owner.Validate(); err != nil {
		if from, full := a.fullFor(reqs); full {
			return from, ErrFull
		}
		return sourcesOf(nil), err
	}
	var skip []netip.Addr // taken per the store, though the index did not know yet
	for attempt := 0; ; attempt++ {
		var buf [2]choice
		var choices []choice
		var err error
		// Before choosing, whatever the store: a call whose context had
		// ended is counted under no CIDR (a dry run answers as the real
		// call would).
		if err := ctx.Err(); err != nil {
			return sourcesOf(nil), err
		}
		switch {
		case dryRun:
			a.mu.Lock()
			choices, err = a.chooseLocked(reqs, skip, buf[:0])
			a.mu.Unlock()
			if err == nil {
				for i, c := range choices {
					out[i] = ipaddress.IPAddress{Addr: c.addr, Parent: owner}
				}
			}
			if err != errInFlight {
				return sourcesOf(choices), err
			}
		case a.locked != nil:
			choices, err = a.chooseAndCreate(owner, reqs, skip, buf[:0], out)
		default:
			choices, err = a.chooseAndCreateRemote(ctx, owner, reqs, skip, buf[:0], out)
		}
		if err == nil {
			return sourcesOf(choices), nil
		}
		if err == errInFlight {
			// The last request's answer waits for other calls' creates.
			n := len(choices)
			r := reqs[n-1]
			if attempt >= maxAttempts {
				// Addresses freed and taken again in flight, over and
				// over: each time, the range was full but for them.
				settled := ErrFull
				if r.addr.IsValid() {
					settled = ErrAllocated
				}
				return sourcesOf(choices).failedAt(n - 1), settled
			}
			if err := a.awaitInFlight(ctx, r); err != nil {
				return sourcesOf(nil), err
			}
			continue
		}
		if n := len(choices); n == 0 || !choices[n-1].addr.IsValid() {
			// The last request found nothing to choose: nothing to retry.
			return sourcesOf(choices).failedAt(n - 1), err
		}
		// Only a refusal that names what was in the way is retried: any
		// other error, store.ErrOutcomeUnknown among them, may have left
		// the choices created.
		if taken, ok := takenAddr(err); ok {
			if i := slices.IndexFunc(reqs, func(r request) bool { return r.addr == taken }); i >= 0 {
				return sourcesOf(choices).failedAt(i), ErrAllocated
			}
			skip = append(skip, taken)
		} else if fence, ok := failedFence(err); ok {
			if rerr := a.refreshCIDR(ctx, fence, err); rerr != nil {
				return sourcesOf(choices), rerr
			}
		} else {
			return sourcesOf(choices), err
		}
		if attempt >= maxAttempts {
			return sourcesOf(choices), err
		}
	}
}

// chooseAndCreate serves reqs over a store.Locked store: under its lock the
// index is exact, so what is chosen is free and its fence holds, and the
// store applies the create to the index before the lock is released. It
// returns the choices; on a failed choice the last has no address (see
// chooseLocked).
func (a *Allocator) chooseAndCreate(owner ipaddress.ParentRef, reqs []request, skip []netip.Addr, buf []choice, out *results) ([]choice, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	choices, err := a.chooseLocked(reqs, skip, buf)
	if err != nil {
		return choices, err
	}
	recs := a.recBuf[:len(choices)]
	fences := a.fencesLocked(a.fenceBuf[:0], choices)
	for i, c := range choices {
		recs[i] = ipaddress.IPAddress{Addr: c.addr, Parent: owner}
	}
	created, err := a.locked.CreateAddressesLocked(recs, fences)
	if err == nil {
		copy(out[:], created)
	}
	clear(a.recBuf[:])
	return choices, err
}

// chooseAndCreateRemote serves reqs over a store whose watch may lag its
// writes: the choices are marked pending while the create is in flight, so
// that concurrent callers of this allocator choose other addresses, and
// what was created is recorded at once rather than when the watch shows it.
func (a *Allocator) chooseAndCreateRemote(ctx context.Context, owner ipaddress.ParentRef, reqs []request, skip []netip.Addr, buf []choice, out *results) ([]choice, error) {
	a.mu.Lock()
	choices, err := a.chooseLocked(reqs, skip, buf)
	if err != nil {
		a.mu.Unlock()
		return choices, err
	}
	for _, c := range choices {
		a.pending = append(a.pending, c.addr)
	}
	fences := a.fencesLocked(make([]store.Fence, 0, len(choices)), choices)
	a.mu.Unlock()
	recs := make([]ipaddress.IPAddress, len(choices))
	for i, c := range choices {
		recs[i] = ipaddress.IPAddress{Addr: c.addr, Parent: owner}
	}
	created, err := a.st.CreateAddresses(ctx, recs, fences...)
	a.settle(choices, created)
	if err == nil {
		copy(out[:], created)
	}
	return choices, err
}

// fencesLocked appends to dst the fences of a create of choices: each
// one's CIDR, once, and every Terminating CIDR holding a chosen address,
// touched (see touchDyingLocked).
func (a *Allocator) fencesLocked(dst []store.Fence, choices []choice) []store.Fence {
	for _, c := range choices {
		if !slices.Contains(dst, c.fence) {
			dst = append(dst, c.fence)
		}
	}
	for _, c := range choices {
		dst = a.touchDyingLocked(dst, c.addr)
	}
	return dst
}

// touchDyingLocked appends to dst a touching fence (store.Fence.Touch) of
// every Terminating CIDR that holds addr, unless dst has it. The address
// comes from a live CIDR; one that also lies in a Terminating CIDR may be
// in a part of it no live CIDR covered when its removal was decided, which
// the decision then did not fence on: the touch gives that CIDR a new
// revision, so the removal fails its fence and is decided again, seeing
// the address. Without it, were the live CIDR marked too before the
// removal, the address would be left covered by Terminating CIDRs only.
func (a *Allocator) touchDyingLocked(dst []store.Fence, addr netip.Addr) []store.Fence {
	if len(a.index.Terminating()) == 0 { // mostly: no lookup
		return dst
	}
	a.index.Containing(addr, func(c *cidrset.CIDR, _ netip.Prefix) bool {
		if f := (store.Fence{CIDR: c.Name, Revision: c.Revision, Touch: true}); c.Terminating && !slices.Contains(dst, f) {
			dst = append(dst, f)
		}
		return true
	})
	return dst
}

// takenAddr returns the address a create found held. It is a function of
// its own so that errors.As's target is only allocated on that path.
func takenAddr(err error) (netip.Addr, bool) {
	var exists *store.AddressExistsError
	if errors.As(err, &exists) {
		return exists.Addr, true
	}
	return netip.Addr{}, false
}

// failedFence returns the fence that failed.
func failedFence(err error) (store.Fence, bool) {
	var fe *store.FencedError
	if errors.As(err, &fe) {
		return fe.Fence, true
	}
	return store.Fence{}, false
}

// chooseLocked picks an address for every request, appended to out. On
// error the last choice has no address, only the CIDR it would have come
// from, if any (for the observer).
func (a *Allocator) chooseLocked(reqs []request, skip []netip.Addr, out []choice) ([]choice, error) {
	for _, r := range reqs {
		var c choice
		err := a.chooseOneLocked(r, skip, &c)
		if err == ErrFull && !r.addr.IsValid() && a.pendingOfLocked(r) {
			err = errInFlight
		}
		out = append(out, c)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

func (a *Allocator) unpendLocked(cs []choice) {
	for _, c := range cs {
		if i := slices.Index(a.pending, c.addr); i >= 0 {
			a.pending[i] = a.pending[len(a.pending)-1]
			a.pending = a.pending[:len(a.pending)-1]
		}
	}
	if a.inFlightWaiters > 0 && a.inFlightWait != nil {
		close(a.inFlightWait)
		a.inFlightWait = nil
	}
}

// errInFlight is chooseLocked's answer when a request found no address, or
// not its static one, only because of addresses chosen by other calls
// whose creates are in flight. Those are not held yet, and a create may
// fail: the answer (ErrFull, ErrAllocated) waits for their outcome
// (awaitInFlight). It never reaches a caller.
var errInFlight = errors.New("allocator: addresses in flight")

// pendingOfLocked reports whether an address in flight bears on r: r's
// own static address, or, for a dynamic r, any of its family.
func (a *Allocator) pendingOfLocked(r request) bool {
	for _, p := range a.pending {
		if r.bearsOn(p) {
			return true
		}
	}
	return false
}

// bearsOn reports whether the outcome of a create of addr may change the
// answer to r (see pendingOfLocked).
func (r request) bearsOn(addr netip.Addr) bool {
	if r.addr.IsValid() {
		return addr == r.addr
	}
	fam, _ := famOf(r.family)
	return famIndex(addr) == fam
}

// awaitInFlight waits until none of the addresses in flight that bear on r
// now is in flight any more, so that choosing again sees their outcome.
// Each create in flight ends with its caller's context or the store's
// answer, so the wait is bounded by those.
func (a *Allocator) awaitInFlight(ctx context.Context, r request) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var waitFor []netip.Addr // a few: one per concurrent call at most
	for _, p := range a.pending {
		if r.bearsOn(p) {
			waitFor = append(waitFor, p)
		}
	}
	for slices.ContainsFunc(waitFor, func(p netip.Addr) bool { return slices.Contains(a.pending, p) }) {
		if err := a.waitLocked(ctx, &a.inFlightWait, &a.inFlightWaiters); err != nil {
			return err
		}
	}
	return nil
}

// settle clears the pending marks and, for stores whose watch lags the
// write, records the created addresses at once.
func (a *Allocator) settle(cs []choice, created []ipaddress.IPAddress) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.unpendLocked(cs)
	for _, r := range created {
		if r.Revision > a.rev {
			a.markUsedLocked(r.Addr)
		}
	}
}

func (a *Allocator) chooseStaticLocked(addr netip.Addr) (choice, error) {
	var live *cidrset.CIDR
	var terminating []string // sorted and deduplicated below
	a.index.Containing(addr, func(c *cidrset.CIDR, _ netip.Prefix) bool {
		if c.Terminating {
			terminating = append(terminating, c.Name)
			return true
		}
		live = c
		return false
	})
	if live == nil {
		valid := a.livePrefixesLocked(famIndex(addr))
		if len(valid) == 0 && len(terminating) == 0 {
			return choice{}, ErrMismatch
		}
		slices.Sort(terminating)
		return choice{}, &RangeError{Addr: addr, Valid: valid, Terminating: slices.Compact(terminating)}
	}
	// Refused or not, the request is live's: the observer counts it there.
	fence := store.Fence{CIDR: live.Name, Revision: live.Revision}
	x := u128.FromAddr(addr)
	if a.excluded[famIndex(addr)].Contains(x) {
		return choice{fence: fence}, ErrExcluded
	}
	if slices.Contains(a.pending, addr) {
		return choice{fence: fence}, errInFlight
	}
	return choice{addr: addr, x: x, fence: fence}, nil
}

func (a *Allocator) livePrefixesLocked(fam int) []netip.Prefix {
	var out []netip.Prefix
	for _, c := range a.index.All() {
		if c.Terminating {
			continue
		}
		for _, p := range c.Prefixes {
			if famIndex(p.Addr()) == fam && !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// familyError is the refusal of a request for the next address of family
// f, neither IPv4 nor IPv6.
func familyError(f ipaddress.Family) error {
	return &ipaddress.FieldError{Field: "family", Value: f.String(), Detail: "must be IPv4 or IPv6"}
}

// chooseNextLocked chooses where a dynamic request of family f is served
// from, into *c: on ErrFull, only the fence of the CIDR to blame, if any.
// (An out parameter: the hot path then copies no choice up its calls.)
func (a *Allocator) chooseNextLocked(f ipaddress.Family, skip []netip.Addr, c *choice) error {
	fam, ok := famOf(f)
	if !ok {
		return familyError(f)
	}
	live := a.live[fam]
	if len(live) == 0 {
		if len(a.poolList[fam]) > 0 {
			// The family is served, but every CIDR of it is Terminating:
			// no free address in any live CIDR, as the reference says.
			return ErrFull
		}
		return ErrMismatch
	}
	// The built-in policies need no candidates: live is in OldestFirst's
	// order already (syncPoolsLocked), and a full pool is known full from
	// its counters.
	if _, ok := a.cfg.policy.(oldestFirst); ok { // the default, asked first
		// Mostly the oldest pool is open, with nothing to step over, and
		// dense or alone: its bitmap, or the sparse set, answers without
		// the walk. (Open, it is not known full: fullnessChangedLocked
		// keeps the mark of a pool with nothing excluded.)
		if pl := live[0].pool; a.open[fam].has(0) && pl.excluded.IsZero() && len(a.pending) == 0 && len(skip) == 0 {
			if pl.bits != nil {
				if x, ok := a.nextInDenseLocked(pl); ok {
					live[0].choose(x, c)
					if a.prefetcher != nil && pl.large() && !a.denseLooksAheadLocked(pl) {
						// The store will look the address up: its slot
						// loads while the owner is validated
						// (allocateOneLocked). -9 to -10 % at 50 and 90 %
						// of a /12, -3 % at 99 %; -4 to -5 % when the
						// owner was validated before the choice. (Drawn
						// ahead, the slot was loaded then.)
						a.prefetcher.PrefetchAddressLocked(c.addr)
					}
					return nil
				}
			} else if pl.alone {
				if x, ok := a.nextInSparseLocked(pl); ok {
					live[0].choose(x, c)
					return nil
				}
			}
		}
		return a.walkLiveLocked(fam, 0, skip, c)
	}
	switch a.cfg.policy.(type) {
	case randomOrder:
		// Drawn among the open pools only: drawn among all, a full pool's
		// draws would go on to the open one after it, which would be
		// tried first twice as often as the others.
		first := 0
		if n := a.open[fam].count(); n > 0 {
			first = a.open[fam].nth(rand.IntN(n))
		}
		return a.walkLiveLocked(fam, first, skip, c)
	case mostFree:
		best := a.mostFree[fam].best()
		if x, ok := a.nextInPoolLocked(live[best].pool, skip); ok {
			live[best].choose(x, c)
			return nil
		}
		// Its free addresses are excluded or in flight, or all are full:
		// the general path below tries the next ones in order.
	}
	if len(live) == 1 { // no order to ask for
		return a.walkLiveLocked(fam, 0, skip, c)
	}
	cands := a.cands[:0]
	for _, l := range live {
		cands = append(cands, Candidate{CIDR: l.cidr, Prefix: l.pool.prefix, Created: l.created, Used: cidrset.Count(l.pool.used), Size: cidrset.Count(l.pool.size)})
	}
	a.cands = cands
	a.cfg.policy.Order(cands)
	for _, cand := range cands {
		i, ok := a.liveIndexLocked(fam, cand.Prefix)
		if !ok {
			continue // the policy made up a candidate
		}
		if x, ok := a.nextInPoolLocked(live[i].pool, skip); ok {
			live[i].choose(x, c)
			return nil
		}
	}
	// A policy may have dropped a candidate (repeating another, say):
	// "range is full" must mean every live CIDR is.
	if err := a.walkLiveLocked(fam, 0, skip, c); err == nil {
		return nil
	}
	// Every CIDR is full: the policy's first choice is the one to blame.
	if len(cands) > 0 {
		if i, ok := a.liveIndexLocked(fam, cands[0].Prefix); ok {
			live[i].blame(c)
			return ErrFull
		}
	}
	*c = choice{} // a made-up candidate first: no CIDR to blame
	return ErrFull
}

// liveIndexLocked returns the place in live[fam] of the pool of p.
func (a *Allocator) liveIndexLocked(fam int, p netip.Prefix) (int, bool) {
	pl := a.pools[p]
	if pl == nil || pl.fam != fam || pl.liveAt < 0 {
		return 0, false
	}
	return pl.liveAt, true
}

// walkLiveLocked tries the pools of live[fam] in order from first,
// wrapping around, skipping those known full by their marks in open. The
// first is the one to blame if all are full.
func (a *Allocator) walkLiveLocked(fam, first int, skip []netip.Addr, c *choice) error {
	live, open := a.live[fam], &a.open[fam]
	// From first to the end, then from the start up to first.
	for i := open.next(first); i >= 0; i = open.next(i + 1) {
		if x, ok := a.nextInPoolLocked(live[i].pool, skip); ok {
			live[i].choose(x, c)
			return nil
		}
	}
	for i := open.next(0); i >= 0 && i < first; i = open.next(i + 1) {
		if x, ok := a.nextInPoolLocked(live[i].pool, skip); ok {
			live[i].choose(x, c)
			return nil
		}
	}
	live[first].blame(c)
	return ErrFull
}

// choose sets *c to address x of l.
func (l *liveSource) choose(x u128.U128, c *choice) {
	c.addr, c.x = x.Addr(l.pool.fam == 0), x
	c.fence = store.Fence{CIDR: l.cidr, Revision: l.rev}
}

// blame sets *c to the choice of l when it has no free address: no
// address, only the CIDR, for the observer.
func (l *liveSource) blame(c *choice) {
	*c = choice{fence: store.Fence{CIDR: l.cidr, Revision: l.rev}}
}

// knownFull reports, without mu, that the first request of reqs is
// dynamic and for a family whose live pools are all known full.
func (a *Allocator) knownFull(reqs ...request) bool {
	// Only the first request: choosing tries them in order, and the first
	// that fails decides, which may be another's error than ErrFull.
	if len(reqs) == 0 {
		return false
	}
	r := reqs[0]
	fam, ok := famOf(r.family)
	return ok && !r.addr.IsValid() && a.full[fam].Load()
}

// fullFor reports whether choosing fails reqs with ErrFull, and where it
// would have served them from: for an allocation that fails anyway (an
// invalid owner), which is ErrFull if the range is full. Counters cannot
// always tell (a pool with excluded addresses, a family whose CIDRs are
// all Terminating), so it chooses.
func (a *Allocator) fullFor(reqs []request) (sources, bool) {
	var buf [2]choice
	a.mu.Lock()
	choices, err := a.chooseLocked(reqs, nil, buf[:0])
	a.mu.Unlock()
	if !errors.Is(err, ErrFull) {
		return sources{}, false
	}
	return sourcesOf(choices).failedAt(len(choices) - 1), true
}

// remarkOpenLocked marks open[fam] anew from live, and sets full[fam].
func (a *Allocator) remarkOpenLocked(fam int) {
	a.open[fam].reset(len(a.live[fam]))
	for i, l := range a.live[fam] {
		a.open[fam].set(i, !l.pool.knownFull())
	}
	a.setFullLocked(fam)
}

// liveChangedLocked rebuilds what follows the places in live[fam] as a
// whole, after live[fam] changed.
func (a *Allocator) liveChangedLocked(fam int) {
	if t := a.mostFree[fam]; t != nil {
		t.build(a.live[fam], a.freeLocked)
	}
}

// freeLocked is the count of pl's free addresses MostFree compares: what
// Usage reports as Free, excluded addresses not counting as free.
func (a *Allocator) freeLocked(pl *pool) u128.U128 {
	return pl.size.Sub(pl.used).Sub(pl.excluded.Sub(pl.excludedUsed))
}

// countChangedLocked follows a change of pl's used count.
func (a *Allocator) countChangedLocked(pl *pool) {
	// Small enough to inline: without MostFree, a write pays one compare.
	if a.mostFree[pl.fam] != nil {
		a.mostFreeCountChangedLocked(pl)
	}
}

// setFullLocked sets full[fam] from open[fam].
func (a *Allocator) setFullLocked(fam int) {
	a.full[fam].Store(len(a.live[fam]) > 0 && !a.open[fam].any())
}

// fullnessChangedLocked keeps open and full when pl's used count has just
// reached its size (nowFull) or left it. With excluded addresses in pl,
// knownFull does not follow the count.
func (a *Allocator) fullnessChangedLocked(pl *pool, nowFull bool) {
	if pl.liveAt < 0 || !pl.excluded.IsZero() {
		return
	}
	a.open[pl.fam].set(pl.liveAt, !nowFull)
	a.setFullLocked(pl.fam)
}

// knownFull reports that pl has no free address, when its counters alone
// tell: with excluded addresses in it, a search must tell.
func (pl *pool) knownFull() bool {
	return pl.size.IsZero() || (pl.excluded.IsZero() && pl.used == pl.size)
}

// nextInPoolLocked finds a free address of pl: upper band first, then lower.
func (a *Allocator) nextInPoolLocked(pl *pool, skip []netip.Addr) (u128.U128, bool) {
	if pl.knownFull() {
		return u128.U128{}, false
	}
	if pl.excluded.IsZero() && len(a.pending) == 0 && len(skip) == 0 {
		// Nothing to step over: the bitmap alone answers, or the sparse
		// set for a pool no other shares an address with, so none dense
		// (used.go).
		if pl.bits != nil {
			return a.nextInDenseLocked(pl)
		}
		if pl.alone {
			return a.nextInSparseLocked(pl)
		}
	}
	if x, ok := a.searchBandLocked(pl, pl.upperFirst, pl.last, skip); ok {
		return x, true
	}
	if pl.hasLower {
		return a.searchBandLocked(pl, pl.first, pl.lowerLast, skip)
	}
	return u128.U128{}, false
}

// searchBandLocked returns a free address of [lo, hi], starting where the
// strategy says and wrapping around.
func (a *Allocator) searchBandLocked(pl *pool, lo, hi u128.U128, skip []netip.Addr) (u128.U128, bool) {
	n := hi.Sub(lo).Inc()
	off := u128.U128(a.cfg.strategy.Start(cidrset.Count(n)))
	if !off.Less(n) {
		// A Strategy of the embedder's that breaks its contract: a start
		// past the band would search outside it.
		off = off.Mod(n)
	}
	start := lo.Add(off)
	if x, ok := a.nextFreeLocked(pl, start, hi, skip); ok {
		return x, true
	}
	if start == lo {
		return u128.U128{}, false
	}
	return a.nextFreeLocked(pl, lo, start.Dec(), skip)
}

// nextFreeLocked returns the first address of [from, to], inside pl, that
// is neither used, excluded, pending nor skipped. Excluded runs are skipped
// whole, so the loop runs at most once per excluded run, pending and
// skipped address.
func (a *Allocator) nextFreeLocked(pl *pool, from, to u128.U128, skip []netip.Addr) (u128.U128, bool) {
	fam := pl.fam
	for {
		var x u128.U128
		var ok bool
		if pl.bits != nil { // a dense pool answers for its whole range
			var off uint64
			off, ok = pl.bits.NextClear(from.Sub(pl.first).Lo, to.Sub(pl.first).Lo)
			x = pl.first.Add64(off)
		} else {
			x, ok = a.nextUnusedLocked(fam, from, to)
		}
		if !ok {
			return x, false
		}
		next := x
		if _, end, ok := a.excludedRunAt(pl, x); ok {
			next = end
		} else if len(a.pending) > 0 && slices.Contains(a.pending, x.Addr(fam == 0)) {
		} else if len(skip) > 0 && slices.Contains(skip, x.Addr(fam == 0)) {
		} else {
			return x, true
		}
		if next == to || next == u128.Max() {
			return u128.U128{}, false
		}
		from = next.Inc()
		if to.Less(from) {
			return u128.U128{}, false
		}
	}
}

// mappedBlock returns the IPv4-mapped block, ::ffff:0:0/96, excluded from
// every IPv6 pool.
func mappedBlock() (first, last u128.U128) {
	return u128.FromAddr(netip.AddrFrom16([16]byte{10: 0xff, 11: 0xff})),
		u128.FromAddr(netip.AddrFrom16([16]byte{10: 0xff, 11: 0xff, 12: 0xff, 13: 0xff, 14: 0xff, 15: 0xff}))
}

// excludedRunAt returns the excluded run holding x, an address of pl, if
// any; most pools hold no excluded address, which is checked first.
func (a *Allocator) excludedRunAt(pl *pool, x u128.U128) (start, end u128.U128, ok bool) {
	if pl.excluded.IsZero() {
		return start, end, false
	}
	return a.excluded[pl.fam].RunAt(x)
}

// Release frees addr, whatever the state of the CIDR it is in; an address
// that is not allocated is an error matching ErrNotFound (a retried
// release may take it for done). Releasing an
// address inside a Terminating CIDR re-checks whether that CIDR may go;
// over a store whose watch lags (etcd), that first waits, at most 5 s and
// within ctx, for the index to apply the release. The address is free
// either way: a check the wait cuts short is left to the background
// reconciler.
func (a *Allocator) Release(ctx context.Context, addr netip.Addr) error {
	if err := a.checkOpen(); err != nil {
		return err
	}
	if err := ipaddress.ValidateAddr(addr); err != nil {
		return err
	}
	if a.locked != nil {
		if err := ctx.Err(); err != nil {
			return err
		}
		a.mu.Lock()
		rev, err := a.locked.DeleteAddressLocked(addr, a.self)
		if err == nil {
			// addressChangedLocked, with its conversion here, inline: one
			// call.
			a.markValueLocked(u128.FromAddr(addr), famIndex(addr), false)
			a.advanceLocked(rev)
		}
		a.mu.Unlock()
		if err != nil {
			return err
		}
		// The index applied the deletion before the lock was let go.
		a.released(ctx, addr, 0)
		return nil
	}
	_, deleted, err := a.st.DeleteAddress(ctx, addr)
	if err != nil {
		return err
	}
	a.released(ctx, addr, deleted)
	return nil
}

// ReleaseAt frees addr only if its record's revision is still rev: for a
// caller that decided on a record it read, such as repair. It fails with an
// error matching ErrConflict if the address was released and allocated
// again since, and ErrNotFound if it is free. It re-checks as Release does.
func (a *Allocator) ReleaseAt(ctx context.Context, addr netip.Addr, rev int64) error {
	if err := a.checkOpen(); err != nil {
		return err
	}
	if err := ipaddress.ValidateAddr(addr); err != nil {
		return err
	}
	_, deleted, err := a.st.DeleteAddressAt(ctx, addr, rev)
	if err != nil {
		return err
	}
	a.released(ctx, addr, deleted)
	return nil
}

// ReleaseRecords releases each record of recs only if the store still
// holds it as given: for a caller that decided on records it read, such as
// repair and ReleaseOwner. errs[i] is the outcome for recs[i]: nil when it
// was released; an error matching ErrNotFound or ErrConflict when it is
// gone or changed since (released by someone else, perhaps allocated
// again: left alone); any other error when its release failed, which does
// not stop the others. Once ctx ends, the records not yet released get its
// error.
//
// Over a store.RecordsDeleter the records are deleted up to 64 in one
// write (store/etcd: one transaction, where each alone takes a read and a
// transaction; store/bolt: one synced write), each only if held with the
// revision, owner and creation time given. The records of a write the
// store refuses, because one of them changed or as more than it takes at
// once, are released one by one, as ReleaseAt releases them: at the
// revision given. Every release re-checks as Release does.
func (a *Allocator) ReleaseRecords(ctx context.Context, recs []ipaddress.IPAddress) []error {
	var batched func(todo []int, errs []error) []int
	if d, ok := a.st.(store.RecordsDeleter); ok {
		batched = func(todo []int, errs []error) []int { return a.deleteRecords(ctx, d, recs, todo, errs) }
	}
	return a.writeRecords(ctx, len(recs), batched, func(i int) error {
		return a.ReleaseAt(ctx, recs[i].Addr, recs[i].Revision)
	})
}

// ReplaceRecords gives the record of recs[i], only if the store still
// holds it as given, to owner to[i], the address never free in between
// (store.Store.ReplaceAddressAt): for a caller that decided on records it
// read, such as repair handing a wrongly owned record to the consumer
// holding its address. errs[i] is the outcome for recs[i]: nil when it
// was given; an error matching ErrNotFound or ErrConflict when it is gone
// or changed since; ErrInvalid for an owner Allocate refuses (every record
// when recs and to differ in length); any other error when its write
// failed, which does not stop the others. Once ctx ends, the records not
// yet given get its error.
//
// Over a store.RecordsReplacer the records are written up to 64 in one
// write, each only if held with the revision, owner and creation time
// given; the records of a write the store refuses, because one of them
// changed or as more than it takes at once, are given one by one, at the
// revision given.
func (a *Allocator) ReplaceRecords(ctx context.Context, recs []ipaddress.IPAddress, to []ipaddress.ParentRef) []error {
	if len(to) != len(recs) {
		mismatch := &ipaddress.FieldError{Field: "owners", Detail: "one owner for each record"}
		return a.writeRecords(ctx, len(recs), nil, func(int) error { return mismatch })
	}
	var batched func(todo []int, errs []error) []int
	if rp, ok := a.st.(store.RecordsReplacer); ok {
		batched = func(todo []int, errs []error) []int { return a.replaceRecords(ctx, rp, recs, to, todo, errs) }
	}
	return a.writeRecords(ctx, len(recs), batched, func(i int) error {
		if err := ipaddress.ValidateAddr(recs[i].Addr); err != nil {
			return err
		}
		if err := to[i].Validate(); err != nil {
			return err
		}
		_, err := a.st.ReplaceAddressAt(ctx, ipaddress.IPAddress{Addr: recs[i].Addr, Parent: to[i]}, recs[i].Revision)
		return err
	})
}

// replaceRecords gives the records of recs at the indexes of todo to their
// owners in to through rp, in writes of writeBatch records, setting their
// outcomes in errs, and returns the indexes left for the caller to give
// one by one: of records with an invalid address or new owner, and of every
// write rp refused, with ErrConflict or as invalid.
func (a *Allocator) replaceRecords(ctx context.Context, rp store.RecordsReplacer, recs []ipaddress.IPAddress, to []ipaddress.ParentRef, todo []int, errs []error) (left []int) {
	batch := make([]ipaddress.IPAddress, 0, min(len(todo), writeBatch))
	owners := make([]ipaddress.ParentRef, 0, min(len(todo), writeBatch))
	fits := func(i int) bool { return ipaddress.ValidateAddr(recs[i].Addr) == nil && to[i].Validate() == nil }
	return inBatches(ctx, todo, errs, fits, func(idx []int) error {
		batch, owners = batch[:0], owners[:0]
		for _, i := range idx {
			batch = append(batch, recs[i])
			owners = append(owners, to[i])
		}
		_, err := rp.ReplaceRecords(ctx, batch, owners)
		return err
	})
}

// writeRecords is the frame of ReleaseRecords, ReplaceRecords and
// RestoreRecords: it returns the outcomes of n records, each ErrClosed on
// a closed allocator. Otherwise batched, if the store writes several
// records at once, writes what it can, setting their outcomes, and
// returns the indexes it left; one writes those one by one while ctx
// lasts.
func (a *Allocator) writeRecords(ctx context.Context, n int, batched func(todo []int, errs []error) (left []int), one func(i int) error) []error {
	errs := make([]error, n)
	if err := a.checkOpen(); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	todo := make([]int, n)
	for i := range todo {
		todo[i] = i
	}
	if batched != nil {
		todo = batched(todo, errs)
	}
	for _, i := range todo {
		if err := ctx.Err(); err != nil {
			errs[i] = err
			continue
		}
		errs[i] = one(i)
	}
	return errs
}

// writeBatch is how many records ReleaseRecords, ReplaceRecords and
// RestoreRecords write in one store call: store/etcd's MaxBatch.
const writeBatch = 64

// deleteRecords deletes the records of recs at the indexes of todo through
// d, in writes of writeBatch records, setting their outcomes in errs,
// and returns the indexes left for the caller to release one by one: of
// records that are no address's, and of every write d refused, with
// ErrConflict (one of them changed since, or is held in a form d does not
// delete) or as invalid (an address given twice, or more records than d
// deletes at once).
func (a *Allocator) deleteRecords(ctx context.Context, d store.RecordsDeleter, recs []ipaddress.IPAddress, todo []int, errs []error) (left []int) {
	batch := make([]ipaddress.IPAddress, 0, min(len(todo), writeBatch))
	fits := func(i int) bool { return ipaddress.ValidateAddr(recs[i].Addr) == nil }
	return inBatches(ctx, todo, errs, fits, func(idx []int) error {
		batch = batch[:0]
		for _, i := range idx {
			batch = append(batch, recs[i])
		}
		deleted, err := d.DeleteRecords(ctx, batch)
		if err == nil {
			for _, i := range idx {
				a.released(ctx, recs[i].Addr, deleted)
			}
		}
		return err
	})
}

// inBatches writes the records at the indexes of todo that fit, in chunks
// of writeBatch, each through one call of write, and returns the indexes
// left for the caller to write one by one: of the records that do not fit,
// and of every chunk write refused with ErrConflict or as invalid. Any
// other error, and ctx's once it ends, is the outcome in errs of each
// record of its chunk.
func inBatches(ctx context.Context, todo []int, errs []error, fits func(i int) bool, write func(idx []int) error) (left []int) {
	valid := make([]int, 0, len(todo))
	for _, i := range todo {
		if fits(i) {
			valid = append(valid, i)
		} else {
			left = append(left, i)
		}
	}
	for idx := range slices.Chunk(valid, writeBatch) {
		err := ctx.Err()
		if err == nil {
			err = write(idx)
		}
		switch {
		case err == nil:
		case errors.Is(err, store.ErrConflict), errors.Is(err, ipaddress.ErrInvalid):
			left = append(left, idx...)
		default:
			for _, i := range idx {
				errs[i] = err
			}
		}
	}
	return left
}

// releaseWait bounds a release's wait for a lagging index: the release is
// done, and a watch that far behind is the reconciler's to catch up with.
const releaseWait = 5 * time.Second

// appliedThrough reports whether the index reflects the store at revision
// rev (0: the caller applied its own write already).
func (a *Allocator) appliedThrough(rev int64) bool {
	if rev <= 0 {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rev >= rev
}

// released re-checks the Terminating CIDRs that contained addr, freed in
// the store at revision deleted. The index must have applied that deletion
// first: a store that tells watchers later (etcd) would otherwise still
// show addr in use, and the CIDR would stay until something else changed.
// Failures are logged, not returned: the address is free either way, and
// the background reconciler checks the CIDR again.
func (a *Allocator) released(ctx context.Context, addr netip.Addr, deleted int64) {
	// The common case, checked inline: nothing dying, and a deletion the
	// caller applied itself (see appliedThrough).
	if deleted > 0 || a.dyingCount.Load() != 0 {
		a.recheckReleased(ctx, addr, deleted)
	}
}

// recheckReleased is released past its common case.
func (a *Allocator) recheckReleased(ctx context.Context, addr netip.Addr, deleted int64) {
	// Nothing dying is an answer only from an index that has applied the
	// deletion: one that lags may not know yet that a CIDR holding addr
	// turned Terminating before it, and a process ending soon (ipamctl)
	// would leave that CIDR with no one to remove it.
	if a.dyingCount.Load() == 0 && a.appliedThrough(deleted) {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, releaseWait)
	defer cancel()
	if err := a.WaitRevision(wctx, deleted); err != nil {
		if !errors.Is(err, ErrClosed) {
			a.cfg.logger.Warn("waiting for the index to apply a release", "addr", addr, "err", err)
		}
		return
	}
	var dying []string
	a.mu.Lock()
	for pl := range a.poolsAt(famIndex(addr), u128.FromAddr(addr)) {
		dying = append(dying, pl.dying...)
	}
	a.mu.Unlock()
	slices.Sort(dying)
	dying = slices.Compact(dying)
	for _, name := range dying {
		if _, err := a.reconcile(ctx, name); err != nil {
			a.cfg.logger.Warn("re-checking terminating CIDR", "cidr", name, "err", err)
			a.recheckLater(name)
		}
	}
}

// Get returns the record of addr from the store: ErrNotFound if there is
// none, ErrInvalid (as from Release and Allocate) if addr is no address
// a record can have.
func (a *Allocator) Get(ctx context.Context, addr netip.Addr) (ipaddress.IPAddress, error) {
	if err := a.checkOpen(); err != nil {
		return ipaddress.IPAddress{}, err
	}
	if err := ipaddress.ValidateAddr(addr); err != nil {
		return ipaddress.IPAddress{}, err
	}
	return a.st.GetAddress(ctx, addr)
}

// AddressesOf returns the records owner holds, through the store's owner
// index, as the store answers: with a *store.SkippedError beside them when
// records that might be owner's cannot be decoded (see
// store.Store.AddressesOf). An owner Allocate would refuse is refused with
// the same error (owner.Validate's, matching ErrInvalid), before the store
// is asked: no owner the allocator serves can hold a record.
func (a *Allocator) AddressesOf(ctx context.Context, owner ipaddress.ParentRef) ([]ipaddress.IPAddress, error) {
	if err := a.checkOpen(); err != nil {
		return nil, err
	}
	if err := owner.Validate(); err != nil {
		return nil, err
	}
	return a.st.AddressesOf(ctx, owner)
}

// ReleaseOwner releases every address owner holds and returns those it
// released. Each is released at the revision it was listed at: one freed
// by someone else since, perhaps allocated to another owner by now, is
// left alone and not returned. The records are released as
// ReleaseRecords releases them: over a store.RecordsDeleter up to 64 in
// one write (store/etcd: one transaction, where each address alone takes
// a read and a transaction). A release that fails does not stop the
// others: the addresses released are returned with the first failure's
// error.
//
// Records the store cannot decode hide none of owner's others: when
// AddressesOf returns a *store.SkippedError, the records it returned are
// released all the same, and that error is returned with them (it matches
// store.ErrCorrupt), since a record it names may be owner's and is still
// held. When a release fails too, the call returns that failure's error
// instead.
//
// An owner Allocate would refuse is refused as AddressesOf refuses it, and
// nothing is released: a record written past the allocator for such an
// owner is released by address (Release) or by a repair pass.
func (a *Allocator) ReleaseOwner(ctx context.Context, owner ipaddress.ParentRef) ([]netip.Addr, error) {
	if err := a.checkOpen(); err != nil {
		return nil, err
	}
	if err := owner.Validate(); err != nil {
		return nil, err
	}
	recs, listErr := a.st.AddressesOf(ctx, owner)
	var skipped *store.SkippedError
	if listErr != nil && !errors.As(listErr, &skipped) {
		return nil, listErr
	}
	var out []netip.Addr
	var failed error
	for i, err := range a.ReleaseRecords(ctx, recs) {
		switch {
		case err == nil:
			out = append(out, recs[i].Addr)
		case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrConflict):
			// Not owner's any more.
		case failed == nil:
			failed = err
		}
	}
	if failed != nil {
		return out, failed
	}
	return out, listErr
}
