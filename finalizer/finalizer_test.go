package finalizer_test

import (
	"iter"
	"net/netip"
	"slices"
	"testing"

	"go4.org/netipx"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/finalizer"
	"github.com/netipam/netipam/store"
)

func cidr(name string, rev int64, terminating bool, prefixes ...string) cidrset.CIDR {
	c := cidrset.CIDR{Name: name, Revision: rev, Terminating: terminating}
	for _, p := range prefixes {
		c.Prefixes = append(c.Prefixes, netip.MustParsePrefix(p))
	}
	return c
}

// usedAt serves the given addresses as single-address ranges.
func usedAt(addrs ...string) func(netip.Prefix) iter.Seq[netipx.IPRange] {
	return func(p netip.Prefix) iter.Seq[netipx.IPRange] {
		var out []netipx.IPRange
		for _, s := range addrs {
			a := netip.MustParseAddr(s)
			if p.Contains(a) {
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
	used := func(netip.Prefix) iter.Seq[netipx.IPRange] {
		return slices.Values([]netipx.IPRange{netipx.MustParseIPRange("10.0.0.1-10.0.0.100")})
	}
	d := finalizer.Decide(cidr("x", 5, true, "10.0.0.0/24"), nil, used)
	if d.Remove || len(d.Blocking) != finalizer.MaxBlocking || d.Blocking[0] != netip.MustParseAddr("10.0.0.1") {
		t.Fatalf("Decide = %+v", d)
	}
}

// TestBlockedDecisionReadsOnlyWhatItLists: with a million single addresses
// in use, a blocked decision reads the used ranges only until it has
// MaxBlocking of them, so that draining a large CIDR one release at a time
// is not quadratic.
func TestBlockedDecisionReadsOnlyWhatItLists(t *testing.T) {
	read := 0
	used := func(netip.Prefix) iter.Seq[netipx.IPRange] {
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
	if read != finalizer.MaxBlocking {
		t.Fatalf("read %d used ranges for %d blocking addresses", read, finalizer.MaxBlocking)
	}
}
