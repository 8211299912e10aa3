package memory

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/netipam/netipam/ipaddress"
)

// wrapMask keeps 3 high bits of every hash, so there are 8 home groups
// (the last one 7/8 of the way through a table), and the 7 bits of the
// fragment: forced collisions whose fragments still differ.
const wrapMask = 0xe000_0000_0000_007f

// TestTablesWrapAndCountOverflows puts records whose address and owner
// hashes have their home in group 7/8 of tables of a fixed size, so that
// their probes run through the full groups to the end and wrap around to
// the first ones, then records whose home is group 0, which probe past
// the wrapped ones; it then deletes them in random order, which uncounts
// them from the overflow counts of the groups they passed, and puts some
// back. Every step is checked against the table invariants (the counts
// among them) and a map.
func TestTablesWrapAndCountOverflows(t *testing.T) {
	const size, atLast, atFirst = 511, 180, 40
	const groups = size / groupSlots
	const last = groups * 7 / 8
	for _, v6 := range []bool{false, true} {
		r := newRecords()
		r.seed, r.ownerKeys, r.mask = 1, [2]uint64{2, 3}, wrapMask
		tb := r.tableOf(validKey(benchAddr(v6, 0)))
		*tb = newTable(false, size)
		r.owners, r.ownersIndexed = newTable(true, size), true // the index of no records
		sid := r.scopeID(ipaddress.ParentRef{Resource: "services", Namespace: "wrap"})

		pick := func(home func(i int) int) []int {
			var lastOnes, firstOnes []int
			for i := 0; len(lastOnes) < atLast || len(firstOnes) < atFirst; i++ {
				switch g := home(i); {
				case g == last && len(lastOnes) < atLast:
					lastOnes = append(lastOnes, i)
				case g == 0 && len(firstOnes) < atFirst:
					firstOnes = append(firstOnes, i)
				}
			}
			return append(lastOnes, firstOnes...)
		}
		var addrs []netip.Addr
		for _, i := range pick(func(i int) int {
			return r.home(tb, r.keyHash(validKey(benchAddr(v6, i))))
		}) {
			addrs = append(addrs, benchAddr(v6, i))
		}
		ownerOfIndex := func(i int) ipaddress.ParentRef {
			return ipaddress.ParentRef{Resource: "services", Namespace: "wrap", Name: fmt.Sprint("owner-", i)}
		}
		var owners []ipaddress.ParentRef
		for _, i := range pick(func(i int) int { return r.home(&r.owners, r.ownerHash(sid, ownerOfIndex(i).Name)) }) {
			owners = append(owners, ownerOfIndex(i))
		}
		n := len(addrs)

		model := map[netip.Addr]ipaddress.IPAddress{}
		rev := int64(0)
		put := func(k int) {
			rev++
			r.put(addrs[k], owners[k], 1700000000, rev)
			model[addrs[k]] = ipaddress.IPAddress{Addr: addrs[k], Parent: owners[k], Created: unixTime(1700000000), Revision: rev}
		}
		for k := range n {
			put(k)
		}
		checkRecords(t, r, model)
		checkOwnersOf(t, r, model, owners)
		for _, x := range []*offTable{tb, &r.owners} {
			if x.size != size {
				t.Fatalf("v6 %v: a table has %d slots: the test needs %d", v6, x.size, size)
			}
			// The run from the last home group wraps: group 0 is full.
			if matchEmpty(x.group(0)) != 0 || matchEmpty(x.group(groups-1)) != 0 {
				t.Fatalf("v6 %v: the run does not wrap: control words %#x ... %#x", v6, x.group(0), x.group(groups-1))
			}
		}

		rng := rand.New(rand.NewPCG(3, 4))
		order := rng.Perm(n)
		for step := 0; step < len(order); step++ {
			k := order[step]
			if _, ok := r.delete(addrs[k]); !ok {
				t.Fatalf("v6 %v: delete(%s) found nothing", v6, addrs[k])
			}
			delete(model, addrs[k])
			if step%3 == 0 && step < n/2 { // some come back, into the run
				put(k)
				order = append(order, k)
			}
			checkTable(t, r, tb)
			checkTable(t, r, &r.owners)
			unsaturated(t, tb, &r.owners)
			if r.has(addrs[k]) != (model[addrs[k]].Addr.IsValid()) {
				t.Fatalf("v6 %v: has(%s) after its delete disagrees with the model", v6, addrs[k])
			}
			if step%25 == 0 {
				checkRecords(t, r, model)
				checkOwnersOf(t, r, model, owners)
			}
		}
		checkRecords(t, r, model)
		checkOwnersOf(t, r, model, owners)
		if r.len() != 0 {
			t.Fatalf("v6 %v: %d records left", v6, r.len())
		}
		if tb.size != size || r.owners.size != size {
			t.Fatalf("v6 %v: tables of %d and %d slots, want %d", v6, tb.size, r.owners.size, size)
		}
		for _, x := range []*offTable{tb, &r.owners} {
			for g := range x.groups {
				if c := x.group(g); c != 0 {
					t.Fatalf("v6 %v: emptied, group %d has control word %#x", v6, g, c)
				}
			}
		}
	}
}

// TestTablesSaturatedOverflowCountsStaySound forces every hash home to
// group 0, so that its overflow count saturates and those after it fill
// up: lookups, of present and absent addresses, must still find what is
// there and end; deleting every record then leaves the saturated groups
// so (a probe still goes past them) and the rest at 0.
func TestTablesSaturatedOverflowCountsStaySound(t *testing.T) {
	const n = 400
	r := newRecords()
	r.mask = 0x7f // home group 0 for all, fragments apart
	model := map[netip.Addr]ipaddress.IPAddress{}
	var owners []ipaddress.ParentRef
	for i := range n {
		a := netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
		p := ipaddress.ParentRef{Resource: "services", Namespace: "full", Name: fmt.Sprint("svc-", i)}
		r.put(a, p, 1700000000, int64(i+1))
		model[a] = ipaddress.IPAddress{Addr: a, Parent: p, Created: unixTime(1700000000), Revision: int64(i + 1)}
		owners = append(owners, p)
	}
	checkRecords(t, r, model)
	checkOwnersOf(t, r, model, owners)
	if c := overflowOf(r.v4.group(0)); c != overflowMax {
		t.Fatalf("group 0's overflow count is %d after %d puts homed there, want it saturated", c, n)
	}
	for i := n; i < n+50; i++ {
		if a := netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}); r.has(a) {
			t.Fatalf("has(%s), never put", a)
		}
	}
	for i := range n {
		a := netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
		if !r.remove(a) {
			t.Fatalf("remove(%s) found nothing", a)
		}
		delete(model, a)
		if i%37 == 0 {
			checkRecords(t, r, model)
		}
	}
	checkRecords(t, r, model)
	for _, x := range []*offTable{&r.v4, &r.owners} {
		for g := range x.groups {
			// The records fill the groups in turn from group 0; group g
			// was passed by all but those in groups 0 to g.
			want := uint64(0)
			if n-groupSlots*(g+1) >= overflowMax {
				want = overflowMax
			}
			if c := x.group(g); c != want<<56 {
				t.Fatalf("emptied, group %d has control word %#x, want %#x", g, c, want<<56)
			}
		}
	}
}

// TestTablesChurnKeepsTheirSize releases and allocates at a constant
// number of records, with forced collisions, for many times the tables'
// size: with no tombstones, the tables neither grow nor are rebuilt, and
// their overflow counts stay exact. (The arena's waste stays under
// compactAt: no compaction rebuilds the owner table.)
func TestTablesChurnKeepsTheirSize(t *testing.T) {
	const n, rounds = 300, 40
	r := newRecords()
	r.mask = wrapMask
	r.indexOwners() // from the first put: the owner table churns too
	addr := func(i int) netip.Addr {
		if i%3 == 0 {
			return netip.AddrFrom16([16]byte{0xfd, 12: byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i)})
		}
		return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
	}
	owner := func(i int) ipaddress.ParentRef {
		return ipaddress.ParentRef{Resource: "services", Namespace: "churn", Name: fmt.Sprint("svc-", i)}
	}
	model := map[netip.Addr]ipaddress.IPAddress{}
	put := func(i int) {
		r.put(addr(i), owner(i), 1700000000, int64(i+1))
		model[addr(i)] = ipaddress.IPAddress{Addr: addr(i), Parent: owner(i), Created: unixTime(1700000000), Revision: int64(i + 1)}
	}
	for i := range n {
		put(i)
	}
	tables := [...]*offTable{&r.v4, &r.v6, &r.owners}
	var slots [3]*uint32
	for k, tb := range tables {
		slots[k] = &tb.slots[0]
	}
	for i := n; i < n+rounds*n; i++ {
		if _, ok := r.delete(addr(i - n)); !ok {
			t.Fatalf("record %d missing", i-n)
		}
		delete(model, addr(i-n))
		put(i)
		for k, tb := range tables {
			if &tb.slots[0] != slots[k] {
				t.Fatalf("put %d: table %d was rebuilt (now %d slots) at a constant %d records", i, k, tb.size, r.len())
			}
		}
		if i%(5*n) == 0 {
			checkRecords(t, r, model)
		}
	}
	checkRecords(t, r, model)
	unsaturated(t, tables[:]...)
}

// unsaturated fails if a group of the tables has a saturated overflow
// count, where the test puts far fewer entries past any group than that:
// checkTable lets a saturated count be, so one that wrapped below zero
// would go unseen.
func unsaturated(t *testing.T, tables ...*offTable) {
	t.Helper()
	for k, tb := range tables {
		for g := range tb.groups {
			if overflowOf(tb.group(g)) == overflowMax {
				t.Fatalf("table %d, group %d: overflow count saturated", k, g)
			}
		}
	}
}

// ctrlAt returns the control byte of slot i.
func (t *offTable) ctrlAt(i int) uint8 { return uint8(t.group(i/slotStride) >> (i % slotStride * 8)) }
