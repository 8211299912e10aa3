package repair_test

import (
	"testing"

	"github.com/netipam/netipam/repair"
)

// SPEC §2 (host containment) and §6 across families: a dual-stack CIDR's
// addresses are repaired in both families; network and IPv4 broadcast
// addresses are out of range; the IPv6 all-ones address is usable.
func TestRepairAcrossFamiliesFollowsHostContainment(t *testing.T) {
	e := newEnv(t, map[string][]string{"dual": {"10.0.0.0/24", "fd00:10::/64"}})
	rep := e.run(false,
		consumer(svc("v4"), "10.0.0.7"),
		consumer(svc("v6"), "fd00:10::7"),
		consumer(svc("ones"), "fd00:10::ffff:ffff:ffff:ffff"),
		consumer(svc("net4"), "10.0.0.0"),
		consumer(svc("bcast"), "10.0.0.255"),
		consumer(svc("net6"), "fd00:10::"),
		consumer(svc("far"), "192.168.0.1"),
		consumer(svc("far6"), "2001:db8::1"),
	)
	if n := rep.Count(repair.Repaired); n != 3 {
		t.Errorf("Repaired = %d, want 3 (v4, v6, IPv6 all-ones)", n)
	}
	if n := rep.Count(repair.OutOfRange); n != 5 {
		t.Errorf("OutOfRange = %d, want 5", n)
	}
	for _, a := range []string{"10.0.0.7", "fd00:10::7", "fd00:10::ffff:ffff:ffff:ffff"} {
		if _, ok := e.record(a); !ok {
			t.Errorf("%s not recorded", a)
		}
	}
	if n := e.records(); n != 3 {
		t.Errorf("%d records, want 3", n)
	}
}

// SPEC §6: two consumers on one address → "already allocated", nothing
// changed: not even a missing record is created for one of them. A
// consumer listed twice is one consumer.
func TestTwoConsumersOnAnUnrecordedAddressCreateNothing(t *testing.T) {
	e := newEnv(t, map[string][]string{"kubernetes": {"10.96.0.0/28"}})
	rep := e.run(false,
		consumer(svc("a"), "10.96.0.5"),
		consumer(svc("b"), "10.96.0.5"),
		consumer(svc("c"), "10.96.0.6"),
		consumer(svc("c"), "10.96.0.6", "10.96.0.6"),
	)
	if n := rep.Count(repair.Duplicate); n != 1 {
		t.Errorf("Duplicate = %d, want 1", n)
	}
	if _, ok := e.record("10.96.0.5"); ok {
		t.Error("a record was created for an address two consumers claim")
	}
	if r, ok := e.record("10.96.0.6"); !ok || r.Parent != svc("c") {
		t.Errorf("10.96.0.6 = %+v, %v; want c's", r, ok)
	}
}

// SPEC §6 (two consumers on one address → already allocated, change
// nothing), with the package's own reading of legacy spellings (an Invalid
// "010.96.0.5" still denotes 10.96.0.5, whose record it keeps): a second
// consumer holding the address in a legacy spelling is a second holder:
// no record is made for the first.
func TestAConsumerHoldingTheAddressInALegacySpellingIsADuplicateHolder(t *testing.T) {
	e := newEnv(t, map[string][]string{"kubernetes": {"10.96.0.0/28"}})
	rep := e.run(false,
		consumer(svc("a"), "10.96.0.5"),
		consumer(svc("b"), "010.96.0.5"),
	)
	if r, recorded := e.record("10.96.0.5"); rep.Count(repair.Duplicate) != 1 || recorded {
		t.Fatalf("10.96.0.5 is held by a and (as 010.96.0.5) by b: events %v, record %+v (%v); want one Duplicate and nothing changed", rep.Events, r.Parent, recorded)
	}
}
