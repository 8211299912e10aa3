package memory

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/netipam/netipam/ipaddress"
)

func TestRecordsFollowAMapModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		r := newRecords()
		model := map[netip.Addr]ipaddress.ParentRef{}
		owners := []ipaddress.ParentRef{
			{Resource: "services", Namespace: "default", Name: "a"},
			{Resource: "services", Namespace: "other", Name: "a"},
			{Group: "x.io", Resource: "services", Namespace: "default", Name: "a"},
			{Resource: "services", Namespace: "default", Name: "bb"},
			{Resource: "nodes", Name: "n1"},
		}
		addrs := []netip.Addr{
			netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("::a00:1"),
			netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2"), netip.MustParseAddr("0.0.0.1"),
		}
		rt.Repeat(map[string]func(*rapid.T){
			"put": func(rt *rapid.T) {
				a := rapid.SampledFrom(addrs).Draw(rt, "addr")
				if _, ok := model[a]; ok {
					rt.Skip("held")
				}
				p := rapid.SampledFrom(owners).Draw(rt, "owner")
				r.put(a, p, 1700000000, int64(len(model)+1))
				model[a] = p
			},
			"delete": func(rt *rapid.T) {
				a := rapid.SampledFrom(addrs).Draw(rt, "addr")
				rec, ok := r.delete(a)
				want, held := model[a]
				if ok != held || (ok && rec.Parent != want) {
					rt.Fatalf("delete(%s) = %+v %v; model %+v %v", a, rec, ok, want, held)
				}
				delete(model, a)
			},
			"": func(rt *rapid.T) {
				if r.len() != len(model) {
					rt.Fatalf("len %d, model %d", r.len(), len(model))
				}
				for _, p := range owners {
					var got, want []netip.Addr
					for _, rec := range r.of(p) {
						got = append(got, rec.Addr)
					}
					for a, q := range model {
						if q == p {
							want = append(want, a)
						}
					}
					slices.SortFunc(got, netip.Addr.Compare)
					slices.SortFunc(want, netip.Addr.Compare)
					if !slices.Equal(got, want) {
						rt.Fatalf("of(%v) = %v, model %v", p, got, want)
					}
				}
				for a, p := range model {
					if rec, ok := r.get(a); !ok || rec.Parent != p || rec.Addr != a {
						rt.Fatalf("get(%s) = %+v %v, want %v", a, rec, ok, p)
					}
				}
			},
		})
	})
}

func TestArenaCompactionKeepsNames(t *testing.T) {
	r := newRecords()
	const n = 200_000
	for i := range n {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		r.put(a, ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: fmt.Sprintf("service-number-%08d", i)}, 0, int64(i))
	}
	for i := 0; i < n; i += 4 { // keep one in four
		for j := 1; j < 4; j++ {
			r.delete(netip.AddrFrom4([4]byte{10, byte((i + j) >> 16), byte((i + j) >> 8), byte(i + j)}))
		}
	}
	if r.arena.waste > r.arena.live {
		t.Fatalf("arena not compacted: %d wasted, %d live", r.arena.waste, r.arena.live)
	}
	for i := 0; i < n; i += 4 {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		rec, ok := r.get(a)
		if want := fmt.Sprintf("service-number-%08d", i); !ok || rec.Parent.Name != want {
			t.Fatalf("get(%s) = %+v after compaction, want owner %s", a, rec, want)
		}
	}
}
