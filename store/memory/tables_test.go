package memory

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/netipam/netipam/ipaddress"
)

// TestTablesWrapAndSaturate puts records whose address and owner hashes all
// have their home in the last slots of tables of a fixed size, so that one
// run of full slots wraps around the end and holds distances past 255
// (saturated bytes), then deletes them in random order, putting some back
// on the way. The random data of the model tests rarely makes either:
// every probe, move and shift path that handles them is checked here
// against the table invariants and a map.
func TestTablesWrapAndSaturate(t *testing.T) {
	const size, n, low, near = 1024, 300, 265, 4
	for _, v6 := range []bool{false, true} {
		r := newRecords()
		r.seed, r.ownerKeys = 1, [2]uint64{2, 3}
		tb := r.table(benchAddr(v6, 0))
		*tb = newTable(false, size)
		r.owners = newTable(true, size)
		sid := r.scopeID(ipaddress.ParentRef{Resource: "services", Namespace: "wrap"})

		// Most have their home at size-near, the others after it: the
		// others are put last, so they probe past saturated entries that
		// are farther from home than they are, and must go after them.
		var atLow, after []netip.Addr
		for i := 0; len(atLow) < low || len(after) < n-low; i++ {
			a := benchAddr(v6, i)
			_, kb, kn := entryKey(a, 0)
			switch home := r.home(tb, r.addrHash(kb[:kn])); {
			case home == size-near && len(atLow) < low:
				atLow = append(atLow, a)
			case home > size-near && len(after) < n-low:
				after = append(after, a)
			}
		}
		addrs := append(atLow, after...)
		var ownersAtLow, ownersAfter []ipaddress.ParentRef
		for i := 0; len(ownersAtLow) < low || len(ownersAfter) < n-low; i++ {
			p := ipaddress.ParentRef{Resource: "services", Namespace: "wrap", Name: fmt.Sprint("owner-", i)}
			switch home := r.home(&r.owners, r.ownerHash(sid, p.Name)); {
			case home == size-near && len(ownersAtLow) < low:
				ownersAtLow = append(ownersAtLow, p)
			case home > size-near && len(ownersAfter) < n-low:
				ownersAfter = append(ownersAfter, p)
			}
		}
		owners := append(ownersAtLow, ownersAfter...)

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
		// The last owner, whose slot is past saturated ones, takes two
		// more records: one more slot in the table, then one in more.
		heavy := owners[n-1]
		extra := []netip.Addr{benchAddr(v6, 1<<20), benchAddr(v6, 1<<20+1)}
		for _, a := range extra {
			rev++
			r.put(a, heavy, 1700000000, rev)
			model[a] = ipaddress.IPAddress{Addr: a, Parent: heavy, Created: unixTime(1700000000), Revision: rev}
		}
		inTable := 0
		for i := range size {
			if off := r.owners.off(i); off != 0 {
				if f := r.parse(off); f.sid == sid && f.name == heavy.Name {
					inTable++
				}
			}
		}
		if h := r.ownerHash(sid, heavy.Name); inTable != ownerSlots || len(r.more[h]) != 1 {
			t.Fatalf("v6 %v: owner of 3 records has %d owner slots and %d in more, want %d and 1", v6, inTable, len(r.more[h]), ownerSlots)
		}
		checkRecords(t, r, model)
		checkOwnersOf(t, r, model, owners)
		for _, x := range []*offTable{tb, &r.owners} {
			if x.size != size {
				t.Fatalf("v6 %v: a table grew to %d slots: the test needs %d", v6, x.size, size)
			}
			// Slot 0 holds an entry of the wrapped run, and the run holds
			// saturated distances.
			if x.slot(0)[4] == 0 || x.slot(n - near - 1)[4] != 255 {
				t.Fatalf("v6 %v: the run does not wrap and saturate: slot 0 distance %d, slot %d distance %d",
					v6, x.slot(0)[4], n-near-1, x.slot(n - near - 1)[4])
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
			if step%3 == 0 && step < n/2 { // some come back, into another place of the run
				put(k)
				order = append(order, k)
			}
			checkTable(t, r, tb)
			checkTable(t, r, &r.owners)
			if r.has(addrs[k]) != (model[addrs[k]].Addr.IsValid()) {
				t.Fatalf("v6 %v: has(%s) after its delete disagrees with the model", v6, addrs[k])
			}
			if step%50 == 0 {
				checkRecords(t, r, model)
			}
		}
		for _, a := range extra {
			if _, ok := r.delete(a); !ok {
				t.Fatalf("v6 %v: delete(%s) found nothing", v6, a)
			}
			delete(model, a)
		}
		checkRecords(t, r, model)
		checkOwnersOf(t, r, model, owners)
		if r.len() != 0 {
			t.Fatalf("v6 %v: %d records left", v6, r.len())
		}
	}
}
