package memory

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// fullOwner is an owner whose entry has the same size for every i below
// 1000: a name of 32 bytes.
func fullOwner(i int) ipaddress.ParentRef {
	return ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: fmt.Sprintf("svc-%028d", i)}
}

// fillArena returns a store whose arena may take two chunks (12 KiB), full
// of records of fullOwner, and how many it took.
func fillArena(t *testing.T) (*Store, int) {
	t.Helper()
	s := New()
	s.addrs.arena.limit = 2
	ctx := context.Background()
	for i := 0; ; i++ {
		if i == 5000 {
			t.Fatal("5000 records in 12 KiB: the limit does not hold")
		}
		_, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), Parent: fullOwner(i)}})
		if errors.Is(err, store.ErrNoSpace) {
			return s, i
		}
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
}

// checkFullStore fails unless s holds exactly the records of fullOwner(i)
// at 10.0.x.y for i in want.
func checkFullStore(t *testing.T, s *Store, want map[int]bool) {
	t.Helper()
	recs, err := s.ListAddresses(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(want) {
		t.Fatalf("%d records, want %d", len(recs), len(want))
	}
	for _, r := range recs {
		b := r.Addr.As4()
		i := int(b[2])<<8 | int(b[3])
		if !want[i] || r.Parent != fullOwner(i) {
			t.Fatalf("unexpected record %v owned by %v", r.Addr, r.Parent)
		}
	}
}

func addrAt(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}) }

// A store out of room for records refuses each write that needs more
// with an error matching store.ErrNoSpace (not a panic), writes nothing of
// it, not even a revision, and keeps every record it holds; a deletion
// makes room for a record of its size. Every path that writes a record is
// covered: a single create, the allocator's locked create, a batch and a
// dual-stack pair (whose first record fits and second does not), and a
// replacement.
func TestAFullStoreRefusesRecordsAndLosesNone(t *testing.T) {
	ctx := context.Background()
	s, n := fillArena(t)
	// Past 127 records, revisions take two bytes, as in every entry
	// written after the fill.
	if n < 150 {
		t.Fatalf("only %d records fit in 12 KiB", n)
	}
	held := map[int]bool{}
	for i := range n {
		held[i] = true
	}
	rev := s.rev
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, store.ErrNoSpace) {
			t.Fatalf("%s: %v, want store.ErrNoSpace", what, err)
		}
		if s.rev != rev {
			t.Fatalf("%s: revision %d after a refused write, want %d", what, s.rev, rev)
		}
		checkFullStore(t, s, held)
	}

	// The allocator's CIDR, which its locked create is fenced on.
	c, err := s.CreateCIDR(ctx, cidrset.CIDR{Name: "c", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16")}})
	if err != nil {
		t.Fatal(err)
	}
	rev = s.rev

	_, err = s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: addrAt(n), Parent: fullOwner(n)}})
	refused("create", err)
	s.mu.Lock()
	other := ipaddress.ParentRef{Resource: "services", Namespace: "elsewhere", Name: fullOwner(n).Name}
	_, _, err = s.CreateAddressLocked(addrAt(n), checked(other), store.Fence{CIDR: c.Name, Revision: c.Revision}, nil)
	s.mu.Unlock()
	refused("locked create", err)
	_, err = s.ReplaceAddressAt(ctx, ipaddress.IPAddress{Addr: addrAt(0), Parent: fullOwner(0)}, 1)
	refused("replace", err)

	// The last record goes: a batch of two of its size takes its room for
	// the first, none for the second, and is refused whole.
	if _, _, err := s.DeleteAddress(ctx, addrAt(n-1)); err != nil {
		t.Fatal(err)
	}
	delete(held, n-1)
	rev = s.rev
	_, err = s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: addrAt(n), Parent: fullOwner(n)}, {Addr: addrAt(n + 1), Parent: fullOwner(n + 1)}})
	refused("batch", err)
	// So is a dual-stack pair: its IPv4 record fits, its IPv6 one, longer,
	// does not.
	s.mu.Lock()
	v6 := netip.AddrFrom16([16]byte{0: 0xfd, 14: byte(n >> 8), 15: byte(n)})
	_, _, err = s.CreatePairLocked(addrAt(n), v6, checked(fullOwner(n)), store.Fence{CIDR: c.Name, Revision: c.Revision}, store.Fence{CIDR: c.Name, Revision: c.Revision}, nil)
	s.mu.Unlock()
	refused("pair", err)

	// The room is still there for one record: a replacement takes it (and
	// frees its old entry, a byte shorter: revision 1), and once another
	// record goes, the allocator.
	cur, err := s.GetAddress(ctx, addrAt(0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReplaceAddressAt(ctx, ipaddress.IPAddress{Addr: addrAt(0), Parent: fullOwner(0)}, cur.Revision); err != nil {
		t.Fatalf("replace with room for one: %v", err)
	}
	if _, _, err := s.DeleteAddress(ctx, addrAt(n-2)); err != nil {
		t.Fatal(err)
	}
	delete(held, n-2)
	a, err := allocator.New(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.Allocate(ctx, addrAt(n), fullOwner(n)); err != nil {
		t.Fatalf("allocate with room for one: %v", err)
	}
	held[n] = true
	// And then there is none, for the allocator too.
	_, err = a.AllocateNext(ctx, ipaddress.IPv4, fullOwner(n+1))
	if !errors.Is(err, store.ErrNoSpace) {
		t.Fatalf("AllocateNext in a full store: %v, want store.ErrNoSpace", err)
	}
	checkFullStore(t, s, held)
	if got := s.addrs.len(); got != len(held) {
		t.Fatalf("%d records in the tables, want %d", got, len(held))
	}
	// The owner index agrees with the records.
	for i := range held {
		if got := s.addrs.of(fullOwner(i)); len(got) != 1 || got[0].Addr != addrAt(i) {
			t.Fatalf("records of owner %d: %v", i, got)
		}
	}
	if got := s.addrs.of(other); len(got) != 0 {
		t.Fatalf("records of the refused owner: %v", got)
	}
}

// A replacement keeps its owner's scope interned even when the scope's
// only record is the one replaced and the sweep of emptied scopes runs at
// that moment: the new entry counts in its scope before the old one
// leaves it.
func TestReplacingAScopesOnlyRecordKeepsTheScope(t *testing.T) {
	r := newRecords()
	owner := func(ns int) ipaddress.ParentRef {
		return ipaddress.ParentRef{Resource: "services", Namespace: fmt.Sprintf("ns-%d", ns), Name: "web"}
	}
	const emptied = maxEmptyScopes
	for ns := range emptied + 1 {
		if !r.put(addrAt(ns), owner(ns), 1, int64(ns+1)) {
			t.Fatal("put refused below the limit")
		}
	}
	// Empty all scopes but the last, up to the sweep's threshold.
	for ns := range emptied {
		if !r.remove(addrAt(ns)) {
			t.Fatalf("record %d missing", ns)
		}
	}
	last := owner(emptied)
	if !r.replace(addrAt(emptied), last, 2, 1000) {
		t.Fatal("replace refused below the limit")
	}
	got := r.of(last)
	if len(got) != 1 || got[0].Addr != addrAt(emptied) || got[0].Revision != 1000 {
		t.Fatalf("records of %v after its only record was replaced: %v", last, got)
	}
}
