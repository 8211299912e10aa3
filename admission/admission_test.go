package admission_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/netipam/netipam/admission"
	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/memory"
)

var pfx = netip.MustParsePrefix

func newAllocator(t *testing.T, st store.Store, checks ...allocator.Admission) *allocator.Allocator {
	t.Helper()
	a, err := allocator.New(context.Background(), st, allocator.WithAdmission(checks...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func wantRejected(t *testing.T, err error, rule string, prefix string) {
	t.Helper()
	if !errors.Is(err, admission.ErrRejected) {
		t.Fatalf("err = %v, want ErrRejected", err)
	}
	var ae *admission.Error
	if !errors.As(err, &ae) || ae.Rule != rule || ae.Prefix != pfx(prefix) {
		t.Fatalf("err = %#v, want rule %s prefix %s", err, rule, prefix)
	}
	if msg := err.Error(); !strings.Contains(msg, rule) || !strings.Contains(msg, prefix) {
		t.Errorf("message %q names neither rule %s nor prefix %s", msg, rule, prefix)
	}
}

func TestWithinAdmitsOnlyPrefixesInsideTheRanges(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	// GKE: new Service CIDRs only inside 34.118.224.0/20.
	a := newAllocator(t, st, admission.Within(pfx("34.118.224.0/20"), pfx("fd00:10::/64")))

	if _, err := a.CreateCIDR(ctx, "gke", pfx("34.118.226.0/24")); err != nil {
		t.Fatalf("inside: %v", err)
	}
	if _, err := a.CreateCIDR(ctx, "whole", pfx("34.118.224.0/20")); err != nil {
		t.Fatalf("equal to the range: %v", err)
	}
	_, err := a.CreateCIDR(ctx, "newcidr1", pfx("192.96.0.0/24"))
	wantRejected(t, err, admission.RuleWithin, "192.96.0.0/24")
	_, err = a.CreateCIDR(ctx, "wider", pfx("34.118.0.0/16")) // contains the range, is not inside it
	wantRejected(t, err, admission.RuleWithin, "34.118.0.0/16")
	_, err = a.CreateCIDR(ctx, "dual", pfx("34.118.227.0/24"), pfx("fd00:20::/108"))
	wantRejected(t, err, admission.RuleWithin, "fd00:20::/108")
	if err := a.DryRun().CreateCIDR(ctx, "dry", pfx("10.0.0.0/24")); !errors.Is(err, admission.ErrRejected) {
		t.Errorf("DryRun().CreateCIDR = %v", err)
	}
	for _, name := range []string{"newcidr1", "wider", "dual", "dry"} {
		if _, err := st.GetCIDR(ctx, name); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("refused CIDR %s stored: %v", name, err)
		}
	}

	// Update: single- to dual-stack, the added prefix is checked.
	_, err = a.UpdateCIDR(ctx, "gke", pfx("34.118.226.0/24"), pfx("fd00:99::/108"))
	wantRejected(t, err, admission.RuleWithin, "fd00:99::/108")
	if c, _ := st.GetCIDR(ctx, "gke"); len(c.Prefixes) != 1 {
		t.Errorf("refused update stored: %v", c.Prefixes)
	}
	if _, err := a.UpdateCIDR(ctx, "gke", pfx("34.118.226.0/24"), pfx("fd00:10::/108")); err != nil {
		t.Fatalf("update inside: %v", err)
	}
}

// On update only the added prefixes are checked: a CIDR created before the
// rule may still become dual-stack.
func TestWithinChecksOnlyAddedPrefixesOnUpdate(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	before := newAllocator(t, st)
	if _, err := before.CreateCIDR(ctx, "kubernetes", pfx("10.96.0.0/28")); err != nil {
		t.Fatal(err)
	}
	a := newAllocator(t, st, admission.Within(pfx("34.118.224.0/20"), pfx("fd00:10::/64")))
	if _, err := a.UpdateCIDR(ctx, "kubernetes", pfx("10.96.0.0/28"), pfx("fd00:10::/108")); err != nil {
		t.Fatalf("update of a grandfathered CIDR: %v", err)
	}
}

func TestNotOverlappingRefusesPodAndNodeNetworks(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	pods, nodes, podsV6 := pfx("10.244.0.0/16"), pfx("192.168.0.0/24"), pfx("fd00:244::/56")
	a := newAllocator(t, st, admission.NotOverlapping(pods, nodes, podsV6))

	if _, err := a.CreateCIDR(ctx, "kubernetes", pfx("10.96.0.0/28")); err != nil {
		t.Fatal(err)
	}
	_, err := a.CreateCIDR(ctx, "inside-pods", pfx("10.244.5.0/24"))
	wantRejected(t, err, admission.RuleNotOverlapping, "10.244.5.0/24")
	_, err = a.CreateCIDR(ctx, "around-all", pfx("10.0.0.0/8"))
	wantRejected(t, err, admission.RuleNotOverlapping, "10.0.0.0/8")
	var ae *admission.Error
	if errors.As(err, &ae) && (len(ae.Ranges) != 1 || ae.Ranges[0] != pods) {
		t.Errorf("Ranges = %v, want the pod network only", ae.Ranges)
	}
	_, err = a.CreateCIDR(ctx, "nodes", pfx("192.168.0.128/25"))
	wantRejected(t, err, admission.RuleNotOverlapping, "192.168.0.128/25")
	// Adjacent is fine.
	if _, err := a.CreateCIDR(ctx, "next-to-nodes", pfx("192.168.1.0/24")); err != nil {
		t.Fatal(err)
	}

	// Update path.
	_, err = a.UpdateCIDR(ctx, "kubernetes", pfx("10.96.0.0/28"), pfx("fd00:244:0:1::/108"))
	wantRejected(t, err, admission.RuleNotOverlapping, "fd00:244:0:1::/108")
	if _, err := a.UpdateCIDR(ctx, "kubernetes", pfx("10.96.0.0/28"), pfx("fd00:96::/108")); err != nil {
		t.Fatal(err)
	}
}

// Both rules together, in order: the first refusal is returned.
func TestRulesCombine(t *testing.T) {
	ctx := context.Background()
	a := newAllocator(t, memory.New(),
		admission.Within(pfx("10.0.0.0/8")),
		admission.NotOverlapping(pfx("10.244.0.0/16")))
	if _, err := a.CreateCIDR(ctx, "ok", pfx("10.96.0.0/12")); err != nil {
		t.Fatal(err)
	}
	_, err := a.CreateCIDR(ctx, "pods", pfx("10.244.1.0/24"))
	wantRejected(t, err, admission.RuleNotOverlapping, "10.244.1.0/24")
	_, err = a.CreateCIDR(ctx, "outside", pfx("172.16.0.0/24"))
	wantRejected(t, err, admission.RuleWithin, "172.16.0.0/24")
}

// A range written in IPv4-mapped form (::ffff:10.244.0.0/112) is the IPv4
// range it spells: NotOverlapping refuses what lies in it, and Within
// admits it. Read as IPv6, it would meet no IPv4 prefix, and the first
// rule would let the pod network through.
func TestAMappedRangeIsTheIPv4RangeItSpells(t *testing.T) {
	ctx := context.Background()
	a := newAllocator(t, memory.New(), admission.NotOverlapping(pfx("::ffff:10.244.0.0/112")))
	if _, err := a.CreateCIDR(ctx, "pods", pfx("10.244.1.0/24")); !errors.Is(err, admission.ErrRejected) {
		t.Errorf("CreateCIDR inside ::ffff:10.244.0.0/112 under NotOverlapping: %v, want ErrRejected", err)
	}
	if _, err := a.CreateCIDR(ctx, "services", pfx("10.96.0.0/16")); err != nil {
		t.Errorf("CreateCIDR outside it: %v", err)
	}
	b := newAllocator(t, memory.New(), admission.Within(pfx("::ffff:34.118.224.0/116")))
	if _, err := b.CreateCIDR(ctx, "inside", pfx("34.118.226.0/24")); err != nil {
		t.Errorf("CreateCIDR inside ::ffff:34.118.224.0/116 under Within: %v", err)
	}
	if _, err := b.CreateCIDR(ctx, "outside", pfx("34.118.240.0/24")); !errors.Is(err, admission.ErrRejected) {
		t.Errorf("CreateCIDR outside it under Within: %v, want ErrRejected", err)
	}
}
