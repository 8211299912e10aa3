package etcd

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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

// batchTooLarge fails the test unless err is CreateAddresses' refusal of a
// batch of n records as too large for one transaction: an
// *ipaddress.FieldError for "records", matching ipaddress.ErrInvalid.
func batchTooLarge(t *testing.T, what string, err error, n int) {
	t.Helper()
	var fe *ipaddress.FieldError
	if !errors.As(err, &fe) || fe.Field != "records" || fe.Value != strconv.Itoa(n) || !errors.Is(err, ipaddress.ErrInvalid) {
		t.Errorf("%s: %v, want an *ipaddress.FieldError for records, value %d, matching ipaddress.ErrInvalid", what, err, n)
	}
}

// A batch whose records each fit etcd's defaults but together pass its
// request limit is refused, typed, with nothing written; split, it goes in.
// So are a deletion of them all in one batch (DeleteRecords) and a
// hand-over of them all to owners as long (ReplaceRecords).
func TestABatchOfLongOwnersPastEtcdsRequestLimitIsInvalidAndWritesNothing(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	c := startCluster(t, 1)
	s, err := New(c.newClient(t), WithPrefix("/long-owners"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	longest := svc("")
	longest.Name = strings.Repeat("n", store.MaxOwnerLen-len(longest.Resource)-len(longest.Namespace))
	if err := store.CheckOwner(longest); err != nil {
		t.Fatalf("the test's owner: %v", err)
	}
	recs := make([]ipaddress.IPAddress, MaxBatch)
	for i := range recs {
		recs[i] = ipaddress.IPAddress{Addr: v4(i + 1), Parent: longest}
	}
	_, err = s.CreateAddresses(ctx, slices.Clone(recs))
	t.Logf("%d records of %d-byte owners: %v", len(recs), store.MaxOwnerLen, err)
	batchTooLarge(t, "a batch of the longest owners", err, MaxBatch)
	if !errors.Is(err, rpctypes.ErrRequestTooLarge) && status.Code(err) != codes.ResourceExhausted {
		t.Errorf("%v: want etcd's or gRPC's refusal as the cause", err)
	}
	if errors.Is(err, store.ErrOutcomeUnknown) {
		t.Errorf("%v: a refusal before proposing is not ErrOutcomeUnknown", err)
	}
	for _, r := range recs {
		if _, err := s.GetAddress(ctx, r.Addr); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("%s after the refused batch: %v, want ErrNotFound", r.Addr, err)
		}
	}
	for _, half := range [][]ipaddress.IPAddress{recs[:MaxBatch/2], recs[MaxBatch/2:]} {
		if _, err := s.CreateAddresses(ctx, slices.Clone(half)); err != nil {
			t.Fatalf("half the batch: %v", err)
		}
	}
	for _, r := range recs {
		if got, err := s.GetAddress(ctx, r.Addr); err != nil || got.Parent != longest {
			t.Fatalf("%s after the halves: owner of %d bytes, %v", r.Addr, len(got.Parent.Name), err)
		}
	}
	// Their deletion in one batch compares every value: too large too.
	held, err := s.AddressesOf(ctx, longest)
	if err != nil || len(held) != MaxBatch {
		t.Fatalf("AddressesOf(the longest owner) = %d records, %v; want %d", len(held), err, MaxBatch)
	}
	_, err = s.DeleteRecords(ctx, held)
	batchTooLarge(t, "a deletion of the longest owners' records", err, MaxBatch)
	if errors.Is(err, store.ErrOutcomeUnknown) {
		t.Errorf("%v: a refusal before proposing is not ErrOutcomeUnknown", err)
	}
	if again, err := s.AddressesOf(ctx, longest); err != nil || len(again) != MaxBatch {
		t.Errorf("after the refused deletion: %d records, %v; want %d", len(again), err, MaxBatch)
	}
	// Their hand-over in one batch to owners as long compares and writes
	// every value: too large too.
	heirs := make([]ipaddress.ParentRef, len(held))
	for i := range heirs {
		heirs[i] = longest
		heirs[i].Name = strings.Repeat("m", len(longest.Name))
	}
	_, err = s.ReplaceRecords(ctx, held, heirs)
	batchTooLarge(t, "a hand-over of the longest owners' records", err, MaxBatch)
	if errors.Is(err, store.ErrOutcomeUnknown) {
		t.Errorf("%v: a refusal before proposing is not ErrOutcomeUnknown", err)
	}
	if again, err := s.AddressesOf(ctx, longest); err != nil || len(again) != MaxBatch {
		t.Errorf("after the refused hand-over: %d records, %v; want %d", len(again), err, MaxBatch)
	}
	if _, err := s.DeleteRecords(ctx, held[:MaxBatch/2]); err != nil {
		t.Errorf("a deletion of half of them: %v", err)
	}
}
