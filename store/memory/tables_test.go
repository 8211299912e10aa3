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

// TestTablesWrapAndReuseTombstones puts records whose address and owner
// hashes have their home in group 7/8 of tables of a fixed size, so that
// their probes run through the full groups to the end and wrap around to
// the first ones, then records whose home is group 0, which probe past
// the wrapped ones; it then deletes them in random order, which leaves
// tombstones in the full groups, and puts some back, which reuse them.
// Every step is checked against the table invariants and a map.
func TestTablesWrapAndReuseTombstones(t *testing.T) {
	const size, atLast, atFirst = 512, 180, 40
	const groups = size / groupSlots
	const last = groups * 7 / 8
	for _, v6 := range []bool{false, true} {
		r := newRecords()
		r.seed, r.ownerKeys, r.mask = 1, [2]uint64{2, 3}, wrapMask
		tb := r.table(benchAddr(v6, 0))
		*tb = newTable(false, size)
		r.owners = newTable(true, size)
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
			_, kb, kn := entryKey(benchAddr(v6, i), 0)
			return r.home(tb, r.addrHash(kb[:kn]))
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
			if matchFree(x.group(0)) != 0 || matchFree(x.group(groups-1)) != 0 {
				t.Fatalf("v6 %v: the run does not wrap: control words %#x ... %#x", v6, x.group(0), x.group(groups-1))
			}
		}

		tombstones := func(x *offTable) int {
			d := 0
			for i := range x.size {
				if x.ctrlAt(i) == ctrlDeleted {
					d++
				}
			}
			return d
		}
		rng := rand.New(rand.NewPCG(3, 4))
		order := rng.Perm(n)
		reused := 0
		for step := 0; step < len(order); step++ {
			k := order[step]
			if _, ok := r.delete(addrs[k]); !ok {
				t.Fatalf("v6 %v: delete(%s) found nothing", v6, addrs[k])
			}
			delete(model, addrs[k])
			if step%3 == 0 && step < n/2 { // some come back, into a tombstone of the run
				dead, left := tombstones(tb), tb.growthLeft
				put(k)
				order = append(order, k)
				if tombstones(tb) == dead-1 {
					reused++
					if tb.growthLeft != left {
						t.Fatalf("v6 %v: a put into a tombstone took growthLeft from %d to %d", v6, left, tb.growthLeft)
					}
				}
			}
			checkTable(t, r, tb)
			checkTable(t, r, &r.owners)
			if r.has(addrs[k]) != (model[addrs[k]].Addr.IsValid()) {
				t.Fatalf("v6 %v: has(%s) after its delete disagrees with the model", v6, addrs[k])
			}
			if step%25 == 0 {
				checkRecords(t, r, model)
				checkOwnersOf(t, r, model, owners)
			}
		}
		if reused < n/12 {
			t.Fatalf("v6 %v: %d puts reused a tombstone, want most of the %d put back", v6, reused, n/6)
		}
		checkRecords(t, r, model)
		checkOwnersOf(t, r, model, owners)
		if r.len() != 0 {
			t.Fatalf("v6 %v: %d records left", v6, r.len())
		}
		if tb.size != size || r.owners.size != size {
			t.Fatalf("v6 %v: tables of %d and %d slots, want %d", v6, tb.size, r.owners.size, size)
		}
	}
}

// TestTablesChurnWithTombstonesKeepsTheirSize releases and allocates at a
// constant number of records, with forced collisions so that most
// deletions leave tombstones, for many times the tables' size: the tables
// are rebuilt at their size now and then, which drops the tombstones, and
// never grow. (The arena's waste stays under compactAt: no compaction
// rebuilds the owner table.)
func TestTablesChurnWithTombstonesKeepsTheirSize(t *testing.T) {
	const n, rounds = 300, 40
	r := newRecords()
	r.mask = wrapMask
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
	var sizes [3]int
	var ctrls [3]*uint32
	var rebuilt [3]int
	for k, tb := range tables {
		sizes[k], ctrls[k] = tb.size, &tb.slots[0]
	}
	for i := n; i < n+rounds*n; i++ {
		if _, ok := r.delete(addr(i - n)); !ok {
			t.Fatalf("record %d missing", i-n)
		}
		delete(model, addr(i-n))
		put(i)
		for k, tb := range tables {
			if tb.size != sizes[k] {
				t.Fatalf("put %d: table %d went from %d to %d slots at %d records", i, k, sizes[k], tb.size, r.len())
			}
			if &tb.slots[0] != ctrls[k] {
				rebuilt[k]++
				ctrls[k] = &tb.slots[0]
			}
		}
		if i%(5*n) == 0 {
			checkRecords(t, r, model)
		}
	}
	checkRecords(t, r, model)
	if rebuilt[0] == 0 || rebuilt[2] == 0 {
		t.Fatalf("rebuilds %v in %d puts and deletes: the test needs tombstones to pile up in the IPv4 and owner tables", rebuilt, rounds*n)
	}
	t.Logf("rebuilds at the same size: %v", rebuilt)
}
