package memory

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/netipam/netipam/internal/u128"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// recordsPool is the addresses the model test draws from: IPv4 and IPv6,
// enough to grow the tables many times, a few special ones first.
var recordsPool = func() []netip.Addr {
	out := []netip.Addr{
		netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("::a00:1"), netip.MustParseAddr("0.0.0.0"),
		netip.MustParseAddr("::"), netip.MustParseAddr("255.255.255.255"), netip.MustParseAddr("::ffff:10.0.0.1"),
		netip.MustParseAddr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
	}
	for i := range 130 {
		out = append(out, netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i + 2)}))
		out = append(out, netip.AddrFrom16([16]byte{0: 0xfd, 14: byte(i >> 8), 15: byte(i + 2)}))
	}
	return out
}()

// recordsOwners are the owners of the model test: names shared across
// scopes, an empty name, a name long enough for a two-byte length.
var recordsOwners = func() []ipaddress.ParentRef {
	out := []ipaddress.ParentRef{
		{Resource: "services", Namespace: "default", Name: "a"},
		{Resource: "services", Namespace: "other", Name: "a"},
		{Group: "x.io", Resource: "services", Namespace: "default", Name: "a"},
		{Resource: "services", Namespace: "default", Name: "bb"},
		{Resource: "nodes", Name: "n1"},
		{Resource: "nodes", Name: ""},
		{Resource: "services", Namespace: "default", Name: strings.Repeat("long-name-", 30)},
	}
	for i := range 8 {
		out = append(out, ipaddress.ParentRef{Resource: "pods", Namespace: "team", Name: fmt.Sprintf("pod-%d", i)})
	}
	// Scopes of one owner each: freed and reused as the model runs.
	for i := range 4 {
		out = append(out, ipaddress.ParentRef{Resource: "services", Namespace: fmt.Sprintf("ns-%d", i), Name: "a"})
	}
	return out
}()

// checkRecords compares every query of r with the model.
func checkRecords(t interface{ Fatalf(string, ...any) }, r *records, model map[netip.Addr]ipaddress.IPAddress) {
	if r.len() != len(model) {
		t.Fatalf("len %d, model %d", r.len(), len(model))
	}
	for _, a := range recordsPool {
		if _, held := model[a]; r.has(a) != held {
			t.Fatalf("has(%s) = %v, model %v", a, !held, held)
		}
	}
	for a, want := range model {
		if got, ok := r.get(a); !ok || !sameRecord(got, want) {
			t.Fatalf("get(%s) = %+v %v, want %+v", a, got, ok, want)
		}
	}
	seen := map[netip.Addr]bool{}
	r.all(func(a netip.Addr, e entry) {
		want, ok := model[a]
		if got := r.record(a, e); !ok || seen[a] || !sameRecord(got, want) {
			t.Fatalf("all: %s %+v (seen %v), model %+v %v", a, got, seen[a], want, ok)
		}
		seen[a] = true
	})
	if len(seen) != len(model) {
		t.Fatalf("all: %d records, model %d", len(seen), len(model))
	}
	for _, tb := range []*offTable{&r.v4, &r.v6, &r.owners} {
		checkTable(t, r, tb)
	}
	checkBlocks(t, r)
	inMore := 0
	for h, more := range r.more {
		if len(more) == 0 {
			t.Fatalf("more holds an empty list under %x", h)
		}
		for k, off := range more {
			if pos, ok := r.morePos[off]; !ok || pos != uint32(k) {
				t.Fatalf("morePos[%d] = %d %v, but it is at %d", off, pos, ok, k)
			}
		}
		inMore += len(more)
	}
	if len(r.morePos) != inMore {
		t.Fatalf("morePos has %d entries, more %d", len(r.morePos), inMore)
	}
	if !r.ownersIndexed && (r.owners.n != 0 || inMore != 0) {
		t.Fatalf("no lookup by owner yet, but the owner index holds %d records", r.owners.n+inMore)
	}
	checkOwnersOf(t, r, model, recordsOwners) // which builds the index if need be
}

// checkBlocks checks the invariants of the dense blocks: each counts its
// records, which are the records of addresses of its prefix at their
// index, and holds at least denseUntil of them; each is indexed under its
// own prefix, and an index is nil when it holds none; no record of a
// prefix with a block is in its family's table; denseN counts them all.
func checkBlocks(t interface{ Fatalf(string, ...any) }, r *records) {
	var blocks []*denseBlock
	if r.dense != nil {
		for s, b := range r.dense {
			if b != nil {
				if b.id != (blockID{lo: uint64(s) << 16}) {
					t.Fatalf("the block of /16 %d is %+v's", s, b.id)
				}
				blocks = append(blocks, b)
			}
		}
	}
	if (r.dense == nil) != (len(blocks) == 0) {
		t.Fatalf("%d IPv4 blocks, index nil %v", len(blocks), r.dense == nil)
	}
	n6 := 0
	for _, s := range r.dense6.slots {
		if s.b == nil {
			continue
		}
		if s.b.id != (blockID{hi: s.hi, lo: s.lo, v6: true}) || s.lo&0xffff != 0 {
			t.Fatalf("the block of /112 %x:%x is %+v's", s.hi, s.lo, s.b.id)
		}
		if f := filterBit(s.hi, s.lo); r.dense6.some[f/64]&(1<<(f%64)) == 0 || r.dense6.get(s.hi, s.lo) != s.b {
			t.Fatalf("the block of /112 %x:%x is not found", s.hi, s.lo)
		}
		blocks = append(blocks, s.b)
		n6++
	}
	if n6 != r.dense6.n || 2*n6 > len(r.dense6.slots) && n6 > 0 {
		t.Fatalf("%d IPv6 blocks, count %d, %d slots", n6, r.dense6.n, len(r.dense6.slots))
	}
	if len(blocks) != r.blocks {
		t.Fatalf("%d blocks, count %d", len(blocks), r.blocks)
	}
	total := 0
	for _, b := range blocks {
		n := 0
		for j, off := range b.offs {
			if off == 0 {
				continue
			}
			n++
			if got, want := r.parse(off).addr(), b.id.addr(uint16(j)); got != want {
				t.Fatalf("block %+v, index %d: the entry of %s, want %s", b.id, j, got, want)
			}
		}
		if n != b.n || n < r.denseUntil {
			t.Fatalf("block %+v holds %d records, counts %d (denseUntil %d)", b.id, n, b.n, r.denseUntil)
		}
		total += n
	}
	if total != r.denseN {
		t.Fatalf("blocks hold %d records, denseN %d", total, r.denseN)
	}
	for _, tb := range []*offTable{&r.v4, &r.v6} {
		for i := range tb.span() {
			if off := tb.off(i); off != 0 {
				a := r.parse(off).addr()
				if id, _ := blockIDOf(a); r.blockAt(id) != nil {
					t.Fatalf("%s is in its table, but its prefix has a block", a)
				}
			}
		}
	}
}

// blockIDOf returns the block a's record would be in, and a's index in it.
func blockIDOf(a netip.Addr) (blockID, uint16) {
	x := u128.FromAddr(a)
	return blockID{hi: x.Hi, lo: x.Lo &^ 0xffff, v6: !a.Is4()}, uint16(x.Lo)
}

// checkTable checks the invariants of tb: a control byte is full exactly
// when its slot's offset is not 0 (and a group's unused eighth offset is
// 0), and then it is the fragment of its entry's hash; each group's
// overflow count is the number of entries whose probe passed it, from
// their home to their group (at least that once saturated); so every entry
// is found by a probe from its home group.
func checkTable(t interface{ Fatalf(string, ...any) }, r *records, tb *offTable) {
	if tb.size != tb.groups*groupSlots || len(tb.slots) != tb.groups*groupWords {
		t.Fatalf("%d groups, %d slots, %d words", tb.groups, tb.size, len(tb.slots))
	}
	passedBy := make([]int, tb.groups)
	n := 0
	for i := range tb.span() {
		g, j := i/slotStride, i%slotStride
		c, off := tb.ctrlAt(i), tb.off(i)
		if j == groupSlots {
			if off != 0 {
				t.Fatalf("group %d: its unused offset is %d", g, off)
			}
			continue
		}
		if (c != ctrlEmpty) != (off != 0) || c != ctrlEmpty && c&ctrlFull == 0 {
			t.Fatalf("slot %d: control byte %#x, offset %d", i, c, off)
		}
		if off == 0 {
			continue
		}
		n++
		h := r.entryHash(tb, off)
		if uint64(c) != fragment(h) {
			t.Fatalf("slot %d: control byte %#x, fragment %#x", i, c, fragment(h))
		}
		for x := r.home(tb, h); x != g; x = tb.nextGroup(x) {
			passedBy[x]++
		}
	}
	if n != tb.n || n > tb.full && tb.size > 0 {
		t.Fatalf("%d entries, count %d, bound %d", n, tb.n, tb.full)
	}
	for g, want := range passedBy {
		got := int(overflowOf(tb.group(g)))
		if got < overflowMax && got != want { // a saturated count stays so: probes go on past it
			t.Fatalf("group %d: overflow count %d, %d entries passed it", g, got, want)
		}
	}
}

func sameRecord(x, y ipaddress.IPAddress) bool {
	return x.Addr == y.Addr && x.Parent == y.Parent && x.Created.Equal(y.Created) && x.Revision == y.Revision
}

func TestRecordsFollowAMapModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		r := newRecords()
		// Forced collisions: eight hash values, spread over the table, or
		// a single one, so that every entry is in one run that wraps.
		r.mask = rapid.SampledFrom([]uint64{^uint64(0), 0xe000_0000_0000_0000, 0}).Draw(rt, "mask")
		// Compact at the least waste, or as in production.
		r.compactAt = rapid.SampledFrom([]int{0, 200, 1 << chunkBits}).Draw(rt, "compactAt")
		// Prefetch at any size, or as in production (never, at this size).
		r.prefetchMin = rapid.SampledFrom([]int{0, prefetchFrom}).Draw(rt, "prefetchMin")
		// Blocks for /16s of a few records, which come and go as the
		// model runs (the pool's IPv4 addresses are mostly in one /16), or
		// as in production (never, at this size).
		dense := rapid.SampledFrom([][2]int{{8, 3}, {2, 1}, {2, 0}, {denseFrom, denseUntil}}).Draw(rt, "dense")
		r.denseFrom, r.denseUntil = dense[0], dense[1]
		model := map[netip.Addr]ipaddress.IPAddress{}
		rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(rt, "seed"), 0))
		rev := int64(0)

		put := func(a netip.Addr, p ipaddress.ParentRef) {
			// Created is Unix seconds as a uint32, below or above the
			// first one; revisions of any sign.
			created := int64(rng.Uint32())
			rev++
			rv := rev
			if rng.IntN(8) == 0 {
				rv = int64(rng.Uint64())
			}
			r.put(a, p, created, rv)
			model[a] = ipaddress.IPAddress{Addr: a, Parent: p, Created: unixTime(created), Revision: rv}
		}
		del := func(a netip.Addr) {
			rec, ok := r.delete(a)
			want, held := model[a]
			if ok != held || (ok && !sameRecord(rec, want)) {
				rt.Fatalf("delete(%s) = %+v %v; model %+v %v", a, rec, ok, want, held)
			}
			delete(model, a)
		}
		free := func() []netip.Addr {
			var out []netip.Addr
			for _, a := range recordsPool {
				if _, ok := model[a]; !ok {
					out = append(out, a)
				}
			}
			return out
		}
		held := func() []netip.Addr {
			out := make([]netip.Addr, 0, len(model))
			for a := range model {
				out = append(out, a)
			}
			slices.SortFunc(out, netip.Addr.Compare) // determinism
			return out
		}

		rt.Repeat(map[string]func(*rapid.T){
			"put": func(rt *rapid.T) {
				a := rapid.SampledFrom(recordsPool).Draw(rt, "addr")
				if _, ok := model[a]; ok {
					rt.Skip("held")
				}
				put(a, rapid.SampledFrom(recordsOwners).Draw(rt, "owner"))
			},
			// Many puts, all for one owner (hundreds of addresses) or for
			// owners at random.
			"putMany": func(rt *rapid.T) {
				n := rapid.IntRange(1, len(recordsPool)).Draw(rt, "n")
				one := rapid.Bool().Draw(rt, "one owner")
				p := recordsOwners[rng.IntN(len(recordsOwners))]
				fr := free()
				rng.Shuffle(len(fr), func(i, j int) { fr[i], fr[j] = fr[j], fr[i] })
				for _, a := range fr[:min(n, len(fr))] {
					if !one {
						p = recordsOwners[rng.IntN(len(recordsOwners))]
					}
					put(a, p)
				}
			},
			// A create as CreateAddressLocked makes it (with the hash its
			// lookup found), after a prefetch
			// for the same owner, or another of the same name (the very
			// same string, in another scope) or of a name as long: the
			// hash the prefetch found is reused for the same owner only.
			"prefetchThenCreate": func(rt *rapid.T) {
				a := rapid.SampledFrom(recordsPool).Draw(rt, "addr")
				if _, ok := model[a]; ok {
					rt.Skip("held")
				}
				if pre := rapid.SampledFrom(recordsOwners).Draw(rt, "prefetched"); r.ownersPrefetched() {
					r.prefetchOwner(&pre)
				}
				r.prefetchAddr(a)
				p := rapid.SampledFrom(recordsOwners).Draw(rt, "owner")
				k, known := r.knownOwnerKey(&p)
				if !known {
					k = r.ownerKeyOf(p)
				}
				created := int64(rng.Uint32())
				rev++
				// With the hash of the lookup that found a absent.
				key := validKey(a)
				t := r.tableOf(key)
				r.reserve(t)
				if sp := r.spotOf(t, key); sp.held() {
					rt.Fatalf("%s found before it was created", a)
				} else {
					r.putAt(t, key, &sp, k, p.Name, created, rev)
				}
				model[a] = ipaddress.IPAddress{Addr: a, Parent: p, Created: unixTime(created), Revision: rev}
			},
			// A prefetch that no create follows at once.
			"prefetch": func(rt *rapid.T) {
				if pre := rapid.SampledFrom(recordsOwners).Draw(rt, "prefetched"); r.ownersPrefetched() {
					r.prefetchOwner(&pre)
				}
			},
			"delete": func(rt *rapid.T) {
				del(rapid.SampledFrom(recordsPool).Draw(rt, "addr"))
			},
			// remove is delete without the record back.
			"remove": func(rt *rapid.T) {
				a := rapid.SampledFrom(recordsPool).Draw(rt, "addr")
				_, held := model[a]
				if got := r.remove(a); got != held {
					rt.Fatalf("remove(%s) = %v; model holds it: %v", a, got, held)
				}
				delete(model, a)
			},
			"deleteMany": func(rt *rapid.T) {
				h := held()
				rng.Shuffle(len(h), func(i, j int) { h[i], h[j] = h[j], h[i] })
				for _, a := range h[:rapid.IntRange(0, len(h)).Draw(rt, "n")] {
					del(a)
				}
			},
			// Release one, allocate another, at a constant size: deletions
			// all over the tables, and compactions.
			"churn": func(rt *rapid.T) {
				steps := rapid.IntRange(1, 300).Draw(rt, "steps")
				for range steps {
					h, fr := held(), free()
					if len(h) == 0 || len(fr) == 0 {
						rt.Skip("nothing to churn")
					}
					del(h[rng.IntN(len(h))])
					put(fr[rng.IntN(len(fr))], recordsOwners[rng.IntN(len(recordsOwners))])
				}
			},
			"": func(rt *rapid.T) { checkRecords(rt, r, model) },
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

// TestRecordNamesOutliveCompaction holds names returned by get and delete,
// which point into the arena, across compactions and the writes after them.
func TestRecordNamesOutliveCompaction(t *testing.T) {
	r := newRecords()
	r.compactAt = 0
	name := func(i int) string { return fmt.Sprintf("owner-%06d-%s", i, strings.Repeat("x", i%40)) }
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}) }
	const n = 5000
	for i := range n {
		r.put(addr(i), ipaddress.ParentRef{Resource: "pods", Name: name(i)}, 0, 1)
	}
	got := map[int]string{}
	for i := range n {
		if i%2 == 0 {
			rec, _ := r.delete(addr(i))
			got[i] = rec.Parent.Name
		} else {
			rec, _ := r.get(addr(i))
			got[i] = rec.Parent.Name
		}
	}
	for i := n; i < 3*n; i++ { // churn: compactions, and new entries
		r.put(addr(i), ipaddress.ParentRef{Resource: "pods", Name: strings.Repeat("y", 20)}, 0, 1)
		r.delete(addr(i - n/2))
	}
	for i, s := range got {
		if s != name(i) {
			t.Fatalf("name of record %d became %q, want %q", i, s, name(i))
		}
	}
}

// TestRecordsHeavyOwner gives one owner a thousand addresses, so its slots
// form one run far longer than a distance byte counts, among other owners,
// then releases them in random order.
func TestRecordsHeavyOwner(t *testing.T) {
	for _, mask := range []uint64{^uint64(0), 0xf000_0000_0000_0000} {
		r := newRecords()
		r.mask = mask
		r.compactAt = 0
		heavy := ipaddress.ParentRef{Resource: "services", Namespace: "lb", Name: "pool"}
		model := map[netip.Addr]ipaddress.IPAddress{}
		var mine []netip.Addr
		for i := range 1200 {
			var a netip.Addr
			if i%2 == 0 {
				a = netip.AddrFrom4([4]byte{192, 168, byte(i >> 8), byte(i)})
			} else {
				a = netip.AddrFrom16([16]byte{0x20, 0x01, 14: byte(i >> 8), 15: byte(i)})
			}
			p := heavy
			if i%4 == 3 {
				p = ipaddress.ParentRef{Resource: "pods", Namespace: "x", Name: fmt.Sprint("p", i)}
			} else {
				mine = append(mine, a)
			}
			r.put(a, p, 1700000000, int64(i+1))
			model[a] = ipaddress.IPAddress{Addr: a, Parent: p, Created: unixTime(1700000000), Revision: int64(i + 1)}
		}
		rng := rand.New(rand.NewPCG(1, 2))
		rng.Shuffle(len(mine), func(i, j int) { mine[i], mine[j] = mine[j], mine[i] })
		for k, a := range mine {
			if got := len(r.of(heavy)); got != len(mine)-k {
				t.Fatalf("mask %x: of(heavy) has %d records, want %d", mask, got, len(mine)-k)
			}
			if _, ok := r.delete(a); !ok {
				t.Fatalf("mask %x: delete(%s) found nothing", mask, a)
			}
			delete(model, a)
			if k%97 == 0 {
				checkRecords(t, r, model)
			}
		}
		checkRecords(t, r, model)
	}
}

// TestRecordsChurnStaysBounded releases and allocates at a constant size
// for many times the table's size: the tables keep their size, the arena
// is compacted, and every record stays findable.
func TestRecordsChurnStaysBounded(t *testing.T) {
	const n = 10_000
	r := newRecords()
	r.indexOwners() // the owner table churns too
	addr := func(i int) netip.Addr {
		if i%3 == 0 {
			return netip.AddrFrom16([16]byte{0xfd, 8: byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i)})
		}
		return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
	}
	owner := func(i int) ipaddress.ParentRef {
		return ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: fmt.Sprintf("payments-api-%019d", i)}
	}
	for i := range n {
		r.put(addr(i), owner(i), 1700000000, int64(i))
	}
	sizes := [3]int{r.v4.size, r.v6.size, r.owners.size}
	maxArena := 0
	for i := n; i < 12*n; i++ {
		if _, ok := r.delete(addr(i - n)); !ok {
			t.Fatalf("record %d missing", i-n)
		}
		r.put(addr(i), owner(i), 1700000000, int64(i))
		maxArena = max(maxArena, r.arena.live+r.arena.waste)
	}
	if got := [3]int{r.v4.size, r.v6.size, r.owners.size}; got != sizes {
		t.Errorf("table sizes went from %v to %v at a constant record count", sizes, got)
	}
	if limit := 2*r.arena.live + 2*r.compactAt; maxArena > limit {
		t.Errorf("arena reached %d bytes for %d live ones", maxArena, r.arena.live)
	}
	for i := 11 * n; i < 12*n; i++ {
		if rec, ok := r.get(addr(i)); !ok || rec.Parent != owner(i) || rec.Revision != int64(i) {
			t.Fatalf("get(%s) = %+v %v", addr(i), rec, ok)
		}
		if recs := r.of(owner(i)); len(recs) != 1 || recs[0].Addr != addr(i) {
			t.Fatalf("of(%v) = %+v", owner(i), recs)
		}
	}
}

// TestRecordsDoNotAllocate: put and has allocate nothing once the tables
// have grown, and delete and get only the copy of the name they return; a
// put after a delete of the same size reuses its bytes.
func TestRecordsDoNotAllocate(t *testing.T) {
	for _, indexed := range []bool{false, true} {
		t.Run(fmt.Sprint("ownersIndexed=", indexed), func(t *testing.T) { recordsDoNotAllocate(t, indexed) })
	}
}

func recordsDoNotAllocate(t *testing.T, indexed bool) {
	r := newRecords()
	if indexed {
		r.indexOwners()
	}
	addrs := []netip.Addr{netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("fd00::1:2:3")}
	p := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "payments-api-0000000000000000001"}
	for i := range 1000 {
		q := ipaddress.ParentRef{Resource: "pods", Name: fmt.Sprint("filler-", i)}
		r.put(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), q, 1, 1)
		r.put(netip.AddrFrom16([16]byte{0xfd, 14: byte(i >> 8), 15: byte(i)}), q, 1, 1)
	}
	r.put(addrs[0], p, 1, 1)
	r.put(addrs[1], p, 1, 1)
	var sink int
	allocs := testing.AllocsPerRun(500, func() {
		for _, a := range addrs {
			rec, _ := r.delete(a)
			sink += len(rec.Parent.Name)
			if r.has(a) {
				t.Fatal("deleted, still there")
			}
			r.put(a, p, 2, 2)
			rec, _ = r.get(a)
			sink += len(rec.Parent.Name)
		}
	})
	if allocs != 4 { // two names per address
		t.Errorf("%v allocations per put, delete, has and get, want 4 (the names returned)", allocs)
	}
	if r.arena.waste != 0 {
		t.Errorf("waste %d after deletes and puts of the same size", r.arena.waste)
	}
	_ = sink
}

// A name handed out stays what it was when its entry's bytes are reused by
// a record of the same size.
func TestReturnedNamesSurviveReuse(t *testing.T) {
	r := newRecords()
	a := netip.MustParseAddr("10.0.0.1")
	r.put(a, ipaddress.ParentRef{Resource: "services", Name: "aaaa"}, 1, 1)
	got, _ := r.get(a)
	gone, _ := r.delete(a)
	r.put(a, ipaddress.ParentRef{Resource: "services", Name: "bbbb"}, 1, 1)
	now, _ := r.get(a)
	if got.Parent.Name != "aaaa" || gone.Parent.Name != "aaaa" || now.Parent.Name != "bbbb" {
		t.Fatalf("names %q, %q, %q; want aaaa, aaaa, bbbb", got.Parent.Name, gone.Parent.Name, now.Parent.Name)
	}
	if r.arena.waste != 0 {
		t.Fatalf("the second entry did not reuse the first's bytes (waste %d)", r.arena.waste)
	}
}

// TestEntryDecodersAgree: the hot paths' partial decoders (ownerOf)
// read the same fields as parseBytes, for one-byte and longer varints alike.
func TestEntryDecodersAgree(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var a arena
		sid := rapid.Uint32Range(0, 1<<20).Draw(t, "sid")
		v6 := rapid.Bool().Draw(t, "v6")
		key := rapid.SliceOfN(rapid.Byte(), 4, 4).Draw(t, "key")
		hdr := uint64(sid) << 1
		if v6 {
			key = rapid.SliceOfN(rapid.Byte(), 16, 16).Draw(t, "key6")
			hdr |= 1
		}
		rev := rapid.Uint64().Draw(t, "rev")
		created := rapid.Uint32().Draw(t, "created")
		name := strings.Repeat("n", rapid.IntRange(0, 300).Draw(t, "nameLen"))
		k := addrKey{n: len(key)}
		if v6 {
			k.hi, k.lo = binary.BigEndian.Uint64(key[:8]), binary.BigEndian.Uint64(key[8:])
		} else {
			k.lo = uint64(binary.BigEndian.Uint32(key))
		}
		off, ok := a.add(hdr, k, rev, created, name)
		if !ok {
			t.Fatal("add refused an entry below the limit")
		}
		f := parseBytes(a.bytes(off), 0)
		if f.sid != sid || string(f.key) != string(key) || f.rev != rev || f.created != created || f.name != name {
			t.Fatalf("parseBytes = %+v", f)
		}
		gotSid, gotName, gotSize := ownerOf(a.bytes(off))
		if gotSid != f.sid || gotName != f.name || gotSize != f.size {
			t.Fatalf("ownerOf = %d %q %d, parseBytes %d %q %d", gotSid, gotName, gotSize, f.sid, f.name, f.size)
		}
	})
}

// A scope is freed with its last record and its index reused: owners in
// namespaces that come and go (CI, tenants) do not pile up scopes, and a
// reused index never lets one owner's query find another's records.
func TestScopesAreFreedWithTheirLastRecord(t *testing.T) {
	r := newRecords()
	owner := func(ns string) ipaddress.ParentRef {
		return ipaddress.ParentRef{Resource: "services", Namespace: ns, Name: "svc"}
	}
	keep := owner("kept")
	r.put(benchAddr(false, 0), keep, 1700000000, 1)
	for round := range 5 {
		for i := range 1000 {
			r.put(benchAddr(false, 1+i), owner(fmt.Sprintf("ns-%d-%d", round, i)), 1700000000, int64(2+i))
		}
		for i := range 1000 {
			if !r.remove(benchAddr(false, 1+i)) {
				t.Fatalf("round %d: record %d missing", round, i)
			}
		}
	}
	// Emptied scopes are freed in sweeps, keeping at most maxEmptyScopes
	// (or half the interned) at a time.
	if n := len(r.scopes); n > 1001+maxEmptyScopes {
		t.Fatalf("%d scopes for at most 1001 ever live at once", n)
	}
	if n := len(r.scopeIDs); n > 1+maxEmptyScopes {
		t.Fatalf("%d scopes interned, want the kept owner's and at most %d emptied", n, maxEmptyScopes)
	}
	// A freed index, reused by a new scope, finds only its own records.
	gone := owner("ns-4-999")
	fresh := owner("fresh")
	r.put(benchAddr(false, 5000), fresh, 1700000000, 9000)
	if got := r.of(gone); len(got) != 0 {
		t.Fatalf("records of a freed scope's owner: %v", got)
	}
	if got := r.of(fresh); len(got) != 1 || got[0].Parent != fresh {
		t.Fatalf("records of the owner in a reused scope: %v", got)
	}
	if got := r.of(keep); len(got) != 1 || got[0].Parent != keep {
		t.Fatalf("records of the kept owner: %v", got)
	}
	// The scope looked up last may be the freed one: an owner of the
	// zero scope is interned, not mistaken for it.
	r.remove(benchAddr(false, 5000))
	bare := ipaddress.ParentRef{Name: "bare"}
	r.put(benchAddr(false, 6000), bare, 1700000000, 9001)
	if got := r.of(bare); len(got) != 1 || got[0].Parent != bare {
		t.Fatalf("records of an owner of the zero scope: %v", got)
	}
}

// A refused locked create interns nothing.
// A scope whose only record is deleted and put again, over and over (a
// namespace with one Service, re-created), keeps its index: it is not
// freed and interned again on every cycle.
func TestAScopeWhoseOnlyRecordChurnsStaysInterned(t *testing.T) {
	r := newRecords()
	p := ipaddress.ParentRef{Resource: "services", Namespace: "lonely", Name: "svc"}
	r.put(benchAddr(false, 0), p, 1700000000, 1)
	id := r.scopeIDs[scope{p.Group, p.Resource, p.Namespace}]
	for i := range 10 * maxEmptyScopes {
		if !r.remove(benchAddr(false, 0)) {
			t.Fatal("record missing")
		}
		r.put(benchAddr(false, 0), p, 1700000000, int64(2+i))
	}
	if got, ok := r.scopeIDs[scope{p.Group, p.Resource, p.Namespace}]; !ok || got != id || len(r.scopes) != 1 || len(r.freeScopes) != 0 || len(r.emptyScopes) != 1 {
		t.Fatalf("scope index %d (interned %v), %d scopes, %d free, %d listed empty, after churn; want index %d kept, listed once, never freed", got, ok, len(r.scopes), len(r.freeScopes), len(r.emptyScopes), id)
	}
	if got := r.of(p); len(got) != 1 || got[0].Parent != p {
		t.Fatalf("records of the churned owner: %v", got)
	}
}

func TestARefusedCreateInternsNoScope(t *testing.T) {
	s := New()
	held := netip.MustParseAddr("10.0.0.1")
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, _, err := s.CreateAddressLocked(held, checked(ipaddress.ParentRef{Resource: "services", Namespace: "a", Name: "x"}), store.Fence{}, nil); err == nil {
		t.Fatal("a create fenced on a missing CIDR succeeded")
	}
	if n := len(s.addrs.scopeIDs); n != 0 {
		t.Fatalf("%d scopes interned by a refused create", n)
	}
}

// An entry too large for any valid owner name is freed to compaction, not
// to a free list: the lists are indexed by size.
func TestAHugeEntryCostsNoFreeListPerByte(t *testing.T) {
	r := newRecords()
	r.put(benchAddr(false, 0), ipaddress.ParentRef{Resource: "services", Namespace: "a", Name: strings.Repeat("x", 1<<20)}, 1700000000, 1)
	r.remove(benchAddr(false, 0))
	if n := len(r.arena.free); n > maxReusedSize+1 {
		t.Fatalf("%d free lists after one entry of 1 MiB", n)
	}
}

// checkOwnersOf checks r.of(p) against the model for each of owners: the
// records it yields are the model's, and they are all of p's.
func checkOwnersOf(t interface{ Fatalf(string, ...any) }, r *records, model map[netip.Addr]ipaddress.IPAddress, owners []ipaddress.ParentRef) {
	for _, p := range owners {
		var got, want []netip.Addr
		for _, rec := range r.of(p) {
			if m, ok := model[rec.Addr]; !ok || !sameRecord(rec, m) {
				t.Fatalf("of(%q): %+v, model %+v", p, rec, m)
			}
			got = append(got, rec.Addr)
		}
		for a, rec := range model {
			if rec.Parent == p {
				want = append(want, a)
			}
		}
		slices.SortFunc(got, netip.Addr.Compare)
		slices.SortFunc(want, netip.Addr.Compare)
		if !slices.Equal(got, want) {
			t.Fatalf("of(%q) = %v, model %v", p, got, want)
		}
	}
}

// ownerHashKeys are owners made to tempt a weak hash: names one byte
// apart at every position, names of zero bytes (or of one letter) that
// differ in length only, every name of up to 3 bytes of a few, a name with
// each bit flipped in turn, one name in many scopes, and counters. Each family is a group of its own.
func ownerHashKeys() map[string][]ownerKey0 {
	groups := map[string][]ownerKey0{}
	base := "service-000000000000000000000000" // the benchmark's owners
	groups["one byte apart"] = []ownerKey0{{0, base}}
	for i := range len(base) {
		for _, c := range "123456789abcdef-.z" { // all but base's '0'
			if byte(c) == base[i] {
				continue
			}
			b := []byte(base)
			b[i] = byte(c)
			groups["one byte apart"] = append(groups["one byte apart"], ownerKey0{0, string(b)})
		}
	}
	for n := range 254 {
		groups["zero bytes"] = append(groups["zero bytes"], ownerKey0{1, strings.Repeat("\x00", n)})
		groups["one letter"] = append(groups["one letter"], ownerKey0{1, strings.Repeat("a", n+1)})
	}
	const alphabet = "a0-.\x00"
	short := []string{""}
	for n := 0; n < len(short) && len(short[n]) < 3; n++ {
		for _, c := range []byte(alphabet) {
			short = append(short, short[n]+string(c))
		}
	}
	for _, name := range short[1:] {
		groups["short"] = append(groups["short"], ownerKey0{4, name})
	}
	long := []byte(strings.Repeat("0123456789abcdef", 4))
	for i := range len(long) * 8 {
		b := slices.Clone(long)
		b[i/8] ^= 1 << (i % 8)
		groups["one bit flipped"] = append(groups["one bit flipped"], ownerKey0{2, string(b)})
	}
	for sid := range uint32(512) {
		groups["one name, many scopes"] = append(groups["one name, many scopes"], ownerKey0{sid, "b"})
	}
	for i := range 1000 {
		groups["counters"] = append(groups["counters"], ownerKey0{3, fmt.Sprintf("pod-%d", i)})
	}
	return groups
}

// ownerKey0 is an owner as ownerHash takes it.
type ownerKey0 struct {
	sid  uint32
	name string
}

// The owner hash of distinct owners differs, and similar owners spread over
// the home groups of a small table and over the fragments, within twice their
// share and some: the tables' probe lengths assume as much. (For a sound
// hash, a 64-bit collision among these few thousand owners has a chance
// of about 1e-12, and the bound below is over 6 standard deviations.)
func TestOwnerHashSpreadsSimilarOwners(t *testing.T) {
	const buckets = 16
	groups := ownerHashKeys()
	for range 4 { // stores, each with its own keys
		r := newRecords()
		seen := map[uint64]ownerKey0{}
		for name, keys := range groups {
			var homes, tags [buckets]int
			small := offTable{groups: buckets}
			for _, k := range keys {
				h := r.ownerHash(k.sid, k.name)
				if other, dup := seen[h]; dup {
					t.Fatalf("%q in scope %d and %q in scope %d hash alike: %#x", k.name, k.sid, other.name, other.sid, h)
				}
				seen[h] = k
				if again := r.ownerHash(k.sid, strings.Clone(k.name)); again != h {
					t.Fatalf("%q hashes to %#x, then %#x", k.name, h, again)
				}
				homes[r.home(&small, h)]++
				tags[fragment(h)%buckets]++
			}
			share := float64(len(keys)) / buckets
			bound := int(2*share + 3*math.Sqrt(share))
			for _, spread := range []struct {
				what   string
				counts [buckets]int
			}{{"home group", homes}, {"fragment", tags}} {
				if most := slices.Max(spread.counts[:]); most > bound {
					t.Errorf("%s: %d of %d owners share a %s of %d, over %d: %v", name, most, len(keys), spread.what, buckets, bound, spread.counts)
				}
			}
		}
	}
}

// The scope looked up last is recognised by content, whatever strings hold
// it, and told apart from scopes that differ in any field, also ones whose
// strings share its bytes.
func TestTheLastScopeIsToldApartByContent(t *testing.T) {
	ns := "default-namespace"
	p := ipaddress.ParentRef{Group: "x.io", Resource: "services", Namespace: ns, Name: "a"}
	for _, tc := range []struct {
		name string
		q    ipaddress.ParentRef
		same bool
	}{
		{"the same strings", p, true},
		{"copies", ipaddress.ParentRef{Group: strings.Clone(p.Group), Resource: strings.Clone(p.Resource), Namespace: strings.Clone(ns), Name: "b"}, true},
		{"a prefix of the namespace", ipaddress.ParentRef{Group: p.Group, Resource: p.Resource, Namespace: ns[:7], Name: "a"}, false},
		{"another namespace of the same length", ipaddress.ParentRef{Group: p.Group, Resource: p.Resource, Namespace: strings.ToUpper(ns), Name: "a"}, false},
		{"another resource", ipaddress.ParentRef{Group: p.Group, Resource: "servicez", Namespace: ns, Name: "a"}, false},
		{"another group", ipaddress.ParentRef{Group: "y.io", Resource: p.Resource, Namespace: ns, Name: "a"}, false},
		{"no group", ipaddress.ParentRef{Resource: p.Resource, Namespace: ns, Name: "a"}, false},
	} {
		r := newRecords()
		r.indexOwners() // so that knownOwnerKey hashes the name too
		r.put(netip.MustParseAddr("10.0.0.1"), p, 1, 1)
		want, _ := r.knownScope(p)
		got, known := r.knownScope(tc.q)
		if same := known && got == want; same != tc.same {
			t.Errorf("%s: knownScope = %d %v, the scope put is %d: same %v, want %v", tc.name, got, known, want, same, tc.same)
		}
		// knownOwnerKey, the write path's, has the same verdict.
		wantKey := func(q ipaddress.ParentRef, sid uint32) ownerKey { return ownerKey{sid, r.ownerHash(sid, q.Name)} }
		if k, known := r.knownOwnerKey(&tc.q); known != tc.same || known && k != wantKey(tc.q, want) {
			t.Errorf("%s: knownOwnerKey = %+v %v, want %+v %v", tc.name, k, known, wantKey(tc.q, want), tc.same)
		}
		if tc.same {
			continue
		}
		// Interned, it is another scope, and the last one looked up.
		r.put(netip.MustParseAddr("10.0.0.2"), tc.q, 1, 2)
		if got, _ := r.knownScope(p); got != want {
			t.Errorf("%s: after putting it, knownScope(first) = %d, want %d", tc.name, got, want)
		}
		got, _ = r.knownScope(tc.q)
		if got == want {
			t.Errorf("%s: after putting it, it has the first scope's index %d", tc.name, got)
		}
		for _, c := range []struct {
			q   ipaddress.ParentRef
			sid uint32
		}{{p, want}, {tc.q, got}, {tc.q, got}, {p, want}} {
			if k, known := r.knownOwnerKey(&c.q); !known || k != wantKey(c.q, c.sid) {
				t.Errorf("%s: after putting it, knownOwnerKey(%+v) = %+v %v, want %+v", tc.name, c.q, k, known, wantKey(c.q, c.sid))
			}
		}
	}
}

// A table grows exactly on the put that would take it past its load bound,
// (n+1)/size > num/den, whatever its size: also after a compaction made
// it smaller.
func TestTablesGrowAtTheirLoadBound(t *testing.T) {
	r := newRecords()
	r.compactAt = 1
	tables := []*offTable{&r.v4, &r.v6, &r.owners}
	put := func(i int) {
		var sizes, ns [3]int
		for k, tb := range tables {
			sizes[k], ns[k] = tb.size, tb.n
		}
		v6 := i%3 == 0
		r.put(benchAddr(v6, i), ipaddress.ParentRef{Resource: "pods", Name: fmt.Sprintf("p%d", i)}, 1700000000, int64(i+1))
		for k, tb := range tables {
			if tb.n == ns[k] { // another family's table
				continue
			}
			num, den := tb.maxLoad()
			if grew, over := tb.size != sizes[k], (ns[k]+1)*den > sizes[k]*num; grew != over {
				t.Fatalf("put %d: table %d of %d slots with %d entries grew: %v, want %v", i, k, sizes[k], ns[k], grew, over)
			}
		}
	}
	for i := range 3000 {
		put(i)
	}
	for i := range 2900 { // most go: the arena compacts, the tables shrink
		if !r.remove(benchAddr(i%3 == 0, i)) {
			t.Fatalf("remove %d found nothing", i)
		}
	}
	if r.v4.size >= 2000 {
		t.Fatalf("the IPv4 table kept %d slots for %d entries: the test needs it shrunk", r.v4.size, r.v4.n)
	}
	for i := range 3000 {
		put(3000 + i)
	}
}

// find compares an entry's key with the address as words, after the
// entry's header: it tells apart addresses that differ in any one byte,
// behind headers of one byte and of two (scope indexes from 64 on), when
// every entry collides.
func TestFindTellsApartAddressesThatDifferInOneByte(t *testing.T) {
	r := newRecords()
	r.mask = 0 // one hash value: every entry in one run, every key compared
	// Scope 0 is services/default; scopes 1 to 64 fill, so that the
	// scopes interned next have two-byte headers (sid<<1 >= 0x80).
	r.put(netip.MustParseAddr("192.168.1.0"), ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "f"}, 1, 1)
	for i := range 64 {
		r.put(netip.AddrFrom4([4]byte{192, 168, 0, byte(i)}), ipaddress.ParentRef{Resource: "fill", Namespace: fmt.Sprintf("f-%d", i), Name: "f"}, 1, 1)
	}
	base4, base6 := [4]byte{10, 1, 2, 3}, [16]byte{0: 0xfd, 15: 1}
	// The addresses one byte away from the base ones: even bytes held,
	// odd ones missing, and the base addresses held.
	held := []netip.Addr{netip.AddrFrom4(base4), netip.AddrFrom16(base6)}
	var missing []netip.Addr
	for k := range 16 {
		b6 := base6
		b6[k] ^= 0x80
		to := &held
		if k%2 == 1 {
			to = &missing
		}
		*to = append(*to, netip.AddrFrom16(b6))
		if k < 4 {
			b4 := base4
			b4[k] ^= 0x80
			*to = append(*to, netip.AddrFrom4(b4))
		}
	}
	for j, a := range held {
		ns := "default" // scope 0: a one-byte header
		if j%2 == 1 {
			ns = fmt.Sprintf("ns-%d", j) // scope 65 on: two bytes
		}
		r.put(a, ipaddress.ParentRef{Resource: "services", Namespace: ns, Name: a.String()}, 1, 1)
	}
	for _, a := range held {
		if rec, ok := r.get(a); !ok || rec.Addr != a || rec.Parent.Name != a.String() {
			t.Errorf("get(%s) = %+v, %v; want its own record", a, rec, ok)
		}
	}
	for _, a := range missing {
		if r.has(a) {
			t.Errorf("has(%s) = true for an address never put", a)
		}
	}
}

// TestTheOwnerIndexIsBuiltByTheFirstLookupByOwner: until the first of,
// writes keep no owner index (nothing in owners or more); that lookup
// builds it from every record, whatever came before it (deletions,
// replacements, a compaction, an owner with more records than the table
// holds per owner), and every write from then on keeps it.
func TestTheOwnerIndexIsBuiltByTheFirstLookupByOwner(t *testing.T) {
	r := newRecords()
	r.compactAt = 0 // compactions along the way
	model := map[netip.Addr]ipaddress.IPAddress{}
	rng := rand.New(rand.NewPCG(5, 6))
	rev := int64(0)
	churn := func(steps int) {
		for range steps {
			a := recordsPool[rng.IntN(len(recordsPool))]
			if !a.IsValid() || a.Is4In6() || a.IsUnspecified() {
				continue
			}
			p := recordsOwners[rng.IntN(len(recordsOwners))]
			rev++
			_, held := model[a]
			switch {
			case held && rng.IntN(3) == 0:
				if !r.replace(a, p, 1700000000, rev) {
					t.Fatalf("replace(%s) refused", a)
				}
			case held:
				r.delete(a)
				delete(model, a)
				continue
			default:
				r.put(a, p, 1700000000, rev)
			}
			model[a] = ipaddress.IPAddress{Addr: a, Parent: p, Created: unixTime(1700000000), Revision: rev}
		}
	}
	churn(3000)
	heavy := recordsOwners[0]
	for i := range 2 * ownerSlots * 3 { // past what the table holds per owner
		a := netip.AddrFrom4([4]byte{192, 168, 0, byte(i + 1)})
		rev++
		r.put(a, heavy, 1700000000, rev)
		model[a] = ipaddress.IPAddress{Addr: a, Parent: heavy, Created: unixTime(1700000000), Revision: rev}
	}
	if r.ownersIndexed || r.owners.n != 0 || len(r.more) != 0 || len(r.morePos) != 0 {
		t.Fatalf("before any lookup by owner: indexed %v, %d in the table, %d in more", r.ownersIndexed, r.owners.n, len(r.morePos))
	}
	if got := len(r.of(heavy)); !r.ownersIndexed || got != len(ownersIn(model, heavy)) {
		t.Fatalf("the first of(heavy): %d records (indexed %v), model %d", got, r.ownersIndexed, len(ownersIn(model, heavy)))
	}
	if len(r.morePos) == 0 {
		t.Fatalf("the heavy owner's %d records fill no more", len(ownersIn(model, heavy)))
	}
	checkRecords(t, r, model)
	churn(3000)
	checkRecords(t, r, model)
}

// ownersIn returns the addresses p holds in model.
func ownersIn(model map[netip.Addr]ipaddress.IPAddress, p ipaddress.ParentRef) []netip.Addr {
	var out []netip.Addr
	for a, rec := range model {
		if rec.Parent == p {
			out = append(out, a)
		}
	}
	return out
}

// WithOwnerIndex: the store keeps its owner index from the first record,
// with no lookup by owner; without it, it keeps none until one.
func TestWithOwnerIndexKeepsTheIndexFromTheStart(t *testing.T) {
	ctx := t.Context()
	for _, indexed := range []bool{false, true} {
		var opts []Option
		if indexed {
			opts = append(opts, WithOwnerIndex())
		}
		s := New(opts...)
		recs := []ipaddress.IPAddress{
			{Addr: netip.MustParseAddr("10.0.0.1"), Parent: recordsOwners[0]},
			{Addr: netip.MustParseAddr("fd00::1"), Parent: recordsOwners[0]},
			{Addr: netip.MustParseAddr("10.0.0.2"), Parent: recordsOwners[1]},
		}
		if _, err := s.CreateAddresses(ctx, recs); err != nil {
			t.Fatal(err)
		}
		want := 0
		if indexed {
			want = len(recs)
		}
		if got := s.addrs.owners.n + len(s.addrs.morePos); s.addrs.ownersIndexed != indexed || got != want {
			t.Fatalf("WithOwnerIndex %v: indexed %v, %d records in the owner index; want %v, %d", indexed, s.addrs.ownersIndexed, got, indexed, want)
		}
		got, err := s.AddressesOf(ctx, recordsOwners[0])
		if err != nil || len(got) != 2 || got[0].Addr != recs[0].Addr || got[1].Addr != recs[1].Addr {
			t.Fatalf("WithOwnerIndex %v: AddressesOf = %+v, %v", indexed, got, err)
		}
	}
}

// uvarintSize is the length binary.AppendUvarint writes, at every bit
// length and both ends of it.
func TestUvarintSizeIsTheEncodedLength(t *testing.T) {
	for shift := range 64 {
		for _, x := range []uint64{1 << shift, 1<<shift - 1, 1<<shift + 1, ^uint64(0) >> shift} {
			if got, want := uvarintSize(x), len(binary.AppendUvarint(nil, x)); got != want {
				t.Fatalf("uvarintSize(%#x) = %d, want %d", x, got, want)
			}
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

// A /16 (IPv4) or /112 (IPv6) that comes to hold denseFrom records is
// indexed by a block from a growth of its table on (once the table has
// doubled since a count that gave no block: here the scattered records'),
// and goes back to the table below denseUntil; a scattered set of as many
// records gets no block. Every record stays readable throughout.
func TestAFullPrefixIsIndexedByABlock(t *testing.T) {
	for _, fam := range []struct {
		name string
		// addr returns address j of prefix i (an IPv4 /16 or IPv6 /112).
		addr func(i, j int) netip.Addr
	}{
		{"ipv4", func(i, j int) netip.Addr {
			return netip.AddrFrom4([4]byte{byte(i >> 8), byte(i), byte(j >> 8), byte(j)})
		}},
		{"ipv6", func(i, j int) netip.Addr {
			return netip.AddrFrom16([16]byte{0: 0xfd, 11: byte(i >> 16), 12: byte(i >> 8), 13: byte(i), 14: byte(j >> 8), 15: byte(j)})
		}},
	} {
		t.Run(fam.name, func(t *testing.T) {
			r := newRecords()
			model := map[netip.Addr]ipaddress.IPAddress{}
			p := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "a"}
			put := func(a netip.Addr) {
				if _, held := model[a]; held {
					return // the store checks the address is free first
				}
				r.put(a, p, 1, 1)
				model[a] = ipaddress.IPAddress{Addr: a, Parent: p, Created: unixTime(1), Revision: 1}
			}
			// Scattered: one address in each of 40k prefixes (the dense
			// one, 0x0a01, among them).
			for i := range 40000 {
				put(fam.addr(i, 0x0102))
			}
			if r.denseN != 0 || r.dense != nil || r.dense6.n != 0 {
				t.Fatalf("40k records in 40k prefixes: %d of them in blocks", r.denseN)
			}
			dense, _ := blockIDOf(fam.addr(0x0a01, 0))
			// Dense: every address of prefix 0x0a01 but a few.
			for j := range 1 << 16 {
				if j%64 != 0 {
					put(fam.addr(0x0a01, j))
				}
			}
			b := r.blockAt(dense)
			if b == nil || b.n != 1<<16-1<<10 || r.denseN != b.n {
				t.Fatalf("%s, 64512 records: block %v, denseN %d", fam.addr(0x0a01, 0), b != nil, r.denseN)
			}
			checkRecords(t, r, model)
			// Down to denseUntil: still a block; one fewer: back to the
			// table.
			for j := range 1 << 16 {
				a := fam.addr(0x0a01, j)
				if _, held := model[a]; !held || r.denseN == denseUntil {
					continue
				}
				if _, ok := r.delete(a); !ok {
					t.Fatalf("delete(%s) found nothing", a)
				}
				delete(model, a)
			}
			if r.blockAt(dense) == nil {
				t.Fatalf("%d records in the block: it went back to the table too soon", denseUntil)
			}
			for j := range 1 << 16 {
				if a := fam.addr(0x0a01, j); r.has(a) {
					r.delete(a)
					delete(model, a)
					break
				}
			}
			if r.dense != nil || r.dense6.n != 0 || r.denseN != 0 {
				t.Fatalf("%d records in the prefix: still in a block", denseUntil-1)
			}
			checkRecords(t, r, model)
		})
	}
}

// Prefixes that share densify's counters, none holding denseFrom records,
// get no block, however full the counters they share: 3 records in each of
// 300k /112s, with blocks from 4. Then a thousand of them get a fourth
// record and a block each at a growth, and half of them lose one and go
// back to the table.
func TestCrowdedCountersGiveNoBlock(t *testing.T) {
	r := newRecords()
	r.denseFrom, r.denseUntil = 4, 4
	p := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "a"}
	addr := func(i, j int) netip.Addr {
		return netip.AddrFrom16([16]byte{0: 0xfd, 11: byte(i >> 16), 12: byte(i >> 8), 13: byte(i), 15: byte(j)})
	}
	for i := range 300000 {
		for j := range 3 {
			r.put(addr(i, j), p, 1, 1)
		}
	}
	if r.dense6.n != 0 || r.denseN != 0 {
		t.Fatalf("%d records in %d blocks", r.denseN, r.dense6.n)
	}
	for i := range 1000 {
		r.put(addr(i*7, 3), p, 1, 1)
	}
	// Scattered records, one a /112, until the table has grown past twice
	// what it held at its last count (sparseAt).
	for i, n := 0, r.v6.n; r.v6.n < 2*n+1 || r.v6.n < r.v6.full; i++ {
		r.put(netip.AddrFrom16([16]byte{0: 0xfe, 11: byte(i >> 16), 12: byte(i >> 8), 13: byte(i)}), p, 1, 1)
	}
	r.put(netip.AddrFrom16([16]byte{0: 0xff}), p, 1, 1) // the growth
	if r.dense6.n != 1000 || r.denseN != 4000 {
		t.Fatalf("1000 /112s of 4 records: %d blocks holding %d", r.dense6.n, r.denseN)
	}
	checkBlocks(t, r)
	for i := range 1000 {
		if i%2 == 0 {
			if !r.remove(addr(i*7, 2)) {
				t.Fatalf("remove(%s) found nothing", addr(i*7, 2))
			}
		}
	}
	checkBlocks(t, r)
	for i := range 1000 {
		for j := range 4 {
			inBlock := i%2 == 1
			if b, _ := r.blockOfKey(validKey(addr(i*7, j))); (b != nil) != inBlock || r.has(addr(i*7, j)) != (j != 2 || inBlock) {
				t.Fatalf("%s: block %v, held %v", addr(i*7, j), b != nil, r.has(addr(i*7, j)))
			}
		}
	}
}

// A block that goes back to v4 right after a compaction (an arena with no
// waste, which a growth of v4 rehashes by reading in order) must not have
// its records read from the arena as well as put back one by one: here
// the v4 table is at its bound when the last long-named record of
// 10.0.0.0/16 goes.
func TestABlockGoesBackToAFullTableAfterACompaction(t *testing.T) {
	r := newRecords()
	r.compactAt, r.denseFrom, r.denseUntil = 0, 2, 2
	model := map[netip.Addr]ipaddress.IPAddress{}
	put := func(a netip.Addr, name string) {
		p := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: name}
		r.put(a, p, 1, 1)
		model[a] = ipaddress.IPAddress{Addr: a, Parent: p, Created: unixTime(1), Revision: 1}
	}
	long := strings.Repeat("n", 300)
	for i := range 3 {
		put(netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), long)
	}
	put(netip.AddrFrom4([4]byte{10, 0, 0, 4}), "a") // the growth that makes the block
	if b, _ := r.blockOfKey(validKey(netip.AddrFrom4([4]byte{10, 0, 0, 4}))); b == nil || b.n != 4 {
		t.Fatalf("10.0.0.0/16 has no block of 4 records")
	}
	for i := range r.v4.full {
		put(netip.AddrFrom4([4]byte{byte(11 + i), 0, 0, 1}), "b")
	}
	for i := range 3 {
		a := netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)})
		if _, ok := r.delete(a); !ok {
			t.Fatalf("delete(%s) found nothing", a)
		}
		delete(model, a)
	}
	if r.dense != nil {
		t.Fatalf("one record left in 10.0.0.0/16: still in a block")
	}
	checkRecords(t, r, model)
}

// No record has the zero Addr or a zoned address (CreateAddresses refuses
// both, and as words they are "::" and the address without its zone): a
// lookup of one finds nothing and a delete of one removes nothing, with
// the records of "::" and fe80::1 in a table or in blocks.
func TestAZeroOrZonedAddressFindsNoRecord(t *testing.T) {
	zero, unzoned := netip.MustParseAddr("::"), netip.MustParseAddr("fe80::1")
	for _, inBlocks := range []bool{false, true} {
		t.Run(fmt.Sprintf("blocks=%t", inBlocks), func(t *testing.T) {
			r := newRecords()
			r.denseFrom, r.denseUntil = 4, 4
			p := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "a"}
			r.put(zero, p, 1, 1)
			r.put(unzoned, p, 1, 1)
			if inBlocks { // growths enough to give both /112s blocks
				for i := 2; i < 2000; i++ {
					r.put(zero.Next(), p, 1, 1)
					zero, unzoned = zero.Next(), unzoned.Next()
					r.put(unzoned, p, 1, 1)
				}
				zero, unzoned = netip.MustParseAddr("::"), netip.MustParseAddr("fe80::1")
			}
			for _, a := range []netip.Addr{zero, unzoned} {
				if b, _ := r.blockOfKey(validKey(a)); (b != nil) != inBlocks {
					t.Fatalf("%s: in a block %v, want %v", a, b != nil, inBlocks)
				}
			}
			n := r.len()
			for _, a := range []netip.Addr{{}, unzoned.WithZone("eth0")} {
				if r.has(a) {
					t.Errorf("has(%q) = true", a)
				}
				if _, ok := r.get(a); ok {
					t.Errorf("get(%q) found a record", a)
				}
				if r.remove(a) {
					t.Errorf("remove(%q) removed a record", a)
				}
				if _, ok := r.delete(a); ok {
					t.Errorf("delete(%q) deleted a record", a)
				}
			}
			if r.len() != n || !r.has(zero) || !r.has(unzoned) {
				t.Fatalf("after lookups of the zero Addr and %s: %d records of %d, :: held %v, %s held %v",
					unzoned.WithZone("eth0"), r.len(), n, r.has(zero), unzoned, r.has(unzoned))
			}
		})
	}
}
