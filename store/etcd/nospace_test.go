package etcd

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// Writes past etcd's space quota fail with errors matching
// store.ErrNoSpace, and store.ErrOutcomeUnknown too, since etcd says so
// also of the write that crossed the quota after applying it; reads go on.
func TestAWritePastTheQuotaIsNoSpace(t *testing.T) {
	c := startCluster(t, 1, func(cfg *embed.Config) { cfg.QuotaBackendBytes = 1 << 20 })
	st, err := New(c.newClient(t), WithPrefix("/quota"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 2*time.Minute)
	batch := func(b int) []ipaddress.IPAddress {
		recs := make([]ipaddress.IPAddress, MaxBatch)
		for i := range recs {
			n := b*MaxBatch + i
			recs[i] = ipaddress.IPAddress{
				Addr:   netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)}),
				Parent: ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: fmt.Sprintf("svc-%059d", n)},
			}
		}
		return recs
	}
	var full error
	b := 0
	for ; b < 1000; b++ {
		if _, full = st.CreateAddresses(ctx, batch(b)); full != nil {
			break
		}
	}
	if !errors.Is(full, store.ErrNoSpace) || !errors.Is(full, store.ErrOutcomeUnknown) {
		t.Fatalf("after %d batches: %v, want an error matching store.ErrNoSpace and store.ErrOutcomeUnknown", b, full)
	}
	if b < 5 {
		t.Fatalf("no space after %d batches under a 1 MiB quota", b)
	}
	// The alarm is raised: the next write is refused too.
	if _, err := st.CreateAddresses(ctx, batch(b+1)); !errors.Is(err, store.ErrNoSpace) {
		t.Fatalf("a write after the alarm: %v, want store.ErrNoSpace", err)
	}
	recs, err := st.ListAddresses(ctx)
	if err != nil {
		t.Fatalf("reading under the alarm: %v", err)
	}
	if len(recs) < b*MaxBatch {
		t.Fatalf("%d records after %d batches written", len(recs), b)
	}
}
