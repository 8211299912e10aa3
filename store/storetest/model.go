package storetest

import (
	"errors"
	"fmt"
	"iter"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// model is what a store must hold after a sequence of calls, as the
// contract in package store defines it. Revisions are the store's own: the
// model keeps the ones the store returned and checks they are used
// consistently, and that every write's is above all earlier ones.
type model struct {
	cidrs   map[string]cidrset.CIDR
	addrs   map[netip.Addr]ipaddress.IPAddress
	lastRev int64
}

// The pools the random calls draw from: few names, prefixes and addresses,
// so that calls collide, and now and then a value no store may keep.
var (
	modelNames    = []string{"a", "b", "c"}
	modelPrefixes = []netip.Prefix{pfx("10.0.0.0/24"), pfx("fd00::/64"), pfx("10.1.0.0/16")}
	modelAddrs    = []netip.Addr{ip("10.0.0.1"), ip("10.0.0.2"), ip("10.0.0.3"), ip("fd00::1"), ip("fd00::2"), ip("::")}
	modelOwners   = []ipaddress.ParentRef{owner("o1"), owner("o2"), owner("o3")}

	badNames  = []string{"", "a/b"}
	badPrefix = netip.Prefix{}
	// Each is what a careless key encoding maps onto a stored address.
	badAddrs = []netip.Addr{{}, ip("fd00::1%eth0"), ip("::ffff:10.0.0.1")}
)

func pickName(rng *rand.Rand) string {
	if rng.IntN(10) == 0 {
		return pick(rng, badNames)
	}
	return pick(rng, modelNames)
}

func pickPrefix(rng *rand.Rand) netip.Prefix {
	if rng.IntN(10) == 0 {
		return badPrefix
	}
	return pick(rng, modelPrefixes)
}

func pickAddr(rng *rand.Rand) netip.Addr {
	if rng.IntN(8) == 0 {
		return pick(rng, badAddrs)
	}
	return pick(rng, modelAddrs)
}

// testRandomCallsFollowAModel makes random calls, each with every outcome
// the contract allows for it, checks the store's answer against the model,
// and at the end that a watch started first saw the same history.
func testRandomCallsFollowAModel(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	var w recorder
	if err := s.Watch(ctx, &w); err != nil {
		t.Fatal(err)
	}
	m := &model{cidrs: map[string]cidrset.CIDR{}, addrs: map[netip.Addr]ipaddress.IPAddress{}}
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[string]int{}
	for step := range 1500 {
		did, got, want := m.step(t, s, rng)
		if !slices.Contains(want, got) {
			t.Fatalf("step %d: %s: %s, want %s", step, did, got, strings.Join(want, " or "))
		}
		seen[did[:strings.IndexByte(did, '(')]+": "+got]++
		if step%50 == 49 || step == 1499 {
			m.compare(t, s, fmt.Sprintf("after step %d (%s)", step, did))
		}
	}
	// A last write, so that the watch has delivered every change once it
	// delivered this one (a deletion of a CIDR returns no revision).
	last, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: ip("10.9.9.9"), Parent: owner("last")}})
	if err != nil {
		t.Fatal(err)
	}
	m.wrote(t, "the last write", last[0].Revision)
	m.addrs[last[0].Addr] = last[0]
	m.compareWatch(t, &w)
	t.Logf("outcomes: %v", seen)
}

// outcome names an error by the class the contract gives it.
func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ipaddress.ErrInvalid):
		return "invalid"
	case errors.Is(err, store.ErrFenced):
		return "fenced"
	case errors.Is(err, store.ErrExists):
		return "exists"
	case errors.Is(err, store.ErrConflict):
		return "conflict"
	case errors.Is(err, store.ErrNotFound):
		return "not found"
	}
	return "unexpected error: " + err.Error()
}

func pick[T any](rng *rand.Rand, from []T) T { return from[rng.IntN(len(from))] }

// revisionFor returns a revision to give with a call on an object now at
// cur (0 if it does not exist): its own most of the time, else a stale,
// future, zero or negative one.
func (m *model) revisionFor(rng *rand.Rand, cur int64) int64 {
	switch rng.IntN(12) {
	case 0:
		return max(cur-1, 1)
	case 1:
		return m.lastRev + 1
	case 2:
		return 0
	case 3:
		return -1
	}
	return cur
}

func (m *model) fences(rng *rand.Rand) []store.Fence {
	var fs []store.Fence
	for range max(0, rng.IntN(5)-2) {
		name := pick(rng, modelNames)
		fs = append(fs, store.Fence{CIDR: name, Revision: m.revisionFor(rng, m.cidrs[name].Revision), Touch: rng.IntN(3) == 0})
	}
	return fs
}

// fenceFails reports whether a fence does not hold in the model: the CIDR
// is gone, or not at the fence's revision (for a touching fence: behind
// it), or the revision is one no CIDR ever has.
func (m *model) fenceFails(f store.Fence) bool {
	c, ok := m.cidrs[f.CIDR]
	if f.Touch {
		return !ok || c.Revision < f.Revision || f.Revision <= 0
	}
	return !ok || c.Revision != f.Revision || f.Revision <= 0
}

// wrote checks the revision of a write and makes it the latest.
func (m *model) wrote(t *testing.T, did string, rev int64) {
	t.Helper()
	if rev <= m.lastRev {
		t.Fatalf("%s: revision %d, not above the last write's %d", did, rev, m.lastRev)
	}
	m.lastRev = rev
}

// step makes one random call. It returns what it did, the store's outcome
// and the outcomes the contract allows; on success it has checked the
// results and updated the model.
func (m *model) step(t *testing.T, s store.Store, rng *rand.Rand) (did, got string, want []string) {
	ctx := ctxT(t)
	switch rng.IntN(10) {
	case 0: // CreateCIDR
		c := cidrset.CIDR{Name: pickName(rng), Prefixes: []netip.Prefix{pickPrefix(rng)}}
		did = fmt.Sprintf("CreateCIDR(%q, %v)", c.Name, c.Prefixes)
		res, err := s.CreateCIDR(ctx, c)
		switch _, exists := m.cidrs[c.Name]; {
		case store.CheckCIDR(c) != nil:
			want = []string{"invalid"}
		case exists:
			want = []string{"exists"}
		default:
			want = []string{"ok"}
		}
		if err == nil && want[0] == "ok" {
			m.wrote(t, did, res.Revision)
			m.cidrs[c.Name] = res
		}
		return did, outcome(err), want
	case 1: // UpdateCIDR
		name := pickName(rng)
		cur, exists := m.cidrs[name]
		c := cidrset.CIDR{Name: name, Prefixes: []netip.Prefix{pickPrefix(rng)}, Terminating: rng.IntN(2) == 0, Revision: m.revisionFor(rng, cur.Revision)}
		did = fmt.Sprintf("UpdateCIDR(%q, %v, terminating %v, revision %d)", name, c.Prefixes, c.Terminating, c.Revision)
		res, err := s.UpdateCIDR(ctx, c)
		switch {
		case store.CheckCIDR(c) != nil:
			want = []string{"invalid"}
		case !exists:
			want = []string{"not found"}
		case c.Revision != cur.Revision:
			want = []string{"conflict"}
		default:
			want = []string{"ok"}
		}
		if err == nil && want[0] == "ok" {
			m.wrote(t, did, res.Revision)
			if !res.Created.Equal(cur.Created) {
				t.Fatalf("%s: created %v, was %v", did, res.Created, cur.Created)
			}
			m.cidrs[name] = res
		}
		return did, outcome(err), want
	case 2: // DeleteCIDR
		name := pick(rng, modelNames)
		cur, exists := m.cidrs[name]
		rev := m.revisionFor(rng, cur.Revision)
		fs := m.fences(rng)
		did = fmt.Sprintf("DeleteCIDR(%q, %d, %+v)", name, rev, fs)
		err := s.DeleteCIDR(ctx, name, rev, fs...)
		switch {
		case !exists:
			want = []string{"not found"}
		case rev != cur.Revision:
			want = []string{"conflict"}
		case slices.ContainsFunc(fs, m.fenceFails):
			want = []string{"fenced"}
		default:
			want = []string{"ok"}
		}
		if err == nil && want[0] == "ok" {
			delete(m.cidrs, name)
			// The deletion's revision is not returned; the next write's
			// must still be above it, which the watch check covers.
		}
		return did, outcome(err), want
	case 3, 4: // CreateAddresses
		var recs []ipaddress.IPAddress
		for range 1 + rng.IntN(3) {
			a := pickAddr(rng)
			if !slices.ContainsFunc(recs, func(r ipaddress.IPAddress) bool { return r.Addr == a }) {
				recs = append(recs, ipaddress.IPAddress{Addr: a, Parent: pick(rng, modelOwners)})
			}
		}
		fs := m.fences(rng)
		did = fmt.Sprintf("CreateAddresses(%v, %+v)", recs, fs)
		in := slices.Clone(recs)
		res, err := s.CreateAddresses(ctx, recs, fs...)
		for _, r := range in {
			if ipaddress.ValidateAddr(r.Addr) != nil {
				want = append(want, "invalid")
			} else if _, held := m.addrs[r.Addr]; held {
				want = append(want, "exists")
			}
		}
		if slices.ContainsFunc(fs, m.fenceFails) {
			want = append(want, "fenced")
		}
		if len(want) == 0 {
			want = []string{"ok"}
		}
		if err == nil && want[0] == "ok" {
			if len(res) != len(in) {
				t.Fatalf("%s: %d records back", did, len(res))
			}
			m.wrote(t, did, res[0].Revision)
			for i, r := range res {
				if r.Addr != in[i].Addr || r.Parent != in[i].Parent || r.Revision != res[0].Revision {
					t.Fatalf("%s: record %d back is %+v", did, i, r)
				}
				m.addrs[r.Addr] = r
			}
			for _, f := range fs {
				if f.Touch {
					c := m.cidrs[f.CIDR]
					c.Revision = res[0].Revision
					m.cidrs[f.CIDR] = c
				}
			}
		}
		return did, outcome(err), want
	case 5, 6: // DeleteAddress, DeleteAddressAt, ReplaceAddressAt
		a := pickAddr(rng)
		cur, held := m.addrs[a]
		var rec ipaddress.IPAddress
		var deleted int64
		var err error
		call := rng.IntN(3)
		rev := m.revisionFor(rng, cur.Revision)
		to := pick(rng, modelOwners)
		switch call {
		case 0:
			did = fmt.Sprintf("DeleteAddressAt(%q, %d)", a, rev)
			rec, deleted, err = s.DeleteAddressAt(ctx, a, rev)
		case 1:
			did = fmt.Sprintf("DeleteAddress(%q)", a)
			rec, deleted, err = s.DeleteAddress(ctx, a)
		default:
			did = fmt.Sprintf("ReplaceAddressAt(%q, %s, %d)", a, to, rev)
			rec, err = s.ReplaceAddressAt(ctx, ipaddress.IPAddress{Addr: a, Parent: to}, rev)
		}
		switch {
		case !held || ipaddress.ValidateAddr(a) != nil:
			want = []string{"not found"}
		case call != 1 && rev != cur.Revision:
			want = []string{"conflict"}
		default:
			want = []string{"ok"}
		}
		if err != nil || want[0] != "ok" {
			return did, outcome(err), want
		}
		if call == 2 {
			if rec.Addr != a || rec.Parent != to || rec.Created.IsZero() {
				t.Fatalf("%s: replaced by %+v, held %+v", did, rec, cur)
			}
			m.wrote(t, did, rec.Revision)
			m.addrs[a] = rec
			return did, outcome(err), want
		}
		if rec.Addr != a || rec.Parent != cur.Parent || rec.Revision != cur.Revision {
			t.Fatalf("%s: deleted %+v, held %+v", did, rec, cur)
		}
		m.wrote(t, did, deleted)
		delete(m.addrs, a)
		return did, outcome(err), want
	case 7: // GetAddress
		a := pickAddr(rng)
		cur, held := m.addrs[a]
		did = fmt.Sprintf("GetAddress(%q)", a)
		rec, err := s.GetAddress(ctx, a)
		want = []string{"ok"}
		if !held || ipaddress.ValidateAddr(a) != nil {
			want = []string{"not found"}
		} else if err == nil && !sameRecord(rec, cur) {
			t.Fatalf("%s = %+v, want %+v", did, rec, cur)
		}
		return did, outcome(err), want
	case 8: // GetCIDR
		name := pick(rng, modelNames)
		cur, exists := m.cidrs[name]
		did = fmt.Sprintf("GetCIDR(%q)", name)
		c, err := s.GetCIDR(ctx, name)
		want = []string{"ok"}
		if !exists {
			want = []string{"not found"}
		} else if err == nil && !sameCIDR(c, cur) {
			t.Fatalf("%s = %+v, want %+v", did, c, cur)
		}
		return did, outcome(err), want
	default: // AddressesOf
		o := pick(rng, modelOwners)
		did = fmt.Sprintf("AddressesOf(%s)", o)
		recs, err := s.AddressesOf(ctx, o)
		var wantRecs []ipaddress.IPAddress
		for _, r := range m.addrs {
			if r.Parent == o {
				wantRecs = append(wantRecs, r)
			}
		}
		if err == nil && !sameRecords(recs, wantRecs) {
			t.Fatalf("%s = %+v, want %+v", did, recs, wantRecs)
		}
		return did, outcome(err), []string{"ok"}
	}
}

func sameRecord(x, y ipaddress.IPAddress) bool {
	return x.Addr == y.Addr && x.Parent == y.Parent && x.Revision == y.Revision && x.Created.Equal(y.Created)
}

func sameRecords(got, want []ipaddress.IPAddress) bool {
	byAddr := func(x, y ipaddress.IPAddress) int { return x.Addr.Compare(y.Addr) }
	got, want = slices.SortedFunc(slices.Values(got), byAddr), slices.SortedFunc(slices.Values(want), byAddr)
	return slices.EqualFunc(got, want, sameRecord)
}

func sameCIDR(x, y cidrset.CIDR) bool {
	return x.Name == y.Name && slices.Equal(x.Prefixes, y.Prefixes) && x.Terminating == y.Terminating &&
		x.Revision == y.Revision && x.Created.Equal(y.Created)
}

// compare checks every CIDR and record the store lists against the model.
func (m *model) compare(t *testing.T, s store.Store, when string) {
	t.Helper()
	ctx := ctxT(t)
	all, err := s.ListAddresses(ctx)
	if err != nil {
		t.Fatalf("%s: ListAddresses: %v", when, err)
	}
	if want := slices.Collect(maps.Values(m.addrs)); !sameRecords(all, want) {
		t.Fatalf("%s: ListAddresses = %+v, want %+v", when, all, want)
	}
	for _, name := range modelNames {
		c, err := s.GetCIDR(ctx, name)
		cur, exists := m.cidrs[name]
		if exists != (err == nil) || (exists && !sameCIDR(c, cur)) {
			t.Fatalf("%s: GetCIDR(%q) = %+v, %v; want %+v (exists %v)", when, name, c, err, cur, exists)
		}
	}
}

// compareWatch waits until w has seen the model's last write, then checks
// that its snapshot and events, applied in order, give the model's state,
// with revisions that never go down.
func (m *model) compareWatch(t *testing.T, w *recorder) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		w.mu.Lock()
		snap, events := w.resets[len(w.resets)-1], slices.Clone(w.events)
		w.mu.Unlock()
		last := snap.Revision
		if len(events) > 0 {
			last = events[len(events)-1].Revision
		}
		if last >= m.lastRev {
			m.checkHistory(t, snap, events)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watch reached revision %d, want %d", last, m.lastRev)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (m *model) checkHistory(t *testing.T, snap store.Snapshot, events []store.Event) {
	t.Helper()
	cidrs := map[string]cidrset.CIDR{}
	for _, c := range snap.CIDRs {
		cidrs[c.Name] = c
	}
	addrs := map[netip.Addr]bool{}
	for _, a := range snap.Addrs {
		addrs[a] = true
	}
	rev := snap.Revision
	for i, e := range events {
		if e.Revision < rev {
			t.Fatalf("event %d (%+v) at revision %d, after %d", i, e, e.Revision, rev)
		}
		rev = e.Revision
		switch e.Kind {
		case store.CIDRPut:
			cidrs[e.CIDR.Name] = e.CIDR
		case store.CIDRDeleted:
			delete(cidrs, e.CIDR.Name)
		case store.AddressPut:
			addrs[e.Address.Addr] = true
		case store.AddressDeleted:
			delete(addrs, e.Address.Addr)
		}
	}
	sorted := func(keys iter.Seq[netip.Addr]) []netip.Addr {
		return slices.SortedFunc(keys, netip.Addr.Compare)
	}
	if got, want := sorted(maps.Keys(addrs)), sorted(maps.Keys(m.addrs)); !slices.Equal(got, want) {
		t.Fatalf("the watch's addresses are %v, the store's %v", got, want)
	}
	for name, c := range m.cidrs {
		if got, ok := cidrs[name]; !ok || !slices.Equal(got.Prefixes, c.Prefixes) || got.Terminating != c.Terminating || got.Revision != c.Revision {
			t.Fatalf("the watch's CIDR %q is %+v (%v), the store's %+v", name, got, ok, c)
		}
	}
	if len(cidrs) != len(m.cidrs) {
		t.Fatalf("the watch has CIDRs %v, the store %v", slices.Sorted(maps.Keys(cidrs)), slices.Sorted(maps.Keys(m.cidrs)))
	}
}
