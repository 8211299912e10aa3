package finalizer_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"go4.org/netipx"
	"pgregory.net/rapid"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/finalizer"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/memory"
)

func cidr(name string, rev int64, terminating bool, prefixes ...string) cidrset.CIDR {
	c := cidrset.CIDR{Name: name, Revision: rev, Terminating: terminating}
	for _, p := range prefixes {
		c.Prefixes = append(c.Prefixes, netip.MustParsePrefix(p))
	}
	return c
}

// usedAt serves the given addresses (ascending) as single-address ranges.
func usedAt(addrs ...string) func(netipx.IPRange) iter.Seq[netipx.IPRange] {
	return func(r netipx.IPRange) iter.Seq[netipx.IPRange] {
		var out []netipx.IPRange
		for _, s := range addrs {
			a := netip.MustParseAddr(s)
			if r.Contains(a) {
				out = append(out, netipx.IPRangeFrom(a, a))
			}
		}
		return slices.Values(out)
	}
}

func TestRemoveWhenNoAddressIsInside(t *testing.T) {
	d := finalizer.Decide(cidr("x", 5, true, "10.0.0.0/24"), nil, usedAt("10.1.0.1"))
	if !d.Remove || len(d.Blocking) != 0 || len(d.Fences) != 0 {
		t.Fatalf("Decide = %+v", d)
	}
}

func TestBlockedByAnAddressOnlyThisCIDRContains(t *testing.T) {
	d := finalizer.Decide(cidr("x", 5, true, "10.0.0.0/24"), []cidrset.CIDR{cidr("y", 3, false, "10.0.0.0/25")}, usedAt("10.0.0.7", "10.0.0.200"))
	if d.Remove || !slices.Equal(d.Blocking, []netip.Addr{netip.MustParseAddr("10.0.0.200")}) {
		t.Fatalf("Decide = %+v, want blocked by 10.0.0.200 only", d)
	}
	c := d.Condition(cidr("x", 5, true, "10.0.0.0/24"))
	if c.Status || c.Reason != cidrset.ReasonTerminating || c.Message != cidrset.MessageBlockedDelete {
		t.Fatalf("condition %+v", c)
	}
}

func TestRemoveWhenEveryPrefixIsContainedInALiveCIDRAndFenceOnIt(t *testing.T) {
	d := finalizer.Decide(cidr("x", 5, true, "10.0.0.0/24", "fd00::/120"),
		[]cidrset.CIDR{cidr("wide", 3, false, "10.0.0.0/16"), cidr("v6", 4, false, "fd00::/64")},
		usedAt("10.0.0.7", "fd00::9"))
	want := []store.Fence{{CIDR: "v6", Revision: 4}, {CIDR: "wide", Revision: 3}}
	if !d.Remove || !slices.Equal(d.Fences, want) {
		t.Fatalf("Decide = %+v, want removal fenced on %v", d, want)
	}
}

func TestPartialLiveCoverageFencesOnTheCIDRsItUsed(t *testing.T) {
	d := finalizer.Decide(cidr("x", 5, true, "10.0.0.0/24"),
		[]cidrset.CIDR{cidr("low", 3, false, "10.0.0.0/25"), cidr("high", 4, false, "10.0.0.128/25"), cidr("far", 9, false, "172.16.0.0/12")},
		usedAt("10.0.0.7", "10.0.0.130"))
	if !d.Remove || !slices.Equal(d.Fences, []store.Fence{{CIDR: "high", Revision: 4}, {CIDR: "low", Revision: 3}}) {
		t.Fatalf("Decide = %+v", d)
	}
}

func TestATerminatingCoverDoesNotCount(t *testing.T) {
	d := finalizer.Decide(cidr("x", 5, true, "10.0.0.0/24"), []cidrset.CIDR{cidr("y", 3, true, "10.0.0.0/24")}, usedAt("10.0.0.7"))
	if d.Remove {
		t.Fatalf("Decide relied on a Terminating cover: %+v", d)
	}
}

func TestNetworkAndBroadcastAddressesNeverBlock(t *testing.T) {
	d := finalizer.Decide(cidr("x", 5, true, "10.0.0.0/24"), nil, usedAt("10.0.0.0", "10.0.0.255"))
	if !d.Remove {
		t.Fatalf("network/broadcast records blocked removal: %+v", d)
	}
	d = finalizer.Decide(cidr("x", 5, true, "fd00::/120"), nil, usedAt("fd00::ff"))
	if d.Remove {
		t.Fatal("the IPv6 all-ones address is a host and must block")
	}
}

func TestBlockingListIsCapped(t *testing.T) {
	used := func(netipx.IPRange) iter.Seq[netipx.IPRange] {
		return slices.Values([]netipx.IPRange{netipx.MustParseIPRange("10.0.0.1-10.0.0.100")})
	}
	d := finalizer.Decide(cidr("x", 5, true, "10.0.0.0/24"), nil, used)
	if d.Remove || len(d.Blocking) != finalizer.MaxBlocking || d.Blocking[0] != netip.MustParseAddr("10.0.0.1") || !d.More {
		t.Fatalf("Decide = %+v", d)
	}
	// Exactly MaxBlocking blocking addresses: the list is whole.
	used = func(netipx.IPRange) iter.Seq[netipx.IPRange] {
		return slices.Values([]netipx.IPRange{netipx.MustParseIPRange("10.0.0.1-10.0.0.16")})
	}
	d = finalizer.Decide(cidr("x", 5, true, "10.0.0.0/24"), nil, used)
	if d.Remove || len(d.Blocking) != finalizer.MaxBlocking || d.More {
		t.Fatalf("Decide with exactly %d blocking = %+v", finalizer.MaxBlocking, d)
	}
}

// TestBlockedDecisionReadsOnlyWhatItLists: with a million single addresses
// in use, a blocked decision reads the used ranges only until it has
// MaxBlocking of them and one more (which tells the list is cut), so that
// draining a large CIDR one release at a time is not quadratic.
func TestBlockedDecisionReadsOnlyWhatItLists(t *testing.T) {
	read := 0
	used := func(netipx.IPRange) iter.Seq[netipx.IPRange] {
		return func(yield func(netipx.IPRange) bool) {
			a := netip.MustParseAddr("10.0.0.1")
			for range 1 << 20 {
				read++
				if !yield(netipx.IPRangeFrom(a, a)) {
					return
				}
				a = a.Next().Next()
			}
		}
	}
	d := finalizer.Decide(cidr("x", 5, true, "10.0.0.0/8"), nil, used)
	if d.Remove || len(d.Blocking) != finalizer.MaxBlocking {
		t.Fatalf("Decide = %+v", d)
	}
	if read != finalizer.MaxBlocking+1 {
		t.Fatalf("read %d used ranges for %d blocking addresses and the one that says more", read, finalizer.MaxBlocking)
	}
}

// TestADecisionReadsNothingALiveCIDRCovers: used is asked only about the
// parts of the target that no live CIDR covers, so that the addresses a
// live CIDR inside it holds, however many, cost a blocked decision
// nothing.
func TestADecisionReadsNothingALiveCIDRCovers(t *testing.T) {
	cover := cidr("half", 3, false, "10.0.0.0/9")
	coverHosts, _ := cidrset.HostRange(cover.Prefixes[0])
	var asked []netipx.IPRange
	used := func(r netipx.IPRange) iter.Seq[netipx.IPRange] {
		asked = append(asked, r)
		return usedAt("10.0.0.5", "10.200.0.1")(r)
	}
	d := finalizer.Decide(cidr("x", 5, true, "10.0.0.0/8"), []cidrset.CIDR{cover}, used)
	if d.Remove || !slices.Equal(d.Blocking, []netip.Addr{netip.MustParseAddr("10.200.0.1")}) {
		t.Fatalf("Decide = %+v, want blocked by 10.200.0.1 only", d)
	}
	for _, r := range asked {
		if r.From().Compare(coverHosts.To()) <= 0 && coverHosts.From().Compare(r.To()) <= 0 {
			t.Fatalf("used was asked about %s, which overlaps the live %s", r, coverHosts)
		}
	}
	if len(asked) == 0 {
		t.Fatal("used was never asked")
	}
}

// indexView is a View over a cidrset.Index and a list of used addresses.
type indexView struct {
	x    *cidrset.Index
	used []string // ascending
}

func (v indexView) WaitRevision(context.Context, int64) error      { return nil }
func (v indexView) Overlapping(p netip.Prefix) []cidrset.CIDR      { return v.x.Overlapping(p) }
func (v indexView) Used(r netipx.IPRange) iter.Seq[netipx.IPRange] { return usedAt(v.used...)(r) }

// TestDecideInReadsOnlyOverlappingCIDRsAndDecidesTheSame: a decision over
// the CIDRs a view finds overlapping the target is the one over every
// CIDR, for random CIDRs, states and addresses.
func TestDecideInReadsOnlyOverlappingCIDRsAndDecidesTheSame(t *testing.T) {
	v4 := []string{"10.0.0.0/16", "10.0.0.0/24", "10.0.0.0/25", "10.0.0.128/25", "10.0.1.0/24", "10.1.0.0/16", "10.0.0.0/8"}
	v6 := []string{"fd00::/120", "fd00::/121", "fd00::80/121", "fd00::/64", "fd00:1::/64"}
	addrs := []string{"10.0.0.5", "10.0.0.130", "10.0.1.7", "10.1.0.1", "10.200.0.1", "fd00::5", "fd00::90", "fd00:0:0:0:1::1", "fd00:1::1"}
	rapid.Check(t, func(rt *rapid.T) {
		var all []cidrset.CIDR
		for i := range rapid.IntRange(1, 8).Draw(rt, "cidrs") {
			var ps []string
			if rapid.Bool().Draw(rt, "v4") {
				ps = append(ps, rapid.SampledFrom(v4).Draw(rt, "p4"))
			}
			if len(ps) == 0 || rapid.Bool().Draw(rt, "v6") {
				ps = append(ps, rapid.SampledFrom(v6).Draw(rt, "p6"))
			}
			all = append(all, cidr(fmt.Sprint("c", i), int64(i+1), rapid.Bool().Draw(rt, "terminating"), ps...))
		}
		used := rapid.SliceOfDistinct(rapid.SampledFrom(addrs), func(s string) string { return s }).Draw(rt, "used")
		slices.SortFunc(used, func(a, b string) int { return netip.MustParseAddr(a).Compare(netip.MustParseAddr(b)) })
		target := all[rapid.IntRange(0, len(all)-1).Draw(rt, "target")]
		target.Terminating = true
		view := indexView{x: cidrset.NewIndex(all), used: used}
		got := finalizer.DecideIn(view, target)
		want := finalizer.Decide(target, all, view.Used)
		if !reflect.DeepEqual(got, want) {
			rt.Fatalf("DecideIn = %+v, Decide over every CIDR = %+v", got, want)
		}
	})
}

// SPEC §4, checked address by address: an allocated address blocks the
// removal exactly when a prefix of the target holds it as a host and no
// prefix of another live CIDR does. Random CIDRs (IPv6 listed first in
// some, prefixes down to single addresses, whole families) and addresses,
// including network and broadcast ones; Blocking must be those addresses,
// ascending.
func TestDecideBlocksExactlyOnAddressesNoLiveCIDRHolds(t *testing.T) {
	v4 := []string{"10.0.0.0/8", "10.0.0.0/23", "10.0.0.0/24", "10.0.0.0/25", "10.0.0.128/25", "10.0.0.252/30", "10.0.0.254/31", "10.0.0.255/32", "10.0.1.0/24", "0.0.0.0/0"}
	v6 := []string{"::/0", "fd00::/64", "fd00::/112", "fd00::/120", "fd00::80/121", "fd00::fe/127", "fd00::ff/128"}
	addrs := []string{"10.0.0.0", "10.0.0.1", "10.0.0.127", "10.0.0.128", "10.0.0.253", "10.0.0.254", "10.0.0.255", "10.0.1.0", "10.0.1.255", "10.9.0.1",
		"fd00::", "fd00::5", "fd00::80", "fd00::fe", "fd00::ff", "fd00::100", "fd00::1:0"}
	rapid.Check(t, func(rt *rapid.T) {
		var all []cidrset.CIDR
		for i := range rapid.IntRange(1, 6).Draw(rt, "cidrs") {
			var ps []string
			if rapid.Bool().Draw(rt, "v4") {
				ps = append(ps, rapid.SampledFrom(v4).Draw(rt, "p4"))
			}
			if len(ps) == 0 || rapid.Bool().Draw(rt, "v6") {
				ps = append(ps, rapid.SampledFrom(v6).Draw(rt, "p6"))
			}
			if len(ps) == 2 && rapid.Bool().Draw(rt, "v6 first") {
				ps[0], ps[1] = ps[1], ps[0]
			}
			all = append(all, cidr(fmt.Sprint("c", i), int64(i+1), rapid.Bool().Draw(rt, "terminating"), ps...))
		}
		used := rapid.SliceOfDistinct(rapid.SampledFrom(addrs), func(s string) string { return s }).Draw(rt, "used")
		slices.SortFunc(used, func(a, b string) int { return netip.MustParseAddr(a).Compare(netip.MustParseAddr(b)) })
		target := all[rapid.IntRange(0, len(all)-1).Draw(rt, "target")]
		target.Terminating = true

		hostOf := func(c cidrset.CIDR, a netip.Addr) bool {
			return slices.ContainsFunc(c.Prefixes, func(p netip.Prefix) bool { return cidrset.HostContains(p, a) })
		}
		var want []netip.Addr
		for _, s := range used {
			a := netip.MustParseAddr(s)
			held := slices.ContainsFunc(all, func(o cidrset.CIDR) bool { return o.Name != target.Name && !o.Terminating && hostOf(o, a) })
			if hostOf(target, a) && !held {
				want = append(want, a)
			}
		}
		d := finalizer.Decide(target, all, usedAt(used...))
		if d.Remove != (len(want) == 0) || !slices.Equal(d.Blocking, want) {
			rt.Fatalf("Decide(%v) = remove %v, blocking %v; want blocking %v", target.Prefixes, d.Remove, d.Blocking, want)
		}
	})
}

// Blocking ascends whatever the order of the target's prefixes, and when
// cut, keeps the lowest addresses: a dual-stack CIDR listing IPv6 first
// still names its IPv4 blockers.
func TestBlockingAscendsWhateverThePrefixOrder(t *testing.T) {
	used := []string{"10.0.0.7"}
	for i := range finalizer.MaxBlocking + 4 {
		used = append(used, fmt.Sprintf("fd00::%x", i+1))
	}
	d := finalizer.Decide(cidr("dual", 1, true, "fd00::/120", "10.0.0.0/24"), nil, usedAt(used...))
	want := make([]netip.Addr, 0, finalizer.MaxBlocking)
	for _, s := range used[:finalizer.MaxBlocking] {
		want = append(want, netip.MustParseAddr(s))
	}
	if !slices.Equal(d.Blocking, want) || !d.More {
		t.Fatalf("Blocking = %v, More = %v; want %v, More", d.Blocking, d.More, want)
	}
}

// staleView shows a fixed list of CIDRs until it is asked to reach a
// revision at or past catchUp, and then the store's: a watch that lags
// until someone waits for it.
type staleView struct {
	st      *memory.Store
	cidrs   []cidrset.CIDR
	catchUp int64
}

func (v *staleView) WaitRevision(ctx context.Context, rev int64) error {
	if rev >= v.catchUp {
		var now []cidrset.CIDR
		for _, name := range []string{"t1", "t2"} {
			if c, err := v.st.GetCIDR(ctx, name); err == nil {
				now = append(now, c)
			}
		}
		v.cidrs = now
	}
	return nil
}

func (v *staleView) Overlapping(p netip.Prefix) []cidrset.CIDR {
	return cidrset.NewIndex(v.cidrs).Overlapping(p)
}
func (v *staleView) Used(netipx.IPRange) iter.Seq[netipx.IPRange] {
	return func(func(netipx.IPRange) bool) {}
}

// A removal fenced out because the view relied on a CIDR changed since
// waits for the view to reach the revision the store saw the change at,
// rather than decide again on the same stale view until it gives up: two
// CIDRs of one prefix deleted at once by two processes, one watch lagging.
func TestAFencedRemovalWaitsForTheViewToSeeWhatBrokeTheFence(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	var both []cidrset.CIDR
	for _, name := range []string{"t1", "t2"} {
		c, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: name, Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}})
		if err != nil {
			t.Fatal(err)
		}
		both = append(both, c)
	}
	// t1 turns Terminating; the view knows that much.
	t1 := both[0]
	t1.Terminating = true
	t1, err := st.UpdateCIDR(ctx, t1)
	if err != nil {
		t.Fatal(err)
	}
	view := &staleView{st: st, cidrs: []cidrset.CIDR{t1, both[1]}}
	// The other process deletes t2 (nothing holds it): the view lags.
	if err := st.DeleteCIDR(ctx, "t2", both[1].Revision); err != nil {
		t.Fatal(err)
	}
	view.catchUp = t1.Revision + 1
	res, err := finalizer.Reconciler{Store: st, View: view}.Reconcile(ctx, "t1")
	if err != nil || !res.Removed {
		t.Fatalf("Reconcile(t1) = %+v, %v; want it removed", res, err)
	}
	if _, err := st.GetCIDR(ctx, "t1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("t1 after Reconcile: %v, want removed", err)
	}
}
