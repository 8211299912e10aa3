package etcd

import (
	"context"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// compactingKV compacts the history, once armed, just before the next read
// of a later page of a listing (a Get at a given revision), so that the read
// finds its revision compacted.
type compactingKV struct {
	clientv3.KV
	armed       atomic.Bool
	compactions atomic.Int64
}

func (k *compactingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	if clientv3.OpGet(key, opts...).Rev() != 0 && k.armed.CompareAndSwap(true, false) {
		// A write outside the store's keys, so that there is a revision
		// after the listing's to compact to.
		resp, err := k.KV.Put(ctx, "/elsewhere", "x")
		if err != nil {
			return nil, err
		}
		if _, err := k.KV.Compact(ctx, resp.Header.Revision); err != nil {
			return nil, err
		}
		k.compactions.Add(1)
	}
	return k.KV.Get(ctx, key, opts...)
}

// TestListingsRetryAfterCompactionBetweenPages: a listing reads its pages at
// the revision of the first, which etcd may compact in between; every
// listing must then read again from the start rather than fail. Pages here
// are of 2 keys, and the history is compacted before the second page is
// read: ListAddresses (for repair), and the first snapshot of a Watch and
// of the owner index, must each return every record.
func TestListingsRetryAfterCompactionBetweenPages(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	c := startCluster(t, 1)
	cli := c.newClient(t)
	kv := &compactingKV{KV: cli.KV}
	cli.KV = kv
	s, err := New(cli, WithPrefix("/pages"), WithPageSize(2))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var want []netip.Addr
	for i := 1; i <= 7; i++ {
		want = append(want, v4(i))
	}
	mustCreate(t, ctx, s, want...)

	t.Run("ListAddresses", func(t *testing.T) {
		kv.armed.Store(true)
		recs, err := s.ListAddresses(ctx)
		if err != nil {
			t.Fatalf("ListAddresses with its revision compacted between pages: %v", err)
		}
		got := make([]netip.Addr, len(recs))
		for i, r := range recs {
			got[i] = r.Addr
		}
		if !slices.Equal(got, want) {
			t.Errorf("ListAddresses = %v, want %v", got, want)
		}
	})
	t.Run("Watch", func(t *testing.T) {
		kv.armed.Store(true)
		m := newModel()
		if err := s.Watch(ctx, m); err != nil {
			t.Fatalf("Watch with its snapshot compacted between pages: %v", err)
		}
		if _, _, got := m.state(); !slices.Equal(got, want) {
			t.Errorf("Watch's snapshot: %v, want %v", got, want)
		}
	})
	t.Run("AddressesOf", func(t *testing.T) {
		kv.armed.Store(true)
		for _, a := range want {
			got, err := s.AddressesOf(ctx, svc("svc-"+a.String()))
			if err != nil {
				t.Fatalf("AddressesOf with the index's listing compacted between pages: %v", err)
			}
			if len(got) != 1 || got[0].Addr != a {
				t.Errorf("AddressesOf(svc-%s) = %v", a, got)
			}
		}
	})
	if n := kv.compactions.Load(); n != 3 {
		t.Errorf("%d compactions between pages, want 3 (one per listing)", n)
	}
}
