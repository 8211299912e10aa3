package etcd

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// A batch past MaxBatch, or past etcd's 128 compares with its fences,
// which the memory and bolt stores would take, is input this store
// refuses: the refusal is typed (ipaddress.ErrInvalid,
// as a *ipaddress.FieldError), not an error a caller cannot tell from a
// failure of etcd, and nothing is written.
func TestABatchPastMaxBatchIsRefusedWithATypedError(t *testing.T) {
	c := startCluster(t, 1)
	s, err := New(c.newClient(t), WithPrefix("/batch-limit"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	ctx := context.Background()
	recs := make([]ipaddress.IPAddress, MaxBatch+1)
	for i := range recs {
		recs[i] = ipaddress.IPAddress{Addr: netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), Parent: ipaddress.ParentRef{Resource: "services", Name: "a"}}
	}
	_, err = s.CreateAddresses(ctx, recs)
	var fe *ipaddress.FieldError
	if !errors.Is(err, ipaddress.ErrInvalid) || !errors.As(err, &fe) {
		t.Fatalf("CreateAddresses of %d records = %v, want a *ipaddress.FieldError matching ipaddress.ErrInvalid", len(recs), err)
	}
	if errors.Is(err, store.ErrOutcomeUnknown) {
		t.Fatalf("a refusal before anything was sent: %v, must not match ErrOutcomeUnknown", err)
	}
	if all, err := s.ListAddresses(ctx); err != nil || len(all) != 0 {
		t.Fatalf("after the refused batch: %d records, %v; want none", len(all), err)
	}
	// MaxBatch records and one fence each, plus one: past etcd's 128
	// compares.
	cidr, err := s.CreateCIDR(ctx, cidrset.CIDR{Name: "c", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}})
	if err != nil {
		t.Fatal(err)
	}
	fences := make([]store.Fence, MaxBatch+1)
	for i := range fences {
		fences[i] = store.Fence{CIDR: cidr.Name, Revision: cidr.Revision}
	}
	if _, err = s.CreateAddresses(ctx, recs[:MaxBatch], fences...); !errors.Is(err, ipaddress.ErrInvalid) || !errors.As(err, &fe) {
		t.Fatalf("CreateAddresses of %d records and %d fences = %v, want a *ipaddress.FieldError matching ipaddress.ErrInvalid", MaxBatch, len(fences), err)
	}
	if all, err := s.ListAddresses(ctx); err != nil || len(all) != 0 {
		t.Fatalf("after the refused batches: %d records, %v; want none", len(all), err)
	}
	if _, err := s.CreateAddresses(ctx, recs[:MaxBatch], fences[:MaxBatch]...); err != nil {
		t.Fatalf("CreateAddresses of MaxBatch records and as many fences: %v", err)
	}
}
