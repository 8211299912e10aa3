package allocator_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"go4.org/netipx"
	"pgregory.net/rapid"

	"github.com/netipam/netipam/admission"
	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store/memory"
)

// What an embedder may hand the allocator, valid or not: zero values,
// zones, IPv4-mapped and non-canonical prefixes, the edges of both
// address spaces, and names at and past their limits.
var (
	oddPrefixes = []netip.Prefix{
		{},
		pfx("10.0.0.0/28"), pfx("10.0.0.0/24"), pfx("10.0.0.0/30"), pfx("192.168.0.0/24"),
		pfx("fd00::/124"), pfx("fd00::/64"),
		pfx("0.0.0.0/0"), pfx("::/0"), pfx("10.0.0.1/32"), pfx("fd00::1/128"), pfx("10.0.0.0/31"),
		netip.PrefixFrom(ip("10.0.0.1"), 24),               // host bits set
		netip.PrefixFrom(ip("::ffff:10.0.0.0"), 120),       // IPv4-mapped
		netip.PrefixFrom(ip("fd00::%eth0"), 64),            // zoned
		netip.PrefixFrom(ip("10.0.0.0"), 33),               // invalid length
		netip.PrefixFrom(netip.IPv6Unspecified(), -1),      // invalid length
		netip.PrefixFrom(ip("fd00::1").WithZone("z"), 128), // zoned /128
	}
	oddAddrs = []netip.Addr{
		{},
		ip("10.0.0.0"), ip("10.0.0.1"), ip("10.0.0.5"), ip("10.0.0.15"), ip("10.0.0.255"), ip("10.0.0.3"),
		ip("192.168.0.1"), ip("172.16.0.1"), ip("0.0.0.0"), ip("255.255.255.255"),
		ip("fd00::"), ip("fd00::1"), ip("fd00::f"), ip("fd00::ffff"), ip("::"), ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
		ip("::ffff:10.0.0.5"), ip("fd00::5%eth0"), ip("fe80::1%1"),
	}
	oddNames = []string{
		"a", "b", "kubernetes", "", "A", "a_b", "a/b", "-a", "a.", "a..b",
		strings.Repeat("a", 253), strings.Repeat("a", 254), strings.Repeat("a", 64),
		"a\x00", "é",
	}
	oddFamilies = []ipaddress.Family{ipaddress.IPv4, ipaddress.IPv6, 0, 5, 255}
)

func oddOwner(rt *rapid.T) ipaddress.ParentRef {
	return rapid.SampledFrom([]ipaddress.ParentRef{
		svc("x"), svc("y"), {},
		{Resource: "services", Name: "z"},
		{Resource: "services", Namespace: "default"},
		{Resource: "Services", Namespace: "default", Name: "x"},
		{Resource: "services", Namespace: "default", Name: strings.Repeat("n", 253)},
		{Resource: "services", Namespace: "default", Name: strings.Repeat("n", 254)},
		{Resource: "services", Namespace: "default/x", Name: "x"},
		{Group: "Bad.Group", Resource: "services", Name: "x"},
		{Resource: "services", Namespace: "default", Name: "x\x00"},
	}).Draw(rt, "owner")
}

func oddPrefixList(rt *rapid.T) []netip.Prefix {
	n := rapid.IntRange(0, 3).Draw(rt, "prefix count")
	if n == 0 && rapid.Bool().Draw(rt, "nil prefixes") {
		return nil
	}
	ps := make([]netip.Prefix, n)
	for i := range ps {
		ps[i] = rapid.SampledFrom(oddPrefixes).Draw(rt, "prefix")
	}
	return ps
}

// state is everything a call could change: the store's records and
// CIDRs, and what the allocator answers from its index.
type state struct {
	records []string
	cidrs   []string
	index   []string
	usage   []string
}

func stateOf(t *rapid.T, st *memory.Store, a *allocator.Allocator) state {
	ctx := context.Background()
	var s state
	recs, err := st.ListAddresses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		s.records = append(s.records, fmt.Sprint(r.Addr, " ", r.Parent, " ", r.Revision))
	}
	slices.Sort(s.records)
	for _, c := range a.CIDRs() {
		s.index = append(s.index, fmt.Sprint(c, " ", c.Revision))
		sc, err := st.GetCIDR(ctx, c.Name)
		s.cidrs = append(s.cidrs, fmt.Sprint(sc, " ", sc.Revision, " ", err))
		u, err := a.Usage(c.Name)
		s.usage = append(s.usage, fmt.Sprint(u, err))
	}
	for _, f := range []ipaddress.Family{ipaddress.IPv4, ipaddress.IPv6} {
		s.usage = append(s.usage, fmt.Sprint(a.FamilyUsage(f)))
	}
	return s
}

// documented reports whether err is one of the errors the allocator's
// documentation names (with admission's refusal, the one check installed).
func documented(err error) bool {
	for _, e := range []error{
		allocator.ErrFull, allocator.ErrAllocated, allocator.ErrNotInRange, allocator.ErrMismatch,
		allocator.ErrTerminating, allocator.ErrExcluded, allocator.ErrNotFound, allocator.ErrExists,
		allocator.ErrConflict, allocator.ErrInvalid, allocator.ErrDefaultMismatch, allocator.ErrClosed,
		allocator.ErrDeletionBlocked, admission.ErrRejected, context.Canceled, context.DeadlineExceeded,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// TestRefusedCallsChangeNothing drives the public API with random, mostly
// invalid arguments and, now and then, a context already ended: no call
// panics, every error is one the documentation names (ErrInvalid ones
// carry a *ipaddress.FieldError), a refused call leaves the store and the
// allocator's answers as they were, and every dry run answers as the real
// call that follows it does.
func TestRefusedCallsChangeNothing(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		st := memory.New()
		a, err := allocator.New(context.Background(), st,
			allocator.WithStrategy(allocator.Sequential()),
			allocator.WithExcluded(netipx.MustParseIPRange("10.0.0.3-10.0.0.4")),
			allocator.WithAdmission(admission.NotOverlapping(pfx("192.168.0.0/16"))))
		if err != nil {
			rt.Fatal(err)
		}
		defer a.Close()
		ended, cancel := context.WithCancel(context.Background())
		cancel()
		ctxOf := func(rt *rapid.T) context.Context {
			if rapid.IntRange(0, 9).Draw(rt, "ended context") == 0 {
				return ended
			}
			return context.Background()
		}
		// check runs one call; a call that returns an error other than a
		// blocked deletion must have changed nothing.
		check := func(rt *rapid.T, what string, call func() error) {
			before := stateOf(rt, st, a)
			err := call()
			if err == nil {
				return
			}
			if !documented(err) {
				rt.Fatalf("%s: %v (%T) is no documented error", what, err, err)
			}
			var fe *ipaddress.FieldError
			if errors.Is(err, allocator.ErrInvalid) && !errors.As(err, &fe) {
				rt.Fatalf("%s: ErrInvalid %v without a *ipaddress.FieldError", what, err)
			}
			if errors.Is(err, allocator.ErrDeletionBlocked) {
				return
			}
			if after := stateOf(rt, st, a); !slices.Equal(before.records, after.records) || !slices.Equal(before.cidrs, after.cidrs) ||
				!slices.Equal(before.index, after.index) || !slices.Equal(before.usage, after.usage) {
				rt.Fatalf("%s refused (%v) but changed the state:\nbefore %+v\nafter  %+v", what, err, before, after)
			}
		}
		// dry checks a dry run against the real call made right after it.
		dry := func(rt *rapid.T, what string, dryErr, err error) {
			if (dryErr == nil) != (err == nil) || dryErr != nil && !sameKind(dryErr, err) {
				rt.Fatalf("%s: dry run said %v, the call %v", what, dryErr, err)
			}
		}
		rt.Repeat(map[string]func(*rapid.T){
			"CreateCIDR": func(rt *rapid.T) {
				ctx, name, ps := ctxOf(rt), rapid.SampledFrom(oddNames).Draw(rt, "name"), oddPrefixList(rt)
				var dryErr error
				check(rt, "DryRun().CreateCIDR", func() error { dryErr = a.DryRun().CreateCIDR(ctx, name, ps...); return dryErr })
				check(rt, fmt.Sprintf("CreateCIDR(%q, %v)", name, ps), func() error {
					_, err := a.CreateCIDR(ctx, name, ps...)
					dry(rt, "CreateCIDR", dryErr, err)
					return err
				})
			},
			"UpdateCIDR": func(rt *rapid.T) {
				ctx, name, ps := ctxOf(rt), rapid.SampledFrom(oddNames).Draw(rt, "name"), oddPrefixList(rt)
				check(rt, fmt.Sprintf("UpdateCIDR(%q, %v)", name, ps), func() error { _, err := a.UpdateCIDR(ctx, name, ps...); return err })
			},
			"EnsureDefault": func(rt *rapid.T) {
				ctx, ps := ctxOf(rt), oddPrefixList(rt)
				check(rt, fmt.Sprintf("EnsureDefault(%v)", ps), func() error { _, err := a.EnsureDefault(ctx, ps...); return err })
			},
			"DeleteCIDR": func(rt *rapid.T) {
				ctx, name := ctxOf(rt), rapid.SampledFrom(oddNames).Draw(rt, "name")
				check(rt, fmt.Sprintf("DryRun().DeleteCIDR(%q)", name), func() error { _, err := a.DryRun().DeleteCIDR(ctx, name); return err })
				check(rt, fmt.Sprintf("DeleteCIDR(%q)", name), func() error { return a.DeleteCIDR(ctx, name) })
			},
			"Allocate": func(rt *rapid.T) {
				ctx, addr, owner := ctxOf(rt), rapid.SampledFrom(oddAddrs).Draw(rt, "addr"), oddOwner(rt)
				var dryErr error
				check(rt, "DryRun().Allocate", func() error { dryErr = a.DryRun().Allocate(ctx, addr, owner); return dryErr })
				check(rt, fmt.Sprintf("Allocate(%v, %v)", addr, owner), func() error {
					_, err := a.Allocate(ctx, addr, owner)
					dry(rt, fmt.Sprintf("Allocate(%v, %v)", addr, owner), dryErr, err)
					return err
				})
			},
			"Restore": func(rt *rapid.T) {
				ctx, addr, owner := ctxOf(rt), rapid.SampledFrom(oddAddrs).Draw(rt, "addr"), oddOwner(rt)
				check(rt, fmt.Sprintf("Restore(%v, %v)", addr, owner), func() error { _, err := a.Restore(ctx, addr, owner); return err })
			},
			"RestoreRecords": func(rt *rapid.T) {
				ctx, addr, owner := ctxOf(rt), rapid.SampledFrom(oddAddrs).Draw(rt, "addr"), oddOwner(rt)
				check(rt, fmt.Sprintf("RestoreRecords(%v of %v)", addr, owner), func() error {
					return a.RestoreRecords(ctx, []ipaddress.IPAddress{{Addr: addr, Parent: owner}})[0]
				})
			},
			"AllocateNext": func(rt *rapid.T) {
				ctx, f, owner := ctxOf(rt), rapid.SampledFrom(oddFamilies).Draw(rt, "family"), oddOwner(rt)
				var want netip.Addr
				var dryErr error
				check(rt, "DryRun().AllocateNext", func() error { want, dryErr = a.DryRun().AllocateNext(ctx, f, owner); return dryErr })
				check(rt, fmt.Sprintf("AllocateNext(%v, %v)", f, owner), func() error {
					r, err := a.AllocateNext(ctx, f, owner)
					dry(rt, fmt.Sprintf("AllocateNext(%v, %v)", f, owner), dryErr, err)
					if err == nil && r.Addr != want {
						rt.Fatalf("AllocateNext(%v) = %s, its dry run chose %s", f, r.Addr, want)
					}
					return err
				})
			},
			"AllocateDualStack": func(rt *rapid.T) {
				ctx, owner := ctxOf(rt), oddOwner(rt)
				v4, v6 := rapid.SampledFrom(oddAddrs).Draw(rt, "v4"), rapid.SampledFrom(oddAddrs).Draw(rt, "v6")
				var want4, want6 netip.Addr
				var dryErr error
				check(rt, "DryRun().AllocateDualStack", func() error {
					want4, want6, dryErr = a.DryRun().AllocateDualStack(ctx, owner, v4, v6)
					return dryErr
				})
				check(rt, fmt.Sprintf("AllocateDualStack(%v, %v, %v)", owner, v4, v6), func() error {
					r4, r6, err := a.AllocateDualStack(ctx, owner, v4, v6)
					dry(rt, fmt.Sprintf("AllocateDualStack(%v, %v, %v)", owner, v4, v6), dryErr, err)
					if err == nil && (r4.Addr != want4 || r6.Addr != want6) {
						rt.Fatalf("AllocateDualStack = %s, %s; its dry run chose %s, %s", r4.Addr, r6.Addr, want4, want6)
					}
					return err
				})
			},
			"Release": func(rt *rapid.T) {
				ctx, addr := ctxOf(rt), rapid.SampledFrom(oddAddrs).Draw(rt, "addr")
				check(rt, fmt.Sprintf("Release(%v)", addr), func() error { return a.Release(ctx, addr) })
			},
			"ReleaseAt": func(rt *rapid.T) {
				ctx, addr, rev := ctxOf(rt), rapid.SampledFrom(oddAddrs).Draw(rt, "addr"), rapid.Int64Range(-1, 40).Draw(rt, "rev")
				check(rt, fmt.Sprintf("ReleaseAt(%v, %d)", addr, rev), func() error { return a.ReleaseAt(ctx, addr, rev) })
			},
			"ReleaseRecords": func(rt *rapid.T) {
				ctx, addr, owner, rev := ctxOf(rt), rapid.SampledFrom(oddAddrs).Draw(rt, "addr"), oddOwner(rt), rapid.Int64Range(-1, 40).Draw(rt, "rev")
				check(rt, fmt.Sprintf("ReleaseRecords(%v of %v at %d)", addr, owner, rev), func() error {
					return a.ReleaseRecords(ctx, []ipaddress.IPAddress{{Addr: addr, Parent: owner, Revision: rev}})[0]
				})
			},
			"ReplaceRecords": func(rt *rapid.T) {
				ctx, addr, from, to, rev := ctxOf(rt), rapid.SampledFrom(oddAddrs).Draw(rt, "addr"), oddOwner(rt), oddOwner(rt), rapid.Int64Range(-1, 40).Draw(rt, "rev")
				check(rt, fmt.Sprintf("ReplaceRecords(%v of %v at %d, to %v)", addr, from, rev, to), func() error {
					return a.ReplaceRecords(ctx, []ipaddress.IPAddress{{Addr: addr, Parent: from, Revision: rev}}, []ipaddress.ParentRef{to})[0]
				})
			},
			"ReleaseOwner": func(rt *rapid.T) {
				ctx, owner := ctxOf(rt), oddOwner(rt)
				check(rt, fmt.Sprintf("ReleaseOwner(%v)", owner), func() error { _, err := a.ReleaseOwner(ctx, owner); return err })
			},
			"reads": func(rt *rapid.T) {
				ctx, name, addr, owner := ctxOf(rt), rapid.SampledFrom(oddNames).Draw(rt, "name"), rapid.SampledFrom(oddAddrs).Draw(rt, "addr"), oddOwner(rt)
				check(rt, "Get", func() error { _, err := a.Get(ctx, addr); return err })
				check(rt, "AddressesOf", func() error { _, err := a.AddressesOf(ctx, owner); return err })
				check(rt, "GetCIDR", func() error { _, err := a.GetCIDR(name); return err })
				check(rt, "Usage", func() error { _, err := a.Usage(name); return err })
				// A revision the store has not reached yet waits for ever:
				// the wait is bounded, and its end is a documented error.
				wctx, cancel := context.WithTimeout(ctx, time.Millisecond)
				defer cancel()
				check(rt, "WaitRevision", func() error { return a.WaitRevision(wctx, rapid.Int64Range(-1, 1<<40).Draw(rt, "rev")) })
				for _, f := range oddFamilies {
					a.FamilyUsage(f)
				}
			},
		})
	})
}

// sameKind reports whether two errors are the same documented error.
func sameKind(a, b error) bool {
	for _, e := range []error{
		allocator.ErrFull, allocator.ErrAllocated, allocator.ErrNotInRange, allocator.ErrMismatch,
		allocator.ErrTerminating, allocator.ErrExcluded, allocator.ErrNotFound, allocator.ErrExists,
		allocator.ErrInvalid, allocator.ErrClosed, admission.ErrRejected, context.Canceled,
	} {
		if errors.Is(a, e) != errors.Is(b, e) {
			return false
		}
	}
	return true
}
