package memory_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"

	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/memory"
	"github.com/netipam/netipam/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) store.Store { return memory.New() })
}

// addressWatcher records what a store.AddressWatcher is told, through
// either method.
type addressWatcher struct {
	changes []string
	applied []store.Event
}

func (w *addressWatcher) Reset(store.Snapshot) {}
func (w *addressWatcher) Apply(e store.Event)  { w.applied = append(w.applied, e) }
func (w *addressWatcher) AddressChanged(kind store.EventKind, addr netip.Addr, rev int64) {
	w.changes = append(w.changes, fmt.Sprint(kind, " ", addr, " ", rev))
}

// TestAddressWatcher: a watcher implementing store.AddressWatcher gets every
// address write as AddressChanged, in order and with its revision, and
// only CIDR events through Apply; a plain Watcher beside it still gets
// Events for everything.
func TestAddressWatcher(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	fast := &addressWatcher{}
	plain := &addressWatcher{}
	if err := st.Watch(ctx, fast); err != nil {
		t.Fatal(err)
	}
	if err := st.Watch(ctx, plainWatcher{plain}); err != nil {
		t.Fatal(err)
	}
	owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "a"}
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::1")
	if _, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: "c", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: a, Parent: owner}, {Addr: b, Parent: owner}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.DeleteAddress(ctx, a); err != nil {
		t.Fatal(err)
	}
	st.Mutex().Lock()
	rev, err := st.DeleteAddressLocked(b, nil)
	st.Mutex().Unlock()
	if err != nil || rev != 4 {
		t.Fatalf("DeleteAddressLocked = %d, %v; want revision 4", rev, err)
	}
	// The single-record writes skip the watcher named self, which applies
	// them itself, and tell the others.
	c := netip.MustParseAddr("10.0.0.2")
	st.Mutex().Lock()
	rev, created, err := st.CreateAddressLocked(c, checked(owner), store.Fence{CIDR: "c", Revision: 1}, fast)
	st.Mutex().Unlock()
	if err != nil || rev != 5 || created.IsZero() {
		t.Fatalf("CreateAddressLocked = %d, %v, %v; want revision 5", rev, created, err)
	}
	st.Mutex().Lock()
	rev, err = st.DeleteAddressLocked(c, fast)
	st.Mutex().Unlock()
	if err != nil || rev != 6 {
		t.Fatalf("DeleteAddressLocked = %d, %v; want revision 6", rev, err)
	}
	put, del := store.AddressPut, store.AddressDeleted
	want := []string{
		fmt.Sprint(put, " ", a, " 2"), fmt.Sprint(put, " ", b, " 2"),
		fmt.Sprint(del, " ", a, " 3"), fmt.Sprint(del, " ", b, " 4"),
	}
	if !slices.Equal(fast.changes, want) {
		t.Errorf("AddressChanged calls %q, want %q", fast.changes, want)
	}
	if len(fast.applied) != 1 || fast.applied[0].Kind != store.CIDRPut {
		t.Errorf("Apply calls %+v, want the CIDRPut only", fast.applied)
	}
	var got []string
	for _, e := range plain.applied {
		got = append(got, fmt.Sprint(e.Kind, " ", e.Address.Addr, " ", e.Revision))
	}
	want = append([]string{fmt.Sprint(store.CIDRPut, " invalid IP 1")}, want...)
	want = append(want, fmt.Sprint(put, " ", c, " 5"), fmt.Sprint(del, " ", c, " 6"))
	if !slices.Equal(got, want) {
		t.Errorf("plain watcher got %q, want %q", got, want)
	}
	if e := plain.applied[1]; e.Address.Parent != owner || e.Address.Revision != 2 {
		t.Errorf("plain watcher's AddressPut carries %+v, want the whole record", e.Address)
	}
	if e := plain.applied[5]; e.Address.Parent != owner || !e.Address.Created.Equal(created) {
		t.Errorf("plain watcher's AddressPut from CreateAddressLocked carries %+v, want the whole record", e.Address)
	}
}

// CreateAddressLocked refuses as CreateAddresses does, and a refusal
// stores nothing and tells no one.
func TestCreateAddressLockedRefusals(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	w := &addressWatcher{}
	if err := st.Watch(ctx, w); err != nil {
		t.Fatal(err)
	}
	cidr, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: "c", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}})
	if err != nil {
		t.Fatal(err)
	}
	owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "a"}
	held := netip.MustParseAddr("10.0.0.1")
	if _, err := st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: held, Parent: owner}}); err != nil {
		t.Fatal(err)
	}
	fence := store.Fence{CIDR: cidr.Name, Revision: cidr.Revision}
	stale := store.Fence{CIDR: cidr.Name, Revision: cidr.Revision - 1}
	free := netip.MustParseAddr("10.0.0.2")
	var exists *store.AddressExistsError
	var fenced *store.FencedError
	for _, tc := range []struct {
		name  string
		addr  netip.Addr
		fence store.Fence
		ok    func(error) bool
	}{
		{"held", held, fence, func(err error) bool { return errors.As(err, &exists) && exists.Addr == held }},
		{"stale fence", free, stale, func(err error) bool { return errors.As(err, &fenced) && fenced.Fence == stale }},
		{"unstorable", netip.MustParseAddr("::ffff:10.0.0.3"), fence, func(err error) bool { return errors.Is(err, ipaddress.ErrInvalid) }},
	} {
		st.Mutex().Lock()
		_, _, err := st.CreateAddressLocked(tc.addr, checked(owner), tc.fence, nil)
		st.Mutex().Unlock()
		if !tc.ok(err) {
			t.Errorf("%s: CreateAddressLocked(%s) = %v", tc.name, tc.addr, err)
		}
	}
	// No owner at all: refused as an owner the store cannot keep is.
	st.Mutex().Lock()
	_, _, err = st.CreateAddressLocked(free, nil, fence, nil)
	st.Mutex().Unlock()
	var fe *ipaddress.FieldError
	if !errors.Is(err, ipaddress.ErrInvalid) || !errors.As(err, &fe) || fe.Field != "spec.parentRef" {
		t.Errorf("CreateAddressLocked with a nil owner = %v, want an *ipaddress.FieldError for spec.parentRef", err)
	}
	if _, err := st.GetAddress(ctx, free); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a refused create stored %s: %v", free, err)
	}
	if len(w.changes) != 1 {
		t.Errorf("watcher told %q, want the one successful create", w.changes)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st.Mutex().Lock()
	_, _, err = st.CreateAddressLocked(free, checked(owner), fence, nil)
	st.Mutex().Unlock()
	if !errors.Is(err, store.ErrClosed) {
		t.Errorf("CreateAddressLocked after Close = %v, want ErrClosed", err)
	}
}

// plainWatcher hides AddressChanged: a Watcher only.
type plainWatcher struct{ w *addressWatcher }

func (p plainWatcher) Reset(s store.Snapshot) { p.w.Reset(s) }
func (p plainWatcher) Apply(e store.Event)    { p.w.Apply(e) }

// panickyWatcher panics when it is given its snapshot.
type panickyWatcher struct{}

func (panickyWatcher) Reset(store.Snapshot) { panic("watcher refuses the snapshot") }
func (panickyWatcher) Apply(store.Event)    {}

// TestAWatcherThatPanicsLeavesTheStoreUsable: a caller that recovers from
// its watcher's panic in Reset still has a store it can call.
func TestAWatcherThatPanicsLeavesTheStoreUsable(t *testing.T) {
	st := memory.New() // not closed on failure: Close would wait for the lock
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the watcher's panic did not reach Watch's caller")
			}
		}()
		_ = st.Watch(context.Background(), panickyWatcher{})
	}()
	if !st.Mutex().TryLock() {
		t.Fatal("the store is left locked after its watcher panicked")
	}
	st.Mutex().Unlock()
	c := cidrset.CIDR{Name: "after", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}}
	if _, err := st.CreateCIDR(context.Background(), c); err != nil {
		t.Fatalf("CreateCIDR after a watcher panicked: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

// Created is what the record keeps, whole seconds from 1970 to 2106: a
// clock outside stamps the nearest end, and a write returns what a read
// gives back.
func TestCreatedIsWhatIsKeptWhateverTheClock(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ clock, want time.Time }{
		{time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC), time.Unix(math.MaxUint32, 0)},
		{time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC), time.Unix(0, 0)},
		{time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC), time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)},
	} {
		st := memory.New(memory.WithClock(func() time.Time { return tc.clock }))
		a := netip.MustParseAddr("10.0.0.1")
		recs, err := st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: a, Parent: ipaddress.ParentRef{Resource: "services", Namespace: "d", Name: "x"}}})
		if err != nil {
			t.Fatal(err)
		}
		got, err := st.GetAddress(ctx, a)
		if err != nil || !recs[0].Created.Equal(tc.want) || !got.Created.Equal(tc.want) {
			t.Errorf("clock %v: created %v, read back %v (%v); want %v", tc.clock, recs[0].Created, got.Created, err, tc.want)
		}
	}
}

// valueWatcher is a Watcher of an uncomparable type: a struct holding a map.
type valueWatcher struct{ held map[netip.Addr]bool }

func (valueWatcher) Reset(store.Snapshot) {}
func (valueWatcher) Apply(store.Event)    {}

// A locked write tells its caller's own watcher apart with ==, after the
// write: Watch refuses a watcher that == would panic on, and nil, rather
// than have a later write panic with the record stored and the other
// watchers untold. A locked write naming such a self still works.
func TestWatchRefusesAWatcherItCannotCompare(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	wrapped := struct{ store.Watcher }{valueWatcher{held: map[netip.Addr]bool{}}} // a comparable type holding an uncomparable value
	for _, w := range []store.Watcher{valueWatcher{held: map[netip.Addr]bool{}}, wrapped, nil} {
		if err := s.Watch(ctx, w); !errors.Is(err, ipaddress.ErrInvalid) {
			t.Fatalf("Watch(%T) = %v, want ErrInvalid", w, err)
		}
	}
	c, err := s.CreateCIDR(ctx, cidrset.CIDR{Name: "c", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}})
	if err != nil {
		t.Fatal(err)
	}
	other := &addressWatcher{}
	if err := s.Watch(ctx, other); err != nil {
		t.Fatal(err)
	}
	self := valueWatcher{held: map[netip.Addr]bool{}}
	a := netip.MustParseAddr("10.0.0.1")
	s.Mutex().Lock()
	defer s.Mutex().Unlock()
	if _, _, err := s.CreateAddressLocked(a, checked(ipaddress.ParentRef{Resource: "services", Name: "x"}), store.Fence{CIDR: "c", Revision: c.Revision}, self); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteAddressLocked(a, self); err != nil {
		t.Fatal(err)
	}
	if len(other.changes) != 2 {
		t.Fatalf("the other watcher was told %q, want the create and the delete", other.changes)
	}
}

// A fence that held fails once its CIDR is written, whichever the write:
// the store remembers the last fence that held, and every write to a CIDR
// must make it forget.
func TestAFenceThatHeldFailsAfterEveryCIDRWrite(t *testing.T) {
	ctx := context.Background()
	owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "a"}
	createLocked := func(st *memory.Store, addr string, f store.Fence) error {
		st.Mutex().Lock()
		defer st.Mutex().Unlock()
		_, _, err := st.CreateAddressLocked(netip.MustParseAddr(addr), checked(owner), f, nil)
		return err
	}
	for _, tc := range []struct {
		name  string
		write func(*memory.Store, cidrset.CIDR) error
	}{
		{"update", func(st *memory.Store, c cidrset.CIDR) error {
			_, err := st.UpdateCIDR(ctx, c)
			return err
		}},
		{"touch by CreateAddressLocked", func(st *memory.Store, c cidrset.CIDR) error {
			return createLocked(st, "10.0.0.3", store.Fence{CIDR: c.Name, Revision: c.Revision, Touch: true})
		}},
		{"touch by CreateAddresses", func(st *memory.Store, c cidrset.CIDR) error {
			_, err := st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: netip.MustParseAddr("10.0.0.3"), Parent: owner}},
				store.Fence{CIDR: c.Name, Revision: c.Revision, Touch: true})
			return err
		}},
		{"delete", func(st *memory.Store, c cidrset.CIDR) error {
			return st.DeleteCIDR(ctx, c.Name, c.Revision)
		}},
		{"delete and create again", func(st *memory.Store, c cidrset.CIDR) error {
			if err := st.DeleteCIDR(ctx, c.Name, c.Revision); err != nil {
				return err
			}
			_, err := st.CreateCIDR(ctx, c)
			return err
		}},
	} {
		st := memory.New()
		c, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: "c", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}})
		if err != nil {
			t.Fatal(err)
		}
		fence := store.Fence{CIDR: c.Name, Revision: c.Revision}
		if err := createLocked(st, "10.0.0.1", fence); err != nil {
			t.Fatalf("%s: the fresh fence failed: %v", tc.name, err)
		}
		if err := tc.write(st, c); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var fenced *store.FencedError
		if err := createLocked(st, "10.0.0.2", fence); !errors.As(err, &fenced) || fenced.Fence != fence {
			t.Errorf("%s: CreateAddressLocked with the fence from before = %v, want it fenced", tc.name, err)
		}
		if _, err := st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: netip.MustParseAddr("10.0.0.2"), Parent: owner}}, fence); !errors.Is(err, store.ErrFenced) {
			t.Errorf("%s: CreateAddresses with the fence from before = %v, want it fenced", tc.name, err)
		}
	}
}

// The remembered fence is told apart by name and revision, whatever the
// string holding the name.
func TestAFenceHoldsByNameAndRevision(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "a"}
	var cs []cidrset.CIDR
	for _, name := range []string{"c1", "c2"} {
		c, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: name, Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}})
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	try := func(addr string, f store.Fence) error {
		st.Mutex().Lock()
		defer st.Mutex().Unlock()
		_, _, err := st.CreateAddressLocked(netip.MustParseAddr(addr), checked(owner), f, nil)
		return err
	}
	held := store.Fence{CIDR: cs[0].Name, Revision: cs[0].Revision}
	if err := try("10.0.0.1", held); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		fence store.Fence
		holds bool
	}{
		{"same name, another string", store.Fence{CIDR: string([]byte(cs[0].Name)), Revision: cs[0].Revision}, true},
		{"another name of the same length", store.Fence{CIDR: cs[1].Name, Revision: cs[0].Revision}, false},
		{"a prefix of the name", store.Fence{CIDR: cs[0].Name[:1], Revision: cs[0].Revision}, false},
		{"another revision", store.Fence{CIDR: cs[0].Name, Revision: cs[1].Revision}, false},
		{"the same again", held, true},
	} {
		for _, addr := range []string{"10.0.0.2", "10.0.0.3"} { // twice: after it was remembered
			err := try(addr, tc.fence)
			if holds := err == nil; holds != tc.holds {
				t.Errorf("%s: CreateAddressLocked(%s) = %v, want it to hold: %v", tc.name, addr, err, tc.holds)
			}
			if err == nil {
				if _, _, err := st.DeleteAddress(ctx, netip.MustParseAddr(addr)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// loggedWatcher is a Watcher value that notes what it is told in log, its
// other fields only telling values apart: one pointer (stored in the
// interface itself), a pointer and an int (stored behind a pointer), a
// float, an interface or an array of floats.
type (
	loggedWatcher struct{ log *[]string }
	numberWatcher struct {
		log *[]string
		n   int
	}
	floatWatcher struct {
		log *[]string
		x   float64
	}
	anyWatcher struct {
		log *[]string
		v   any
	}
	floatsWatcher struct {
		log *[]string
		xs  [2]float64
	}
)

func note(log *[]string, e store.Event) { *log = append(*log, fmt.Sprint(e.Kind, " ", e.Address.Addr)) }

func (w loggedWatcher) Reset(store.Snapshot) {}
func (w loggedWatcher) Apply(e store.Event)  { note(w.log, e) }
func (w numberWatcher) Reset(store.Snapshot) {}
func (w numberWatcher) Apply(e store.Event)  { note(w.log, e) }
func (w floatWatcher) Reset(store.Snapshot)  {}
func (w floatWatcher) Apply(e store.Event)   { note(w.log, e) }
func (w anyWatcher) Reset(store.Snapshot)    {}
func (w anyWatcher) Apply(e store.Event)     { note(w.log, e) }
func (w floatsWatcher) Reset(store.Snapshot) {}
func (w floatsWatcher) Apply(e store.Event)  { note(w.log, e) }

// A locked write leaves out of its events exactly the registered watchers
// == to its self, whatever their type: the store tells them apart without
// == where that is exact, and must agree with == everywhere, NaN (never
// == to itself) included.
func TestALockedWriteLeavesOutTheWatcherEqualToSelf(t *testing.T) {
	ctx := context.Background()
	var log []string
	other := []string{}
	nan := math.NaN()
	for _, tc := range []struct {
		name    string
		reg     store.Watcher
		self    store.Watcher
		leftOut bool
	}{
		{"the same pointer", &addressWatcher{}, nil, true}, // self: the very value registered, below
		{"another pointer", &addressWatcher{}, &addressWatcher{}, false},
		{"one pointer field, equal", loggedWatcher{&log}, loggedWatcher{&log}, true},
		{"one pointer field, another", loggedWatcher{&log}, loggedWatcher{&other}, false},
		{"no self", loggedWatcher{&log}, nil, false},
		{"boxed, an equal copy", numberWatcher{&log, 1}, numberWatcher{&log, 1}, true},
		{"boxed, another", numberWatcher{&log, 1}, numberWatcher{&log, 2}, false},
		{"another type", numberWatcher{&log, 1}, loggedWatcher{&log}, false},
		{"a float, equal", floatWatcher{&log, 1.5}, floatWatcher{&log, 1.5}, true},
		{"a NaN", floatWatcher{&log, nan}, nil, false},
		{"an interface holding NaN", anyWatcher{&log, nan}, nil, false},
		{"an array holding NaN", floatsWatcher{&log, [2]float64{1, nan}}, nil, false},
		{"an array of floats, equal", floatsWatcher{&log, [2]float64{1, 2}}, floatsWatcher{&log, [2]float64{1, 2}}, true},
		{"an interface holding an int", anyWatcher{&log, 7}, nil, true},
	} {
		log = nil
		self := tc.self
		if self == nil && tc.name != "no self" {
			self = tc.reg // the very value registered: equal words
		}
		st := memory.New()
		if err := st.Watch(ctx, tc.reg); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		c, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: "c", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}})
		if err != nil {
			t.Fatal(err)
		}
		log = nil
		a := netip.MustParseAddr("10.0.0.1")
		st.Mutex().Lock()
		_, _, err = st.CreateAddressLocked(a, checked(ipaddress.ParentRef{Resource: "services", Name: "x"}), store.Fence{CIDR: c.Name, Revision: c.Revision}, self)
		if err == nil {
			_, err = st.DeleteAddressLocked(a, self)
		}
		st.Mutex().Unlock()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		told := len(log)
		if w, ok := tc.reg.(*addressWatcher); ok {
			told = len(w.changes)
		}
		if want := map[bool]int{true: 0, false: 2}[tc.leftOut]; told != want {
			t.Errorf("%s: the registered watcher was told %d writes, want %d (== says left out: %v)", tc.name, told, want, tc.leftOut)
		}
	}
}

// checked is the owner p as store.Locked takes it; p must be valid.
func checked(p ipaddress.ParentRef) *ipaddress.ValidParentRef {
	v, err := ipaddress.CheckParentRef(p)
	if err != nil {
		panic(err)
	}
	return &v
}

// CreatePairLocked writes a dual-stack pair in one revision, tells every
// watcher but self of both records, and touches the CIDR of a touching
// fence; each refusal (either address held, of the wrong family or
// unstorable, no owner, either fence stale, the store closed) stores
// neither record, gives no revision and tells no one.
func TestCreatePairLockedWritesBothInOneRevisionOrNeither(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	self, other := &addressWatcher{}, &addressWatcher{}
	for _, w := range []store.Watcher{self, plainWatcher{other}} {
		if err := st.Watch(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	cidr, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: "c", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("fd00::/64")}})
	if err != nil {
		t.Fatal(err)
	}
	owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "a"}
	held4, held6 := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::1")
	if _, err := st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: held4, Parent: owner}, {Addr: held6, Parent: owner}}); err != nil {
		t.Fatal(err)
	}
	free4, free6 := netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("fd00::2")
	fence := store.Fence{CIDR: cidr.Name, Revision: cidr.Revision}
	stale := store.Fence{CIDR: cidr.Name, Revision: cidr.Revision - 1}
	var exists *store.AddressExistsError
	var fenced *store.FencedError
	var fe *ipaddress.FieldError
	for _, tc := range []struct {
		name   string
		v4, v6 netip.Addr
		f4, f6 store.Fence
		owner  *ipaddress.ValidParentRef
		ok     func(error) bool
	}{
		{"IPv4 held", held4, free6, fence, fence, checked(owner), func(err error) bool { return errors.As(err, &exists) && exists.Addr == held4 }},
		{"IPv6 held", free4, held6, fence, fence, checked(owner), func(err error) bool { return errors.As(err, &exists) && exists.Addr == held6 }},
		{"IPv4 stale fence", free4, free6, stale, fence, checked(owner), func(err error) bool { return errors.As(err, &fenced) && fenced.Fence == stale }},
		{"IPv6 stale fence", free4, free6, fence, stale, checked(owner), func(err error) bool { return errors.As(err, &fenced) && fenced.Fence == stale }},
		{"families swapped", free6, free4, fence, fence, checked(owner), func(err error) bool { return errors.As(err, &fe) && fe.Field == "address" }},
		{"two IPv4", free4, netip.MustParseAddr("10.0.0.3"), fence, fence, checked(owner), func(err error) bool { return errors.As(err, &fe) && fe.Field == "address" }},
		{"unstorable", free4, netip.MustParseAddr("fd00::2%eth0"), fence, fence, checked(owner), func(err error) bool { return errors.Is(err, ipaddress.ErrInvalid) }},
		{"no owner", free4, free6, fence, fence, nil, func(err error) bool { return errors.As(err, &fe) && fe.Field == "spec.parentRef" }},
	} {
		st.Mutex().Lock()
		_, _, err := st.CreatePairLocked(tc.v4, tc.v6, tc.owner, tc.f4, tc.f6, self)
		st.Mutex().Unlock()
		if !tc.ok(err) {
			t.Errorf("%s: CreatePairLocked(%s, %s) = %v", tc.name, tc.v4, tc.v6, err)
		}
	}
	for _, a := range []netip.Addr{free4, free6} {
		if _, err := st.GetAddress(ctx, a); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("a refused pair stored %s: %v", a, err)
		}
	}
	// The pair, at the next revision (the refusals took none), from a
	// Terminating CIDR's touching fence too, as a live CIDR inside a
	// Terminating one gives it.
	dying, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: "dying", Prefixes: []netip.Prefix{netip.MustParsePrefix("fd00::/120")}})
	if err != nil {
		t.Fatal(err)
	}
	dying.Terminating = true
	if dying, err = st.UpdateCIDR(ctx, dying); err != nil {
		t.Fatal(err)
	}
	touch := store.Fence{CIDR: dying.Name, Revision: dying.Revision, Touch: true}
	st.Mutex().Lock()
	rev, created, err := st.CreatePairLocked(free4, free6, checked(owner), fence, touch, self)
	st.Mutex().Unlock()
	if err != nil || rev != dying.Revision+1 || created.IsZero() {
		t.Fatalf("CreatePairLocked = %d, %v, %v; want revision %d", rev, created, err, dying.Revision+1)
	}
	for _, a := range []netip.Addr{free4, free6} {
		if r, err := st.GetAddress(ctx, a); err != nil || r.Revision != rev || r.Parent != owner || !r.Created.Equal(created) {
			t.Errorf("GetAddress(%s) = %+v, %v; want %s's record at revision %d", a, r, err, owner, rev)
		}
	}
	if c, err := st.GetCIDR(ctx, dying.Name); err != nil || c.Revision != rev {
		t.Errorf("the touched CIDR is at revision %d (%v), want the pair's %d", c.Revision, err, rev)
	}
	// self is told of nothing past the first two records; the other
	// watcher of both records of the pair, whole.
	if want := []string{fmt.Sprint(store.AddressPut, " ", held4, " 2"), fmt.Sprint(store.AddressPut, " ", held6, " 2")}; !slices.Equal(self.changes, want) {
		t.Errorf("self told %q, want %q", self.changes, want)
	}
	var puts []string
	for _, e := range other.applied {
		if e.Kind == store.AddressPut && e.Revision == rev {
			puts = append(puts, fmt.Sprint(e.Address.Addr, " ", e.Address.Parent, " ", e.Address.Revision))
		}
	}
	if want := []string{fmt.Sprint(free4, " ", owner, " ", rev), fmt.Sprint(free6, " ", owner, " ", rev)}; !slices.Equal(puts, want) {
		t.Errorf("the other watcher was told %q, want %q", puts, want)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st.Mutex().Lock()
	_, _, err = st.CreatePairLocked(netip.MustParseAddr("10.0.0.9"), netip.MustParseAddr("fd00::9"), checked(owner), fence, fence, nil)
	st.Mutex().Unlock()
	if !errors.Is(err, store.ErrClosed) {
		t.Errorf("CreatePairLocked after Close = %v, want ErrClosed", err)
	}
}
