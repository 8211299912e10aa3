package main

// This file checks that the allocator's public API behaves the same over
// every store: store/memory (the store.Locked fast path), store/bolt and
// store/etcd (the general path, fenced creates and a watch-driven index).
// It lives in this module because it is the one that requires all three.

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go4.org/netipx"
	"pgregory.net/rapid"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/bolt"
	etcdstore "github.com/netipam/netipam/store/etcd"
	"github.com/netipam/netipam/store/memory"
)

// agreePrefixes are the prefixes the test draws CIDRs from: overlapping and
// identical ones, both families, sizes with and without a reserved lower
// band (KEP-3070: /24, /26, /120 have one; /28, /30, /124 do not), prefixes
// that offer one address or none (/30, /31, /32, /126, /127, /128), and one
// large prefix per family that is indexed sparsely.
var agreePrefixes = []string{
	"10.0.0.0/28", "10.0.0.0/27", "10.0.0.16/28", "10.0.0.0/30", "10.0.0.4/31",
	"10.0.0.9/32", "10.0.0.0/26", "10.0.0.0/24", "10.0.0.0/16", "10.0.0.0/8",
	"0.0.0.0/0", "255.255.255.252/30",
	"fd00::/124", "fd00::/123", "fd00::10/124", "fd00::/126", "fd00::/127",
	"fd00::9/128", "fd00::/120", "fd00::/64", "::/64", "::/0",
}

// agreeExcluded is given to every allocator (WithExcluded).
var agreeExcluded = []netipx.IPRange{
	netipx.IPRangeFrom(netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("10.0.0.6")),
	netipx.IPRangeFrom(netip.MustParseAddr("fd00::3"), netip.MustParseAddr("fd00::4")),
}

var agreeNames = []string{"a", "b", "c", cidrset.DefaultName}

// agreeOwners holds valid owners and two invalid ones.
var agreeOwners = []ipaddress.ParentRef{
	{Resource: "services", Namespace: "default", Name: "o1"},
	{Resource: "services", Namespace: "default", Name: "o2"},
	{Resource: "services", Namespace: "other", Name: "o1"},
	{Group: "example.com", Resource: "gateways", Name: "g1"},
	{Resource: "services", Name: "o"},
	{},
	{Resource: "services", Namespace: "default", Name: "Not_Valid"},
}

// agreeAddrs returns the addresses static allocations draw from: the
// network address, the first hosts, the last host and the broadcast
// address of every prefix, the address just past it, and some that no
// store may hold (zero, IPv4-mapped, zoned).
func agreeAddrs() []netip.Addr {
	seen := map[netip.Addr]bool{}
	var out []netip.Addr
	add := func(a netip.Addr) {
		if a.IsValid() && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	for _, s := range agreePrefixes {
		p := netip.MustParsePrefix(s)
		r := netipx.RangeOfPrefix(p)
		add(r.From())
		add(r.From().Next())
		add(r.From().Next().Next())
		add(r.To().Prev())
		add(r.To())
		add(r.To().Next())
	}
	add(netip.MustParseAddr("10.0.0.5")) // excluded
	add(netip.MustParseAddr("fd00::4"))  // excluded
	add(netip.MustParseAddr("192.168.0.1"))
	out = append(out,
		netip.Addr{},
		netip.MustParseAddr("::ffff:10.0.0.1"),
		netip.MustParseAddr("fe80::1%eth0"),
	)
	return out
}

// agreeBackend is one allocator over one kind of store, with what it takes
// to know that its index has caught up with its store.
type agreeBackend struct {
	name string
	a    *allocator.Allocator
	// revision returns the store's latest revision, or 0 when the index
	// never lags the store (memory).
	revision func(context.Context) (int64, error)
	// eventual is set for a backend whose reads are compared only once
	// its index has caught up: the test does not control how far behind
	// its watch is, so what a lag would show differs from run to run.
	eventual bool
	close    func()
}

// synced waits until b's index reflects every write made so far.
func (b agreeBackend) synced(ctx context.Context) error {
	if b.revision == nil {
		return nil
	}
	rev, err := b.revision(ctx)
	if err != nil {
		return err
	}
	return b.a.WaitRevision(ctx, rev)
}

// laggingStore is a store.Store whose watch delivers every change lag after
// the write, in order: what etcd's watch may do under load (it promises
// the order of events, not their promptness). Everything else, the first
// snapshot included, is the store's own.
type laggingStore struct {
	store.Store
	lag time.Duration
}

func (s laggingStore) Watch(ctx context.Context, w store.Watcher) error {
	lw := &laggingWatcher{w: w, lag: s.lag, q: make(chan laggedEvent, 1<<12)}
	if err := s.Store.Watch(ctx, lw); err != nil {
		return err
	}
	go lw.run(ctx)
	return nil
}

type laggedEvent struct {
	at    time.Time
	reset *store.Snapshot
	e     store.Event
}

type laggingWatcher struct {
	w       store.Watcher
	lag     time.Duration
	started bool // the first Reset went through
	q       chan laggedEvent
}

func (l *laggingWatcher) Reset(s store.Snapshot) {
	if !l.started { // during Watch: delivered at once, as Watch promises
		l.started = true
		l.w.Reset(s)
		return
	}
	l.q <- laggedEvent{at: time.Now(), reset: &s}
}

func (l *laggingWatcher) Apply(e store.Event) { l.q <- laggedEvent{at: time.Now(), e: e} }

func (l *laggingWatcher) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-l.q:
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(ev.at.Add(l.lag))):
			}
			if ev.reset != nil {
				l.w.Reset(*ev.reset)
			} else {
				l.w.Apply(ev.e)
			}
		}
	}
}

// agreeEtcd is an embedded etcd shared by every check of a test; each check
// uses a key prefix of its own. Each etcd backend has an etcd of its own,
// so that the revision etcd reports is that of the backend's last write.
type agreeEtcd struct {
	cli  *clientv3.Client
	next int
}

func newAgreeEtcd(t *testing.T) *agreeEtcd {
	t.Helper()
	ep := startEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return &agreeEtcd{cli: cli}
}

// newAgreeBackends returns one allocator per store, all configured alike,
// over empty stores.
func newAgreeBackends(t testing.TB, ctx context.Context, etcds [2]*agreeEtcd, opts ...allocator.Option) []agreeBackend {
	opts = append([]allocator.Option{
		allocator.WithStrategy(allocator.Sequential()),
		allocator.WithExcluded(agreeExcluded...),
	}, opts...)
	var out []agreeBackend
	add := func(name string, st interface{ Close() error }, a *allocator.Allocator, rev func(context.Context) (int64, error)) {
		out = append(out, agreeBackend{name: name, a: a, revision: rev, close: func() {
			a.Close()
			st.Close()
		}})
	}

	ms := memory.New()
	ma, err := allocator.New(ctx, ms, opts...)
	if err != nil {
		t.Fatal(err)
	}
	add("memory", ms, ma, nil)

	bs, err := bolt.Open(filepath.Join(t.TempDir(), "ipam.db"))
	if err != nil {
		t.Fatal(err)
	}
	ba, err := allocator.New(ctx, bs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	add("bolt", bs, ba, bs.Revision)

	for i, lag := range []time.Duration{0, agreeLag} {
		e := etcds[i]
		e.next++
		prefix := fmt.Sprintf("/agree-%d", e.next)
		es, err := etcdstore.New(e.cli, etcdstore.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		var st store.Store = es
		name := "etcd"
		if lag > 0 {
			st, name = laggingStore{Store: es, lag: lag}, fmt.Sprintf("etcd, watch %v behind", lag)
		}
		ea, err := allocator.New(ctx, st, opts...)
		if err != nil {
			t.Fatal(err)
		}
		add(name, es, ea, func(ctx context.Context) (int64, error) {
			// Every write of the store changes a key under its prefix, and
			// nothing else writes to this etcd while a check runs: the
			// header's revision is that of the store's last write, which
			// the allocator's watch delivers.
			resp, err := e.cli.Get(ctx, prefix, clientv3.WithCountOnly())
			if err != nil {
				return 0, err
			}
			return resp.Header.Revision, nil
		})
		out[len(out)-1].eventual = lag == 0
	}
	return out
}

// agreeLag is how far behind the lagging etcd backend's watch is: well
// past what one call takes, so that a call returning before its allocator's
// index shows its effect is seen to, every time.
const agreeLag = 50 * time.Millisecond

// describeErr renders what the API promises about err: the sentinels it
// matches, the typed errors it unwraps to with their fields, and the text
// where the allocator, not the store, words it.
func describeErr(err error) string {
	if err == nil {
		return "ok"
	}
	sentinels := []struct {
		name string
		err  error
	}{
		{"Full", allocator.ErrFull}, {"Allocated", allocator.ErrAllocated},
		{"NotInRange", allocator.ErrNotInRange}, {"Mismatch", allocator.ErrMismatch},
		{"Terminating", allocator.ErrTerminating}, {"Excluded", allocator.ErrExcluded},
		{"NotFound", allocator.ErrNotFound}, {"Exists", allocator.ErrExists},
		{"Conflict", allocator.ErrConflict}, {"Invalid", allocator.ErrInvalid},
		{"DeletionBlocked", allocator.ErrDeletionBlocked},
		{"DefaultMismatch", allocator.ErrDefaultMismatch}, {"Closed", allocator.ErrClosed},
		{"Canceled", context.Canceled}, {"DeadlineExceeded", context.DeadlineExceeded},
	}
	var parts []string
	ours := false // worded by the allocator (or SPEC)
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			parts = append(parts, s.name)
			switch s.err {
			case allocator.ErrNotFound, allocator.ErrExists, allocator.ErrConflict:
			default:
				ours = true
			}
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "unclassified")
		ours = true
	}
	var re *allocator.RangeError
	if errors.As(err, &re) {
		parts = append(parts, fmt.Sprintf("RangeError{%s %v %v}", re.Addr, re.Valid, re.Terminating))
	}
	var be *allocator.DeletionBlockedError
	if errors.As(err, &be) {
		parts = append(parts, fmt.Sprintf("DeletionBlocked{%s %v %v}", be.CIDR, be.Blocking, be.More))
	}
	var fe *ipaddress.FieldError
	if errors.As(err, &fe) {
		parts = append(parts, fmt.Sprintf("FieldError%+v", *fe))
	}
	var nf *allocator.NotFoundError
	if errors.As(err, &nf) {
		parts = append(parts, fmt.Sprintf("NotFoundError%+v", *nf))
	}
	if ours {
		parts = append(parts, fmt.Sprintf("%q", err.Error()))
	}
	return strings.Join(parts, " ")
}

func describeRec(r ipaddress.IPAddress) string {
	if !r.Addr.IsValid() && r.Parent == (ipaddress.ParentRef{}) {
		return "-"
	}
	return fmt.Sprintf("%s@%s", r.Addr, describeOwner(r.Parent))
}

func describeOwner(o ipaddress.ParentRef) string {
	return fmt.Sprintf("%s/%s/%s/%s", o.Group, o.Resource, o.Namespace, o.Name)
}

func describeRecs(recs []ipaddress.IPAddress) string {
	recs = slices.Clone(recs)
	slices.SortFunc(recs, func(x, y ipaddress.IPAddress) int { return x.Addr.Compare(y.Addr) })
	s := make([]string, len(recs))
	for i, r := range recs {
		s[i] = describeRec(r)
	}
	return "[" + strings.Join(s, " ") + "]"
}

func describeCIDR(c cidrset.CIDR) string {
	return fmt.Sprintf("%s%v terminating=%v ready=%+v", c.Name, c.Prefixes, c.Terminating, c.Ready())
}

// agreeState renders everything the public API shows of b's state.
func agreeState(ctx context.Context, b agreeBackend) string {
	a := b.a
	var sb strings.Builder
	for _, c := range a.CIDRs() {
		fmt.Fprintf(&sb, "cidr %s\n", describeCIDR(c))
		u, err := a.Usage(c.Name)
		fmt.Fprintf(&sb, "  usage %+v %s\n", u, describeErr(err))
		g, err := a.GetCIDR(c.Name)
		fmt.Fprintf(&sb, "  get %s %s\n", describeCIDR(g), describeErr(err))
		d, err := a.DryRun().DeleteCIDR(ctx, c.Name)
		fmt.Fprintf(&sb, "  dry-run delete remove=%v blocking=%v more=%v %s\n", d.Remove, d.Blocking, d.More, describeErr(err))
	}
	for _, f := range []ipaddress.Family{ipaddress.IPv4, ipaddress.IPv6} {
		fmt.Fprintf(&sb, "family %v usage %+v\n", f, a.FamilyUsage(f))
		next, err := a.DryRun().AllocateNext(ctx, f, agreeOwners[0])
		fmt.Fprintf(&sb, "family %v next %v %s\n", f, next, describeErr(err))
	}
	recs, err := a.Store().ListAddresses(ctx)
	fmt.Fprintf(&sb, "records %s %s\n", describeRecs(recs), describeErr(err))
	for _, o := range agreeOwners {
		recs, err := a.AddressesOf(ctx, o)
		fmt.Fprintf(&sb, "owner %s %s %s\n", describeOwner(o), describeRecs(recs), describeErr(err))
	}
	return sb.String()
}

// agreeStep runs one operation on every backend and fails unless every
// backend has the same outcome, and then the same state.
func agreeStep(rt *rapid.T, ctx context.Context, bs []agreeBackend, what string, op func(a *allocator.Allocator) string) {
	outs := make([]string, len(bs))
	for i, b := range bs {
		outs[i] = op(b.a)
	}
	for i := range bs[1:] {
		if outs[i+1] != outs[0] {
			rt.Fatalf("%s: outcomes differ:\n%s", what, sideBySide(bs, outs))
		}
	}
	rt.Logf("%s: %s", what, outs[0])
	// What a call did, its allocator shows when it returns, whatever the
	// store: memory and bolt apply every write to the index before the
	// writer returns, so a lagging watch must be waited for by the call.
	states := make([]string, len(bs))
	for i, b := range bs {
		states[i] = "(compared once its index caught up)"
		if !b.eventual {
			states[i] = agreeState(ctx, b)
		}
	}
	for i := range bs[1:] {
		if !bs[i+1].eventual && states[i+1] != states[0] {
			rt.Fatalf("right after %s: states differ:\n%s", what, sideBySide(bs, states))
		}
	}
	for i, b := range bs {
		if err := b.synced(ctx); err != nil {
			rt.Fatalf("%s: syncing %s: %v", what, b.name, err)
		}
		states[i] = agreeState(ctx, b)
	}
	for i := range bs[1:] {
		if states[i+1] != states[0] {
			rt.Fatalf("after %s, once every index caught up: states differ:\n%s", what, sideBySide(bs, states))
		}
	}
}

func sideBySide(bs []agreeBackend, outs []string) string {
	var sb strings.Builder
	for i, b := range bs {
		fmt.Fprintf(&sb, "--- %s:\n%s\n", b.name, outs[i])
	}
	return sb.String()
}

// drawPrefixes draws the prefixes of a create or update: mostly one or one
// per family, sometimes what validation must refuse.
func drawPrefixes(rt *rapid.T, label string) []netip.Prefix {
	pick := func(l string) netip.Prefix {
		return netip.MustParsePrefix(rapid.SampledFrom(agreePrefixes).Draw(rt, l))
	}
	switch rapid.IntRange(0, 15).Draw(rt, label+"-shape") {
	case 0:
		return nil
	case 1: // two prefixes, maybe of one family
		return []netip.Prefix{pick(label + "-0"), pick(label + "-1")}
	case 2:
		return []netip.Prefix{pick(label + "-0"), pick(label + "-1"), pick(label + "-2")}
	case 3: // invalid ones
		return []netip.Prefix{rapid.SampledFrom([]netip.Prefix{
			{},
			netip.PrefixFrom(netip.MustParseAddr("10.0.0.1"), 24),
			netip.MustParsePrefix("::ffff:10.0.0.0/120"),
		}).Draw(rt, label+"-bad")}
	case 4, 5, 6, 7: // dual-stack
		v4 := pick(label + "-4")
		for !v4.Addr().Is4() {
			v4 = pick(label + "-4")
		}
		v6 := pick(label + "-6")
		for !v6.Addr().Is6() {
			v6 = pick(label + "-6")
		}
		if rapid.Bool().Draw(rt, label+"-6first") {
			return []netip.Prefix{v6, v4}
		}
		return []netip.Prefix{v4, v6}
	}
	return []netip.Prefix{pick(label + "-0")}
}

func TestAllocatorBehavesAlikeOverEveryStore(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	etcds := [2]*agreeEtcd{newAgreeEtcd(t), newAgreeEtcd(t)}
	addrs := agreeAddrs()
	names := append(slices.Concat(agreeNames, agreeNames, agreeNames), "", "Bad", "x/y")
	families := []ipaddress.Family{ipaddress.IPv4, ipaddress.IPv6, ipaddress.IPv4, ipaddress.IPv6, 0}
	rapid.Check(t, func(rt *rapid.T) {
		// A bound for a hang, not a speed: a hundred steps over two etcds
		// take seconds, and on a loaded machine under -race several times
		// more.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		bs := newAgreeBackends(t, ctx, etcds)
		defer func() {
			for _, b := range bs {
				b.close()
			}
		}()
		rt.Repeat(map[string]func(*rapid.T){
			"createCIDR": func(rt *rapid.T) {
				name := rapid.SampledFrom(names).Draw(rt, "name")
				ps := drawPrefixes(rt, "prefixes")
				agreeStep(rt, ctx, bs, fmt.Sprintf("CreateCIDR(%q, %v)", name, ps), func(a *allocator.Allocator) string {
					c, err := a.CreateCIDR(ctx, name, ps...)
					return fmt.Sprintf("%s %s", describeCIDR(c), describeErr(err))
				})
			},
			"updateCIDR": func(rt *rapid.T) {
				name := rapid.SampledFrom(names).Draw(rt, "name")
				ps := drawPrefixes(rt, "prefixes")
				agreeStep(rt, ctx, bs, fmt.Sprintf("UpdateCIDR(%q, %v)", name, ps), func(a *allocator.Allocator) string {
					c, err := a.UpdateCIDR(ctx, name, ps...)
					return fmt.Sprintf("%s %s", describeCIDR(c), describeErr(err))
				})
			},
			"ensureDefault": func(rt *rapid.T) {
				ps := drawPrefixes(rt, "prefixes")
				agreeStep(rt, ctx, bs, fmt.Sprintf("EnsureDefault(%v)", ps), func(a *allocator.Allocator) string {
					c, err := a.EnsureDefault(ctx, ps...)
					return fmt.Sprintf("%s %s", describeCIDR(c), describeErr(err))
				})
			},
			"deleteCIDR": func(rt *rapid.T) {
				name := rapid.SampledFrom(names).Draw(rt, "name")
				agreeStep(rt, ctx, bs, fmt.Sprintf("DeleteCIDR(%q)", name), func(a *allocator.Allocator) string {
					return describeErr(a.DeleteCIDR(ctx, name))
				})
			},
			// AllocateNext, or EnsureNext (the same arguments and answer).
			"allocateNext": func(rt *rapid.T) {
				f := rapid.SampledFrom(families).Draw(rt, "family")
				o := rapid.SampledFrom(agreeOwners).Draw(rt, "owner")
				name, next := "AllocateNext", (*allocator.Allocator).AllocateNext
				if rapid.Bool().Draw(rt, "ensure") {
					name, next = "EnsureNext", (*allocator.Allocator).EnsureNext
				}
				agreeStep(rt, ctx, bs, fmt.Sprintf("%s(%v, %s)", name, f, describeOwner(o)), func(a *allocator.Allocator) string {
					r, err := next(a, ctx, f, o)
					return fmt.Sprintf("%s %s", describeRec(r), describeErr(err))
				})
			},
			"dryRunEnsureNext": func(rt *rapid.T) {
				f := rapid.SampledFrom(families).Draw(rt, "family")
				o := rapid.SampledFrom(agreeOwners).Draw(rt, "owner")
				agreeStep(rt, ctx, bs, fmt.Sprintf("DryRun.EnsureNext(%v, %s)", f, describeOwner(o)), func(a *allocator.Allocator) string {
					addr, err := a.DryRun().EnsureNext(ctx, f, o)
					return fmt.Sprintf("%v %s", addr, describeErr(err))
				})
			},
			// Allocate, or EnsureAllocated (the same arguments and answer).
			"allocate": func(rt *rapid.T) {
				addr := rapid.SampledFrom(addrs).Draw(rt, "addr")
				o := rapid.SampledFrom(agreeOwners).Draw(rt, "owner")
				name, allocate := "Allocate", (*allocator.Allocator).Allocate
				if rapid.Bool().Draw(rt, "ensure") {
					name, allocate = "EnsureAllocated", (*allocator.Allocator).EnsureAllocated
				}
				agreeStep(rt, ctx, bs, fmt.Sprintf("%s(%v, %s)", name, addr, describeOwner(o)), func(a *allocator.Allocator) string {
					r, err := allocate(a, ctx, addr, o)
					return fmt.Sprintf("%s %s", describeRec(r), describeErr(err))
				})
			},
			"dryRunAllocate": func(rt *rapid.T) {
				addr := rapid.SampledFrom(addrs).Draw(rt, "addr")
				o := rapid.SampledFrom(agreeOwners).Draw(rt, "owner")
				agreeStep(rt, ctx, bs, fmt.Sprintf("DryRun.Allocate(%v, %s)", addr, describeOwner(o)), func(a *allocator.Allocator) string {
					return describeErr(a.DryRun().Allocate(ctx, addr, o))
				})
			},
			"allocateDualStack": func(rt *rapid.T) {
				var v4, v6 netip.Addr
				if rapid.Bool().Draw(rt, "static4") {
					v4 = rapid.SampledFrom(addrs).Draw(rt, "v4")
				}
				if rapid.Bool().Draw(rt, "static6") {
					v6 = rapid.SampledFrom(addrs).Draw(rt, "v6")
				}
				o := rapid.SampledFrom(agreeOwners).Draw(rt, "owner")
				// With no static address, EnsureDualStack may stand in.
				if !v4.IsValid() && !v6.IsValid() && rapid.Bool().Draw(rt, "ensure") {
					agreeStep(rt, ctx, bs, fmt.Sprintf("EnsureDualStack(%s)", describeOwner(o)), func(a *allocator.Allocator) string {
						r4, r6, err := a.EnsureDualStack(ctx, o)
						return fmt.Sprintf("%s %s %s", describeRec(r4), describeRec(r6), describeErr(err))
					})
					return
				}
				agreeStep(rt, ctx, bs, fmt.Sprintf("AllocateDualStack(%s, %v, %v)", describeOwner(o), v4, v6), func(a *allocator.Allocator) string {
					r4, r6, err := a.AllocateDualStack(ctx, o, v4, v6)
					return fmt.Sprintf("%s %s %s", describeRec(r4), describeRec(r6), describeErr(err))
				})
			},
			"release": func(rt *rapid.T) {
				addr := rapid.SampledFrom(addrs).Draw(rt, "addr")
				agreeStep(rt, ctx, bs, fmt.Sprintf("Release(%v)", addr), func(a *allocator.Allocator) string {
					return describeErr(a.Release(ctx, addr))
				})
			},
			"releaseHeld": func(rt *rapid.T) {
				recs, err := bs[0].a.Store().ListAddresses(ctx)
				if err != nil {
					rt.Fatal(err)
				}
				if len(recs) == 0 {
					rt.Skip("nothing held")
				}
				addr := rapid.SampledFrom(recs).Draw(rt, "rec").Addr
				agreeStep(rt, ctx, bs, fmt.Sprintf("Release(%v)", addr), func(a *allocator.Allocator) string {
					return describeErr(a.Release(ctx, addr))
				})
			},
			"releaseOwner": func(rt *rapid.T) {
				o := rapid.SampledFrom(agreeOwners).Draw(rt, "owner")
				agreeStep(rt, ctx, bs, fmt.Sprintf("ReleaseOwner(%s)", describeOwner(o)), func(a *allocator.Allocator) string {
					got, err := a.ReleaseOwner(ctx, o)
					slices.SortFunc(got, netip.Addr.Compare)
					return fmt.Sprintf("%v %s", got, describeErr(err))
				})
			},
			"get": func(rt *rapid.T) {
				addr := rapid.SampledFrom(addrs).Draw(rt, "addr")
				agreeStep(rt, ctx, bs, fmt.Sprintf("Get(%v)", addr), func(a *allocator.Allocator) string {
					r, err := a.Get(ctx, addr)
					return fmt.Sprintf("%s %s", describeRec(r), describeErr(err))
				})
			},
			"usage": func(rt *rapid.T) {
				name := rapid.SampledFrom(names).Draw(rt, "name")
				agreeStep(rt, ctx, bs, fmt.Sprintf("Usage(%q)", name), func(a *allocator.Allocator) string {
					u, err := a.Usage(name)
					return fmt.Sprintf("%+v %s", u, describeErr(err))
				})
			},
		})
	})
}

// A CIDR that a call removed (DeleteCIDR of an unblocked CIDR, the Release
// of the last address blocking it, the creation of a CIDR covering it) is
// gone from the allocator's view when the call returns, over every store:
// DeleteCIDR said nil, "the CIDR is gone". Over a store whose watch lags,
// the allocator must wait for the removal as CreateCIDR, UpdateCIDR and
// Release wait for their own writes.
func TestCIDRRemovalIsVisibleWhenTheCallReturns(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	etcds := [2]*agreeEtcd{newAgreeEtcd(t), newAgreeEtcd(t)}
	p24, p23 := netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("10.0.0.0/23")
	addr := netip.MustParseAddr("10.0.0.1")
	owner := agreeOwners[0]
	for _, tc := range []struct {
		name string
		// remove leaves CIDR "a" (10.0.0.0/24) removed by its last call,
		// which returns nil.
		remove func(ctx context.Context, a *allocator.Allocator) error
	}{
		{"DeleteCIDR", func(ctx context.Context, a *allocator.Allocator) error {
			return a.DeleteCIDR(ctx, "a")
		}},
		{"Release", func(ctx context.Context, a *allocator.Allocator) error {
			if _, err := a.Allocate(ctx, addr, owner); err != nil {
				return err
			}
			if err := a.DeleteCIDR(ctx, "a"); !errors.Is(err, allocator.ErrDeletionBlocked) {
				return fmt.Errorf("DeleteCIDR: %v, want it blocked", err)
			}
			return a.Release(ctx, addr)
		}},
		{"CreateCIDR", func(ctx context.Context, a *allocator.Allocator) error {
			if _, err := a.Allocate(ctx, addr, owner); err != nil {
				return err
			}
			if err := a.DeleteCIDR(ctx, "a"); !errors.Is(err, allocator.ErrDeletionBlocked) {
				return fmt.Errorf("DeleteCIDR: %v, want it blocked", err)
			}
			_, err := a.CreateCIDR(ctx, "b", p23)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			bs := newAgreeBackends(t, ctx, etcds)
			defer func() {
				for _, b := range bs {
					b.close()
				}
			}()
			var views []string
			for _, b := range bs {
				if _, err := b.a.CreateCIDR(ctx, "a", p24); err != nil {
					t.Fatalf("%s: %v", b.name, err)
				}
				if err := tc.remove(ctx, b.a); err != nil {
					t.Fatalf("%s: %v", b.name, err)
				}
				if b.eventual {
					views = append(views, "(not compared: how far its watch is behind varies)")
					continue
				}
				// Right after the call: what the allocator shows of "a".
				var sb strings.Builder
				for _, c := range b.a.CIDRs() {
					fmt.Fprintf(&sb, "cidr %s\n", describeCIDR(c))
				}
				_, err := b.a.GetCIDR("a")
				fmt.Fprintf(&sb, "GetCIDR(a): %s\n", describeErr(err))
				_, err = b.a.Allocate(ctx, netip.MustParseAddr("10.0.0.200"), owner)
				fmt.Fprintf(&sb, "Allocate(10.0.0.200): %s\n", describeErr(err))
				_, err = b.a.AllocateNext(ctx, ipaddress.IPv4, owner)
				fmt.Fprintf(&sb, "AllocateNext(IPv4): %s\n", describeErr(err))
				views = append(views, sb.String())
			}
			for i := range bs {
				if !bs[i].eventual && views[i] != views[0] {
					t.Fatalf("right after %s removed CIDR a, the allocators differ:\n%s", tc.name, sideBySide(bs, views))
				}
			}
		})
	}
}
