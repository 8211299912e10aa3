package cidrset

import (
	"net/netip"
	"slices"
	"testing"
)

func names(cs []CIDR) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	slices.Sort(out)
	return out
}

func testIndex() *Index {
	return NewIndex([]CIDR{
		{Name: "kubernetes", Prefixes: []netip.Prefix{prefixOf("10.96.0.0/28")}},
		{Name: "same", Prefixes: []netip.Prefix{prefixOf("10.96.0.0/28")}},
		{Name: "wide", Prefixes: []netip.Prefix{prefixOf("10.96.0.0/16"), prefixOf("fd00::/64")}},
		{Name: "other", Prefixes: []netip.Prefix{prefixOf("192.96.0.0/24")}},
	})
}

func TestIndexContainingUsesHostContainment(t *testing.T) {
	x := testIndex()
	containing := func(a string) []string {
		var out []string
		x.Containing(addrOf(a), func(c *CIDR, _ netip.Prefix) bool { out = append(out, c.Name); return true })
		slices.Sort(out)
		return out
	}
	if got := containing("10.96.0.1"); !slices.Equal(got, []string{"kubernetes", "same", "wide"}) {
		t.Errorf("Containing(10.96.0.1) = %v", got)
	}
	// The /28's network address is a host of the /16 only.
	if got := containing("10.96.0.0"); len(got) != 0 {
		t.Errorf("Containing(10.96.0.0) = %v, want none (network address of every prefix)", got)
	}
	if got := containing("10.96.0.15"); !slices.Equal(got, []string{"wide"}) {
		t.Errorf("Containing(10.96.0.15) = %v, want [wide]: it is the /28's broadcast", got)
	}
	if got := containing("fd00::ffff"); !slices.Equal(got, []string{"wide"}) {
		t.Errorf("Containing(fd00::ffff) = %v", got)
	}
	if got := containing("172.16.0.1"); len(got) != 0 {
		t.Errorf("Containing(172.16.0.1) = %v", got)
	}
}

func TestIndexCoveringAndOverlapping(t *testing.T) {
	x := testIndex()
	if got := names(x.Covering(prefixOf("10.96.0.0/28"))); !slices.Equal(got, []string{"kubernetes", "same", "wide"}) {
		t.Errorf("Covering(/28) = %v", got)
	}
	if got := names(x.Covering(prefixOf("10.96.0.0/16"))); !slices.Equal(got, []string{"wide"}) {
		t.Errorf("Covering(/16) = %v", got)
	}
	if got := names(x.Overlapping(prefixOf("10.0.0.0/8"))); !slices.Equal(got, []string{"kubernetes", "same", "wide"}) {
		t.Errorf("Overlapping(/8) = %v", got)
	}
	if got := names(x.Overlapping(prefixOf("192.96.0.128/25"))); !slices.Equal(got, []string{"other"}) {
		t.Errorf("Overlapping(192.96.0.128/25) = %v", got)
	}
}

func TestIndexWithAndWithout(t *testing.T) {
	x := testIndex()
	y := x.With(CIDR{Name: "other", Prefixes: []netip.Prefix{prefixOf("192.97.0.0/24")}, Terminating: true})
	if c, _ := y.Get("other"); !c.Terminating || c.Prefixes[0] != prefixOf("192.97.0.0/24") {
		t.Fatalf("With replaced other as %+v", c)
	}
	if c, _ := x.Get("other"); c.Terminating {
		t.Fatal("With changed the original index")
	}
	z := y.Without("wide")
	if _, ok := z.Get("wide"); ok || z.Len() != 3 || y.Len() != 4 {
		t.Fatalf("Without: len %d (was %d)", z.Len(), y.Len())
	}
}
