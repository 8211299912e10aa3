package memory

import (
	"encoding/binary"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/netipam/netipam/ipaddress"
)

// FuzzRecordsFollowAMapModel is TestRecordsFollowAMapModel driven by the
// fuzzer's coverage instead of rapid's generator: the input is a program of
// puts, deletes, removes and checks on the records of one table
// configuration, and after it (and at every check) each query of the
// records must agree with a map. Owners come from recordsOwners or are made
// from the input (any bytes, any length, so long names and entries past
// maxReusedSize), so that no record is lost, altered, or found twice.
func FuzzRecordsFollowAMapModel(f *testing.F) {
	f.Add([]byte{0, 0, 0x00, 1, 2, 0x01, 1, 0x05})
	f.Add([]byte{1, 1, 0x00, 0, 0, 0x00, 1, 1, 0x00, 2, 2, 0x03, 0, 0x02, 1, 0x05})
	f.Add([]byte{2, 0, 0x04, 7, 3, 'a', 'b', 'c', 0x04, 8, 3, 'a', 'b', 'c', 0x01, 7, 0x05})
	f.Add(append([]byte{2, 2, 0x04, 9, 200}, strings.Repeat("x", 200)...))
	prog := []byte{1, 0}
	for i := range 120 {
		prog = append(prog, 0x00, byte(i), byte(i))
	}
	for i := range 120 {
		prog = append(prog, 0x01, byte(i*7))
	}
	f.Add(append(prog, 0x05))
	// The same with blocks for /16s of 8 records (and compaction at 200
	// bytes of waste).
	f.Add(append([]byte{1, 4}, append(prog[2:], 0x05)...))

	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 2 || len(in) > 8192 {
			return
		}
		r := newRecords()
		r.mask = [...]uint64{^uint64(0), 0xe000_0000_0000_0000, 0}[in[0]%3]
		r.compactAt = [...]int{0, 200, 1 << chunkBits}[in[1]%3]
		dense := [...][2]int{{denseFrom, denseUntil}, {8, 3}, {2, 1}}[in[1]/3%3]
		r.denseFrom, r.denseUntil = dense[0], dense[1]
		in = in[2:]
		model := map[netip.Addr]ipaddress.IPAddress{}
		custom := map[ipaddress.ParentRef]bool{}
		rev := int64(0)
		next := func() byte {
			if len(in) == 0 {
				return 0
			}
			b := in[0]
			in = in[1:]
			return b
		}
		addr := func() netip.Addr { return recordsPool[int(next())%len(recordsPool)] }
		put := func(a netip.Addr, p ipaddress.ParentRef) {
			if _, held := model[a]; held {
				return // the store checks the address is free first
			}
			var c [4]byte
			for i := range c {
				c[i] = next()
			}
			created := int64(binary.LittleEndian.Uint32(c[:]))
			rev++
			r.put(a, p, created, rev)
			model[a] = ipaddress.IPAddress{Addr: a, Parent: p, Created: unixTime(created), Revision: rev}
		}
		for len(in) > 0 {
			switch op := next(); op % 6 {
			case 0:
				a := addr()
				put(a, recordsOwners[int(next())%len(recordsOwners)])
			case 1:
				a := addr()
				rec, ok := r.delete(a)
				want, held := model[a]
				if ok != held || ok && !sameRecord(rec, want) {
					t.Fatalf("delete(%s) = %+v %v; model %+v %v", a, rec, ok, want, held)
				}
				delete(model, a)
			case 2:
				a := addr()
				_, held := model[a]
				if got := r.remove(a); got != held {
					t.Fatalf("remove(%s) = %v; model holds it: %v", a, got, held)
				}
				delete(model, a)
			case 3:
				// Release every record of one owner, as a consumer's
				// deletion does, in the order of returns.
				p := recordsOwners[int(next())%len(recordsOwners)]
				for _, rec := range r.of(p) {
					if got, ok := r.delete(rec.Addr); !ok || !sameRecord(got, model[rec.Addr]) {
						t.Fatalf("delete(%s) of owner %v = %+v %v; model %+v", rec.Addr, p, got, ok, model[rec.Addr])
					}
					delete(model, rec.Addr)
				}
			case 4:
				// An owner made from the input: the scope of a pool
				// owner, a name of any bytes.
				a := addr()
				p := recordsOwners[int(next())%len(recordsOwners)]
				n := int(next())
				if op&0x80 != 0 {
					n *= 4 // past maxReusedSize
				}
				name := make([]byte, 0, n)
				for range n {
					name = append(name, next())
				}
				p.Name = string(name)
				custom[p] = true
				put(a, p)
			case 5:
				checkRecords(t, r, model)
				checkCustom(t, r, model, custom)
			}
		}
		checkRecords(t, r, model)
		checkCustom(t, r, model, custom)
	})
}

// checkCustom is checkRecords' of() check for the owners a fuzz input made.
func checkCustom(t *testing.T, r *records, model map[netip.Addr]ipaddress.IPAddress, owners map[ipaddress.ParentRef]bool) {
	t.Helper()
	checkOwnersOf(t, r, model, slices.Collect(maps.Keys(owners)))
}
