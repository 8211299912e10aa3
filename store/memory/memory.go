// Package memory is the in-process Store: the embedded default. It is what
// etcd-io/raft's MemoryStorage is to raft: complete, fast, and lost when the
// process exits.
//
// Watchers are called synchronously, in the writing goroutine, while the
// store is locked: an allocator's index is current the moment a write
// returns.
//
// The index of records by owner, which AddressesOf reads, is built by its
// first call and kept from then on (see Store.AddressesOf): a process that
// never looks records up by owner does not pay for it. WithOwnerIndex
// keeps it from the start.
package memory

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/internal/strs"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// Option configures a Store.
type Option func(*Store)

// WithClock sets the clock that stamps Created (for tests). By default the
// store reads time.Now at most about once a second, since a record keeps
// whole seconds. A
// record's Created is whole seconds from 1970 to 2106: a clock outside
// that stamps the nearest end.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// WithOwnerIndex has the store keep its owner index from the first record,
// as every write after the first AddressesOf does anyway: for an embedder
// that looks records up by owner and would rather that first call did not
// build the index with the store locked (about 0.14 s at a million
// records), at about a tenth more per allocate and release until then.
func WithOwnerIndex() Option { return func(s *Store) { s.addrs.indexOwners() } }

// Store is an in-memory store.Store. The zero value is not usable; call New.
type Store struct {
	mu     sync.Mutex
	closed bool
	rev    int64
	now    func() time.Time // nil: clock
	// clock is apart from the Store so that its pending timer does not
	// keep a dropped store alive.
	clock *seconds
	cidrs map[string]cidrset.CIDR // written by putCIDR and deleteCIDR only
	// passed is the fence that held last, until a write to cidrs: an
	// allocator fences every create on the same few CIDRs, and this saves
	// the map lookup of their names.
	passed   passedFence
	addrs    *records
	watchers []*watcher // a slice: notify runs on every write; set by setWatchers only
	// soleWords are the words of the only watcher, if soleOK: it is
	// mostly the allocator writing, whose own writes then tell no one,
	// which othersWatch sees by one comparison (see isWatcher).
	soleWords ifaceWords
	soleOK    bool
}

// passedFence is a fence that held, if ok, and holds as long as no CIDR
// changes.
type passedFence struct {
	name string
	rev  int64
	ok   bool
}

// holds reports whether f is the fence p remembers. (A caller mostly
// passes the same string every time: see strs.Same.)
func (p *passedFence) holds(f store.Fence) bool {
	return p.ok && p.rev == f.Revision && strs.Same(p.name, f.CIDR)
}

// putCIDR stores c, forgetting the fence that passed.
func (s *Store) putCIDR(c cidrset.CIDR) {
	s.cidrs[c.Name] = c
	s.passed = passedFence{}
}

// deleteCIDR removes the CIDR named name, forgetting the fence that passed.
func (s *Store) deleteCIDR(name string) {
	delete(s.cidrs, name)
	s.passed = passedFence{}
}

type watcher struct {
	ctx  context.Context
	w    store.Watcher
	addr store.AddressWatcher // w, if it takes address changes as values
	// words are w's words, and sameWords says that x == w whenever x's
	// words are these (see isWatcher).
	words     ifaceWords
	sameWords bool
}

// ifaceWords is the layout of an interface value: the itab (one per
// interface and dynamic type, so equal itabs mean equal types) and the data
// word, the value itself or a pointer to it.
type ifaceWords struct{ tab, data unsafe.Pointer }

func wordsOf(w *store.Watcher) ifaceWords { return *(*ifaceWords)(unsafe.Pointer(w)) }

// isWatcher reports whether x == w.w. Equal words mean the same type and
// the same bits, equal for a type whose == holds of every value and itself
// (see reflexive): true without == on interfaces, which calls into the
// runtime whenever the types match. Other cases are left to ==.
func (w *watcher) isWatcher(x store.Watcher) bool {
	if w.sameWords && wordsOf(&x) == w.words {
		return true
	}
	return x == w.w
}

// reflexive reports whether every value of type t is == to itself: true
// unless t holds a float (NaN) or an interface (which may hold one).
func reflexive(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128, reflect.Interface:
		return false
	case reflect.Array:
		return t.Len() == 0 || reflexive(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if !reflexive(t.Field(i).Type) {
				return false
			}
		}
	}
	return true
}

var (
	_ store.Locked     = (*Store)(nil)
	_ store.Prefetcher = (*Store)(nil)
	_ store.PairLocked = (*Store)(nil)
)

// Mutex implements store.Locked: the store writes and calls its watchers
// with it held.
func (s *Store) Mutex() *sync.Mutex { return &s.mu }

// unix returns the time to stamp on a record, in Unix seconds.
func (s *Store) unix() int64 {
	// Mostly the clock's second is cached: small enough to inline. Only
	// a store without now starts the clock (readUnix), so a cached second
	// says now is nil.
	if sec := s.clock.cached.Load(); sec != 0 {
		return sec
	}
	return s.readUnix()
}

// readUnix is unix past its common case.
func (s *Store) readUnix() int64 {
	if s.now != nil {
		// What a record keeps (a uint32 of seconds): Created as returned
		// and as read back must agree.
		return min(max(s.now().Unix(), 0), math.MaxUint32)
	}
	return s.clock.now()
}

func (s *Store) time() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

// seconds is a clock of one-second resolution, the precision a record
// keeps, that reads time.Now at most about once a second: time.Now costs
// as much as the rest of a create on some virtual machines. A timer
// armed at the next whole second marks the cached value stale; the zero
// value is stale. Callers hold the store's lock.
type seconds struct {
	cached atomic.Int64 // Unix seconds, 0 when stale
}

func (c *seconds) now() int64 {
	if sec := c.cached.Load(); sec != 0 {
		return sec
	}
	t := time.Now()
	c.cached.Store(t.Unix())
	time.AfterFunc(time.Second-time.Duration(t.Nanosecond()), func() { c.cached.Store(0) })
	return t.Unix()
}

// New returns an empty store. A nil Option is ignored.
func New(opts ...Option) *Store {
	s := &Store{
		clock: new(seconds),
		cidrs: make(map[string]cidrset.CIDR),
		addrs: newRecords(),
	}
	for _, o := range opts {
		if o != nil {
			o(s)
		}
	}
	return s
}

// lock takes the store's lock for a call, or gives its refusal: ErrClosed
// first (after Close every call is refused so, whatever else is wrong),
// then the context's error.
func (s *Store) lock(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return store.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		s.mu.Unlock()
		return err
	}
	return nil
}

func (s *Store) notify(e store.Event) {
	for _, w := range s.watchers {
		// The watch's context may have ended before its removal ran.
		if w.ctx.Err() == nil {
			w.w.Apply(e)
		}
	}
}

// notifyAddress tells the watchers but self that rec was put or deleted at
// the current revision; an Event is built only for those that want one.
func (s *Store) notifyAddress(kind store.EventKind, rec *ipaddress.IPAddress, self store.Watcher) {
	for _, w := range s.watchers {
		switch {
		// self first: it is the common case, and cheaper than ctx.Err.
		case self != nil && w.w == self, w.ctx.Err() != nil:
		case w.addr != nil:
			w.addr.AddressChanged(kind, rec.Addr, s.rev)
		default:
			w.w.Apply(store.Event{Kind: kind, Revision: s.rev, Address: *rec})
		}
	}
}

// CreateCIDR implements store.Store.
func (s *Store) CreateCIDR(ctx context.Context, c cidrset.CIDR) (cidrset.CIDR, error) {
	if err := s.lock(ctx); err != nil {
		return cidrset.CIDR{}, err
	}
	defer s.mu.Unlock()
	if err := store.CheckCIDR(c); err != nil {
		return cidrset.CIDR{}, err
	}
	if _, ok := s.cidrs[c.Name]; ok {
		return cidrset.CIDR{}, fmt.Errorf("CIDR %q: %w", c.Name, store.ErrExists)
	}
	s.rev++
	c = c.Clone()
	c.Created = s.time()
	c.Revision = s.rev
	s.putCIDR(c)
	s.notify(store.Event{Kind: store.CIDRPut, Revision: s.rev, CIDR: c.Clone()})
	return c.Clone(), nil
}

// UpdateCIDR implements store.Store.
func (s *Store) UpdateCIDR(ctx context.Context, c cidrset.CIDR) (cidrset.CIDR, error) {
	if err := s.lock(ctx); err != nil {
		return cidrset.CIDR{}, err
	}
	defer s.mu.Unlock()
	if err := store.CheckCIDR(c); err != nil {
		return cidrset.CIDR{}, err
	}
	old, ok := s.cidrs[c.Name]
	if !ok {
		return cidrset.CIDR{}, fmt.Errorf("CIDR %q: %w", c.Name, store.ErrNotFound)
	}
	if old.Revision != c.Revision {
		return cidrset.CIDR{}, fmt.Errorf("CIDR %q at revision %d, not %d: %w", c.Name, old.Revision, c.Revision, store.ErrConflict)
	}
	s.rev++
	c = c.Clone()
	c.Created = old.Created
	c.Revision = s.rev
	s.putCIDR(c)
	s.notify(store.Event{Kind: store.CIDRPut, Revision: s.rev, CIDR: c.Clone()})
	return c.Clone(), nil
}

// checkFences reports the first fence that does not hold. Callers hold mu.
func (s *Store) checkFences(fences []store.Fence) error {
	for _, f := range fences {
		if s.passed.holds(f) {
			continue
		}
		c, ok := s.cidrs[f.CIDR]
		if !ok || !f.HeldAt(c.Revision) {
			return &store.FencedError{Fence: f, Seen: s.rev}
		}
		// What the CIDR is at, which a touching fence may be behind.
		s.passed = passedFence{name: f.CIDR, rev: c.Revision, ok: true}
	}
	return nil
}

// DeleteCIDR implements store.Store.
func (s *Store) DeleteCIDR(ctx context.Context, name string, rev int64, fences ...store.Fence) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	old, ok := s.cidrs[name]
	if !ok {
		return fmt.Errorf("CIDR %q: %w", name, store.ErrNotFound)
	}
	if old.Revision != rev {
		return fmt.Errorf("CIDR %q at revision %d, not %d: %w", name, old.Revision, rev, store.ErrConflict)
	}
	if err := s.checkFences(fences); err != nil {
		return err
	}
	s.rev++
	s.deleteCIDR(name)
	s.notify(store.Event{Kind: store.CIDRDeleted, Revision: s.rev, CIDR: old})
	return nil
}

// GetCIDR implements store.Store.
func (s *Store) GetCIDR(ctx context.Context, name string) (cidrset.CIDR, error) {
	if err := s.lock(ctx); err != nil {
		return cidrset.CIDR{}, err
	}
	defer s.mu.Unlock()
	c, ok := s.cidrs[name]
	if !ok {
		return cidrset.CIDR{}, fmt.Errorf("CIDR %q: %w", name, store.ErrNotFound)
	}
	return c.Clone(), nil
}

// CreateAddresses implements store.Store.
func (s *Store) CreateAddresses(ctx context.Context, recs []ipaddress.IPAddress, fences ...store.Fence) ([]ipaddress.IPAddress, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	return s.createAddresses(recs, fences)
}

// CreateAddressesLocked implements store.Locked.
func (s *Store) CreateAddressesLocked(recs []ipaddress.IPAddress, fences []store.Fence) ([]ipaddress.IPAddress, error) {
	if s.closed {
		return nil, store.ErrClosed
	}
	return s.createAddresses(recs, fences)
}

func (s *Store) createAddresses(recs []ipaddress.IPAddress, fences []store.Fence) ([]ipaddress.IPAddress, error) {
	var batch map[netip.Addr]bool // duplicates within a large batch
	if len(recs) > 8 {
		batch = make(map[netip.Addr]bool, len(recs))
	}
	for i := range recs { // by index: a record is 128 bytes to copy
		addr := recs[i].Addr
		if err := ipaddress.ValidateAddr(addr); err != nil {
			return nil, err
		}
		if err := store.CheckOwner(recs[i].Parent); err != nil {
			return nil, err
		}
		if s.addrs.has(addr) {
			return nil, &store.AddressExistsError{Addr: addr}
		}
		dup := batch[addr]
		if batch != nil {
			batch[addr] = true
		} else {
			dup = slices.ContainsFunc(recs[:i], func(p ipaddress.IPAddress) bool { return p.Addr == addr })
		}
		if dup {
			return nil, &store.AddressExistsError{Addr: addr}
		}
	}
	if err := s.checkFences(fences); err != nil {
		return nil, err
	}
	if len(recs) == 0 && !slices.ContainsFunc(fences, func(f store.Fence) bool { return f.Touch }) {
		return recs, nil // nothing written: no revision, which no watcher would hear of
	}
	now := s.unix()
	for i := range recs {
		if !s.addrs.put(recs[i].Addr, recs[i].Parent, now, s.rev+1) {
			for _, r := range recs[:i] {
				s.addrs.remove(r.Addr)
			}
			return nil, fmt.Errorf("creating %d address records: %w", len(recs), store.ErrNoSpace)
		}
	}
	s.rev++
	s.touch(fences)
	for i := range recs {
		r := &recs[i]
		r.Created, r.Revision = time.Unix(now, 0), s.rev
		s.notifyAddress(store.AddressPut, r, nil)
	}
	// recs is the caller's: its elements are set in place rather than
	// copied, which saves an allocation on the hot path.
	return recs, nil
}

// touch gives the CIDR of every touching fence the current revision.
// A CIDR named by two touching fences is touched, and told, once.
func (s *Store) touch(fences []store.Fence) {
	for i, f := range fences {
		if f.Touch && !slices.ContainsFunc(fences[:i], func(g store.Fence) bool { return g.Touch && g.CIDR == f.CIDR }) {
			c := s.cidrs[f.CIDR]
			c.Revision = s.rev
			s.putCIDR(c)
			s.notify(store.Event{Kind: store.CIDRPut, Revision: s.rev, CIDR: c.Clone()})
		}
	}
}

// errNoOwner is a Locked create's refusal of a nil owner.
func errNoOwner() error { return &ipaddress.FieldError{Field: "spec.parentRef", Required: true} }

// CreateAddressLocked implements store.Locked.
func (s *Store) CreateAddressLocked(addr netip.Addr, valid *ipaddress.ValidParentRef, fence store.Fence, self store.Watcher) (int64, time.Time, error) {
	if s.closed {
		return 0, time.Time{}, store.ErrClosed
	}
	if err := ipaddress.ValidateAddr(addr); err != nil {
		return 0, time.Time{}, err
	}
	if valid == nil {
		return 0, time.Time{}, errNoOwner()
	}
	// Meets CheckOwner, as every ValidParentRef does: not checked again.
	owner := valid.ParentRef()
	// A refused write interns nothing: look the owner's scope up only.
	k, known := s.addrs.knownOwnerKey(&owner)
	if known {
		s.addrs.warm(k)
	}
	// Room first (a growth may give the address's prefix a block): the
	// spot the lookup finds, and the hash it worked out, then serve the
	// insert.
	key := validKey(addr)
	t := s.addrs.tableOf(key)
	s.addrs.reserve(t)
	sp := s.addrs.spotOf(t, key)
	if sp.held() {
		return 0, time.Time{}, &store.AddressExistsError{Addr: addr}
	}
	// Mostly the fence that held last: checked inline, without the loop
	// (nor the copy of the fence that the loop takes, 12 instructions).
	if !s.passed.holds(fence) {
		if err := s.checkFences([]store.Fence{fence}); err != nil {
			return 0, time.Time{}, err
		}
	}
	now := s.unix()
	if !known {
		k = s.addrs.ownerKeyOf(owner)
	}
	if !s.addrs.putAt(t, key, &sp, k, owner.Name, now, s.rev+1) {
		return 0, time.Time{}, fmt.Errorf("address %s: %w", addr, store.ErrNoSpace)
	}
	s.rev++
	if fence.Touch { // mostly not: the call and its loop cost more than the test
		s.touch([]store.Fence{fence})
	}
	created := time.Unix(now, 0)
	if s.othersWatch(self) {
		rec := ipaddress.IPAddress{Addr: addr, Parent: owner, Created: created, Revision: s.rev}
		s.notifyAddress(store.AddressPut, &rec, self)
	}
	return s.rev, created, nil
}

// CreatePairLocked implements store.PairLocked: CreateAddressLocked for
// two addresses of one owner, of different families, so that neither
// lookup can move what the other found (each family has its table).
func (s *Store) CreatePairLocked(v4, v6 netip.Addr, valid *ipaddress.ValidParentRef, f4, f6 store.Fence, self store.Watcher) (int64, time.Time, error) {
	if s.closed {
		return 0, time.Time{}, store.ErrClosed
	}
	addrs := [2]netip.Addr{v4, v6}
	for i, want := range [2]ipaddress.Family{ipaddress.IPv4, ipaddress.IPv6} {
		if err := ipaddress.ValidateAddr(addrs[i]); err != nil {
			return 0, time.Time{}, err
		}
		if ipaddress.FamilyOf(addrs[i]) != want {
			return 0, time.Time{}, &ipaddress.FieldError{Field: "address", Value: addrs[i].String(), Detail: "must be of family " + want.String()}
		}
	}
	if valid == nil {
		return 0, time.Time{}, errNoOwner()
	}
	// Meets CheckOwner, as every ValidParentRef does: not checked again.
	owner := valid.ParentRef()
	k, known := s.addrs.knownOwnerKey(&owner)
	if known {
		s.addrs.warm(k)
	}
	// Both tables get their room before either lookup, as
	// CreateAddressLocked's one does (a growth may give a prefix a block).
	var keys [2]addrKey
	var tables [2]*offTable
	for i, addr := range addrs {
		keys[i] = validKey(addr)
		tables[i] = s.addrs.tableOf(keys[i])
		s.addrs.reserve(tables[i])
	}
	var spots [2]spot
	for i, addr := range addrs {
		if spots[i] = s.addrs.spotOf(tables[i], keys[i]); spots[i].held() {
			return 0, time.Time{}, &store.AddressExistsError{Addr: addr}
		}
	}
	if !s.passed.holds(f4) || !s.passed.holds(f6) {
		if err := s.checkFences([]store.Fence{f4, f6}); err != nil {
			return 0, time.Time{}, err
		}
	}
	now := s.unix()
	if !known {
		k = s.addrs.ownerKeyOf(owner)
	}
	for i := range addrs {
		if !s.addrs.putAt(tables[i], keys[i], &spots[i], k, owner.Name, now, s.rev+1) {
			if i == 1 {
				s.addrs.remove(v4)
			}
			return 0, time.Time{}, fmt.Errorf("creating %d address records: %w", 2, store.ErrNoSpace)
		}
	}
	s.rev++
	if f4.Touch || f6.Touch {
		s.touch([]store.Fence{f4, f6})
	}
	created := time.Unix(now, 0)
	if s.othersWatch(self) {
		for _, addr := range addrs {
			rec := ipaddress.IPAddress{Addr: addr, Parent: owner, Created: created, Revision: s.rev}
			s.notifyAddress(store.AddressPut, &rec, self)
		}
	}
	return s.rev, created, nil
}

// PrefetchOwnerLocked starts loading the owner table's slot that a
// CreateAddressLocked for owner reads, when the table is past the caches
// (see store.Prefetcher). The caller holds Mutex.
func (s *Store) PrefetchOwnerLocked(owner ipaddress.ParentRef) {
	if s.addrs.ownersPrefetched() {
		s.addrs.prefetchOwner(&owner)
	}
}

// PrefetchAddressLocked starts loading the address table's slot that a
// CreateAddressLocked of addr reads, when the table is past the caches
// (see store.Prefetcher). The caller holds Mutex.
func (s *Store) PrefetchAddressLocked(addr netip.Addr) { s.addrs.prefetchAddr(addr) }

// othersWatch reports whether a watcher other than self is registered:
// without one, a write need not build the record it would be told.
func (s *Store) othersWatch(self store.Watcher) bool {
	return !(s.soleOK && wordsOf(&self) == s.soleWords) && s.othersWatchAll(self)
}

// othersWatchAll is othersWatch past its common case, kept out so that
// othersWatch inlines.
func (s *Store) othersWatchAll(self store.Watcher) bool {
	return len(s.watchers) > 1 || len(s.watchers) == 1 && (self == nil || !s.watchers[0].isWatcher(self))
}

// setWatchers sets the watchers, and with them soleWords.
func (s *Store) setWatchers(ws []*watcher) {
	s.watchers = ws
	s.soleWords, s.soleOK = ifaceWords{}, false
	if len(ws) == 1 && ws[0].sameWords {
		s.soleWords, s.soleOK = ws[0].words, true
	}
}

// DeleteAddress implements store.Store.
func (s *Store) DeleteAddress(ctx context.Context, addr netip.Addr) (ipaddress.IPAddress, int64, error) {
	if err := s.lock(ctx); err != nil {
		return ipaddress.IPAddress{}, 0, err
	}
	defer s.mu.Unlock()
	rec, ok := s.addrs.delete(addr)
	if !ok {
		return ipaddress.IPAddress{}, 0, fmt.Errorf("address %s: %w", addr, store.ErrNotFound)
	}
	s.rev++
	s.notifyAddress(store.AddressDeleted, &rec, nil)
	return rec, s.rev, nil
}

// DeleteAddressLocked implements store.Locked. Its event carries the
// address only, as an AddressDeleted event may.
func (s *Store) DeleteAddressLocked(addr netip.Addr, self store.Watcher) (int64, error) {
	if s.closed {
		return 0, store.ErrClosed
	}
	if !s.addrs.remove(addr) {
		return 0, fmt.Errorf("address %s: %w", addr, store.ErrNotFound)
	}
	s.rev++
	if s.othersWatch(self) {
		rec := ipaddress.IPAddress{Addr: addr}
		s.notifyAddress(store.AddressDeleted, &rec, self)
	}
	return s.rev, nil
}

// DeleteAddressAt implements store.Store.
func (s *Store) DeleteAddressAt(ctx context.Context, addr netip.Addr, rev int64) (ipaddress.IPAddress, int64, error) {
	if err := s.lock(ctx); err != nil {
		return ipaddress.IPAddress{}, 0, err
	}
	defer s.mu.Unlock()
	cur, ok := s.addrs.get(addr)
	if !ok {
		return ipaddress.IPAddress{}, 0, fmt.Errorf("address %s: %w", addr, store.ErrNotFound)
	}
	if cur.Revision != rev {
		return ipaddress.IPAddress{}, 0, fmt.Errorf("address %s at revision %d, not %d: %w", addr, cur.Revision, rev, store.ErrConflict)
	}
	rec, _ := s.addrs.delete(addr)
	s.rev++
	s.notifyAddress(store.AddressDeleted, &rec, nil)
	return rec, s.rev, nil
}

// ReplaceAddressAt implements store.Store.
func (s *Store) ReplaceAddressAt(ctx context.Context, rec ipaddress.IPAddress, rev int64) (ipaddress.IPAddress, error) {
	if err := s.lock(ctx); err != nil {
		return ipaddress.IPAddress{}, err
	}
	defer s.mu.Unlock()
	if err := store.CheckOwner(rec.Parent); err != nil {
		return ipaddress.IPAddress{}, err
	}
	cur, ok := s.addrs.get(rec.Addr)
	if !ok {
		return ipaddress.IPAddress{}, fmt.Errorf("address %s: %w", rec.Addr, store.ErrNotFound)
	}
	if cur.Revision != rev {
		return ipaddress.IPAddress{}, fmt.Errorf("address %s at revision %d, not %d: %w", rec.Addr, cur.Revision, rev, store.ErrConflict)
	}
	now := s.unix()
	if !s.addrs.replace(rec.Addr, rec.Parent, now, s.rev+1) {
		return ipaddress.IPAddress{}, fmt.Errorf("address %s: %w", rec.Addr, store.ErrNoSpace)
	}
	s.rev++
	out := ipaddress.IPAddress{Addr: rec.Addr, Parent: rec.Parent, Created: time.Unix(now, 0), Revision: s.rev}
	s.notifyAddress(store.AddressPut, &out, nil)
	return out, nil
}

// GetAddress implements store.Store.
func (s *Store) GetAddress(ctx context.Context, addr netip.Addr) (ipaddress.IPAddress, error) {
	if err := s.lock(ctx); err != nil {
		return ipaddress.IPAddress{}, err
	}
	defer s.mu.Unlock()
	rec, ok := s.addrs.get(addr)
	if !ok {
		return ipaddress.IPAddress{}, fmt.Errorf("address %s: %w", addr, store.ErrNotFound)
	}
	return rec, nil
}

// AddressesOf implements store.Store. The first call builds the owner
// index from every record, with the store locked (about 0.14 s at a
// million records on the benchmark host); every write keeps it from then
// on. Until then writes keep none, and an allocate and release costs about
// a tenth less.
func (s *Store) AddressesOf(ctx context.Context, owner ipaddress.ParentRef) ([]ipaddress.IPAddress, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	recs := s.addrs.of(owner)
	slices.SortFunc(recs, func(x, y ipaddress.IPAddress) int { return x.Addr.Compare(y.Addr) })
	return recs, nil
}

// ListAddresses implements store.Store.
func (s *Store) ListAddresses(ctx context.Context) ([]ipaddress.IPAddress, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := make([]ipaddress.IPAddress, 0, s.addrs.len())
	s.addrs.all(func(a netip.Addr, e entry) { out = append(out, s.addrs.record(a, e)) })
	slices.SortFunc(out, func(x, y ipaddress.IPAddress) int { return x.Addr.Compare(y.Addr) })
	return out, nil
}

// Watch implements store.Store. Apply runs in the writer's goroutine.
func (s *Store) Watch(ctx context.Context, w store.Watcher) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	if w == nil || !reflect.ValueOf(w).Comparable() { // the value: an interface inside may hold an uncomparable one
		// A locked write tells apart its caller's own watcher with ==,
		// after the write: an uncomparable one would panic there.
		s.mu.Unlock()
		return &ipaddress.FieldError{Field: "watcher", Value: fmt.Sprintf("%T", w), Detail: "must be of a comparable type (a pointer, say): a store.Locked write compares it with its caller's"}
	}
	reg := s.registerLocked(ctx, w)
	context.AfterFunc(ctx, func() {
		s.mu.Lock()
		s.setWatchers(slices.DeleteFunc(s.watchers, func(w *watcher) bool { return w == reg }))
		s.mu.Unlock()
	})
	return nil
}

// registerLocked delivers the snapshot to w and registers it. It unlocks mu
// even if w.Reset panics, so a caller that recovers keeps a usable store.
func (s *Store) registerLocked(ctx context.Context, w store.Watcher) *watcher {
	defer s.mu.Unlock()
	snap := store.Snapshot{Revision: s.rev, Addrs: make([]netip.Addr, 0, s.addrs.len())}
	for _, c := range s.cidrs {
		snap.CIDRs = append(snap.CIDRs, c.Clone())
	}
	s.addrs.all(func(a netip.Addr, _ entry) { snap.Addrs = append(snap.Addrs, a) })
	w.Reset(snap)
	reg := &watcher{ctx: ctx, w: w}
	reg.addr, _ = w.(store.AddressWatcher)
	reg.words, reg.sameWords = wordsOf(&w), reflexive(reflect.TypeOf(w))
	s.setWatchers(append(s.watchers, reg))
	return reg
}

// Close implements store.Store.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.setWatchers(nil)
	return nil
}
