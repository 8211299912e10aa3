package cidrset

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"
	"testing"

	"pgregory.net/rapid"
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

func TestIndexPutAndDelete(t *testing.T) {
	x := testIndex()
	x.Put(CIDR{Name: "other", Prefixes: []netip.Prefix{prefixOf("192.97.0.0/24")}, Terminating: true})
	if c, _ := x.Get("other"); !c.Terminating || c.Prefixes[0] != prefixOf("192.97.0.0/24") {
		t.Fatalf("Put replaced other as %+v", c)
	}
	if got := names(x.Overlapping(prefixOf("192.96.0.0/16"))); len(got) != 0 {
		t.Errorf("the replaced prefix is still indexed: %v", got)
	}
	if !x.Delete("wide") || x.Delete("wide") {
		t.Fatal("Delete does not report what it removed")
	}
	if _, ok := x.Get("wide"); ok || x.Len() != 3 {
		t.Fatalf("Delete: len %d", x.Len())
	}
	var zero Index
	zero.Put(CIDR{Name: "a", Prefixes: []netip.Prefix{prefixOf("10.0.0.0/24")}})
	if got := names(zero.Covering(prefixOf("10.0.0.0/30"))); !slices.Equal(got, []string{"a"}) {
		t.Errorf("zero Index after Put: Covering = %v", got)
	}
}

// TestIndexFollowsAModel puts and deletes random CIDRs and checks every
// lookup against a scan of a plain map, and against an index built anew.
func TestIndexFollowsAModel(t *testing.T) {
	universe := []netip.Prefix{
		prefixOf("10.0.0.0/8"), prefixOf("10.0.0.0/16"), prefixOf("10.0.0.0/24"), prefixOf("10.0.0.0/28"),
		prefixOf("10.0.1.0/24"), prefixOf("10.1.0.0/16"), prefixOf("10.0.0.16/28"), prefixOf("10.0.0.4/30"),
		prefixOf("10.0.0.7/32"), prefixOf("11.0.0.0/8"), prefixOf("fd00::/48"), prefixOf("fd00::/64"),
		prefixOf("fd00::/120"), prefixOf("fd00:0:0:1::/64"), prefixOf("fd00::80/121"), prefixOf("fe80::/10"),
	}
	addrs := []netip.Addr{
		addrOf("10.0.0.0"), addrOf("10.0.0.1"), addrOf("10.0.0.5"), addrOf("10.0.0.7"), addrOf("10.0.0.15"),
		addrOf("10.0.0.17"), addrOf("10.0.1.9"), addrOf("10.1.2.3"), addrOf("10.255.255.255"), addrOf("11.0.0.1"),
		addrOf("fd00::1"), addrOf("fd00::81"), addrOf("fd00:0:0:1::5"), addrOf("fe80::1"), addrOf("12.0.0.1"),
	}
	rapid.Check(t, func(rt *rapid.T) {
		var x Index
		model := map[string]CIDR{}
		nameOf := rapid.SampledFrom([]string{"a", "b", "c", "d", "e", "f"})
		for range rapid.IntRange(1, 40).Draw(rt, "ops") {
			name := nameOf.Draw(rt, "name")
			if rapid.Bool().Draw(rt, "delete") {
				_, had := model[name]
				if x.Delete(name) != had {
					rt.Fatalf("Delete(%s) reported %v", name, !had)
				}
				delete(model, name)
			} else {
				c := CIDR{Name: name, Terminating: rapid.Bool().Draw(rt, "terminating")}
				// A valid CIDR: one prefix, or one per family.
				c.Prefixes = []netip.Prefix{rapid.SampledFrom(universe).Draw(rt, "prefix")}
				if other := rapid.SampledFrom(universe).Draw(rt, "second"); other.Addr().Is4() != c.Prefixes[0].Addr().Is4() {
					c.Prefixes = append(c.Prefixes, other)
				}
				x.Put(c)
				model[name] = c
			}
			for _, y := range []*Index{&x, NewIndex(slices.Collect(maps.Values(model)))} {
				checkIndex(rt, y, model, universe, addrs)
			}
		}
	})
}

func checkIndex(t *rapid.T, x *Index, model map[string]CIDR, universe []netip.Prefix, addrs []netip.Addr) {
	want := slices.Sorted(maps.Keys(model))
	var all, dying []string
	for _, c := range x.All() {
		all = append(all, c.Name)
	}
	for _, c := range x.Terminating() {
		dying = append(dying, c.Name)
	}
	if !slices.Equal(all, want) || x.Len() != len(want) {
		t.Fatalf("All = %v, Len %d, want %v", all, x.Len(), want)
	}
	var wantDying []string
	for _, n := range want {
		if model[n].Terminating {
			wantDying = append(wantDying, n)
		}
		if c, ok := x.Get(n); !ok || !slices.Equal(c.Prefixes, model[n].Prefixes) || c.Terminating != model[n].Terminating {
			t.Fatalf("Get(%s) = %+v, %v", n, c, ok)
		}
	}
	if !slices.Equal(dying, wantDying) {
		t.Fatalf("Terminating = %v, want %v", dying, wantDying)
	}
	// scan lists the model's CIDRs, by name, with a prefix r for which
	// match(r) holds.
	scan := func(match func(r netip.Prefix) bool) []string {
		var out []string
		for _, n := range want {
			if slices.ContainsFunc(model[n].Prefixes, match) {
				out = append(out, n)
			}
		}
		return out
	}
	for _, q := range universe {
		var with []string
		for _, c := range x.WithPrefix(q) {
			with = append(with, c.Name)
		}
		if w := scan(func(r netip.Prefix) bool { return r == q }); !slices.Equal(with, w) {
			t.Fatalf("WithPrefix(%s) = %v, want %v", q, with, w)
		}
		cov := x.Covering(q)
		if w := scan(func(r netip.Prefix) bool { return r.Bits() <= q.Bits() && r.Contains(q.Addr()) }); !slices.Equal(names(cov), w) {
			t.Fatalf("Covering(%s) = %v, want %v", q, names(cov), w)
		}
		if !slices.IsSortedFunc(cov, func(a, b CIDR) int { return cmp.Compare(coverBits(b, q), coverBits(a, q)) }) {
			t.Fatalf("Covering(%s) is not longest prefix first: %v", q, cov)
		}
		var over []string
		for _, c := range x.Overlapping(q) {
			over = append(over, c.Name)
		}
		if w := scan(func(r netip.Prefix) bool { return r.Overlaps(q) }); !slices.Equal(over, w) {
			t.Fatalf("Overlapping(%s) = %v, want %v", q, over, w)
		}
	}
	for _, a := range addrs {
		var got []string
		lastBits := 129
		x.Containing(a, func(c *CIDR, p netip.Prefix) bool {
			if p.Bits() > lastBits || !slices.Contains(c.Prefixes, p) {
				t.Fatalf("Containing(%s) gave %s with %s after a /%d", a, c.Name, p, lastBits)
			}
			lastBits = p.Bits()
			got = append(got, c.Name)
			return true
		})
		slices.Sort(got)
		if w := scan(func(r netip.Prefix) bool { return HostContains(r, a) }); !slices.Equal(got, w) {
			t.Fatalf("Containing(%s) = %v, want %v", a, got, w)
		}
	}
}

// coverBits is the length of c's prefix that covers q.
func coverBits(c CIDR, q netip.Prefix) int {
	for _, r := range c.Prefixes {
		if r.Bits() <= q.Bits() && r.Contains(q.Addr()) {
			return r.Bits()
		}
	}
	return -1
}
