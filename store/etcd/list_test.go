package etcd

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/netipam/netipam/store"
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
// of the owner index, must each return every record, each having met
// exactly one compaction.
func TestListingsRetryAfterCompactionBetweenPages(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	var reports errLog
	cli, kv, s := newPagedStore(t, "/pages", WithErrorHandler(reports.add))
	var want []netip.Addr
	for i := 1; i <= 7; i++ {
		want = append(want, v4(i))
	}
	mustCreate(t, ctx, s, want...)

	// compactedOnce runs listing with kv armed and checks that the history
	// was compacted once while it ran. No other listing may run meanwhile:
	// any read at a revision takes the compaction.
	compactedOnce := func(t *testing.T, listing func()) {
		t.Helper()
		before := kv.compactions.Load()
		kv.armed.Store(true)
		listing()
		// Not left armed for the next listing if this one never read at
		// a revision.
		kv.armed.Store(false)
		if n := kv.compactions.Load() - before; n != 1 {
			t.Errorf("%d compactions while listing, want 1 (0: no later page was read at the first page's revision)", n)
		}
		// The owner index lists again after a failed listing (with
		// backoff) and then answers all the same: only its report shows
		// that a listing gave up on the compaction instead of reading
		// again. No watch is compacted here (each starts after the last
		// compaction), so any report of one is a listing's.
		for _, err := range reports.all() {
			if errors.Is(err, rpctypes.ErrCompacted) {
				t.Errorf("a listing failed on the compaction: %v", err)
			}
		}
	}

	t.Run("ListAddresses", func(t *testing.T) {
		compactedOnce(t, func() {
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
	})
	t.Run("Watch", func(t *testing.T) {
		// A store of its own, closed (which waits for the watch's
		// goroutine) before the next listing: a re-list of this watch
		// would read at a revision too, and take the compaction armed
		// for the owner index.
		ws, err := New(cli, WithPrefix("/pages"), WithPageSize(2), WithErrorHandler(reports.add))
		if err != nil {
			t.Fatal(err)
		}
		defer ws.Close()
		compactedOnce(t, func() {
			m := newModel()
			if err := ws.Watch(ctx, m); err != nil {
				t.Fatalf("Watch with its snapshot compacted between pages: %v", err)
			}
			if _, _, got := m.state(); !slices.Equal(got, want) {
				t.Errorf("Watch's snapshot: %v, want %v", got, want)
			}
		})
	})
	t.Run("AddressesOf", func(t *testing.T) {
		compactedOnce(t, func() {
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
	})
}

// store.Store.ListAddresses: keys under the address prefix whose value (or
// key) this store cannot decode hide none of the other records. The listing
// returns every record that decodes, and a *store.SkippedError naming each
// key left out (a *CorruptError, matching store.ErrCorrupt), once: a
// listing read again after a compaction between its pages counts none
// twice. Past store.MaxSkipped the error names the first and counts the
// rest. Nothing listed is changed.
func TestListAddressesReturnsTheRecordsBesideOnesItCannotDecode(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	cli, kv, s := newPagedStore(t, "/skip")
	mustCreate(t, ctx, s, v4(1), v4(2), v4(3), v4(4), netip.MustParseAddr("fd00::1"))
	// 10.0.0.2 edited by hand (a space: not what the store writes), a
	// key that is no address, on the first and the last page.
	edited, badKey := s.addrKey(v4(2)), s.ipPfx+"4/zz"
	for key, val := range map[string]string{edited: `{"v":2, "resource":"services","name":"x","created":0}`, badKey: `{"v":2}`} {
		if _, err := cli.Put(ctx, key, val); err != nil {
			t.Fatal(err)
		}
	}
	raw := func() map[string]string {
		resp, err := cli.Get(ctx, s.ipPfx, clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, kv := range resp.Kvs {
			out[string(kv.Key)] = fmt.Sprintf("%s@%d", kv.Value, kv.ModRevision)
		}
		return out
	}
	before := raw()

	kv.armed.Store(true)
	recs, err := s.ListAddresses(ctx)
	if n := kv.compactions.Load(); n != 1 {
		t.Fatalf("%d compactions between pages, want 1", n)
	}
	var got []netip.Addr
	for _, r := range recs {
		got = append(got, r.Addr)
	}
	if want := []netip.Addr{v4(1), v4(3), v4(4), netip.MustParseAddr("fd00::1")}; !slices.Equal(got, want) {
		t.Fatalf("ListAddresses = %v (%v), want %v", got, err, want)
	}
	var se *store.SkippedError
	if !errors.As(err, &se) || !errors.Is(err, store.ErrCorrupt) || se.Count != 2 || len(se.Records) != 2 {
		t.Fatalf("ListAddresses error %v, want a *store.SkippedError of 2 records matching ErrCorrupt", err)
	}
	if r := se.Records[0]; r.Addr != v4(2) {
		t.Errorf("first skipped record at %v, want %v", r.Addr, v4(2))
	} else {
		checkCorrupt(t, r.Err, edited)
	}
	if r := se.Records[1]; r.Addr.IsValid() {
		t.Errorf("a key that is no address skipped as %v", r.Addr)
	} else {
		checkCorrupt(t, r.Err, badKey)
	}
	if !strings.Contains(err.Error(), strconv.Quote(edited)) || !strings.Contains(err.Error(), strconv.Quote(badKey)) {
		t.Errorf("error %q does not name both keys", err)
	}
	if after := raw(); !maps.Equal(after, before) {
		t.Errorf("listing changed the records: %v, was %v", after, before)
	}

	// More than MaxSkipped.
	const n = store.MaxSkipped + 3
	for i := range n {
		if _, err := cli.Put(ctx, s.addrKey(v4(100+i)), "garbage"); err != nil {
			t.Fatal(err)
		}
	}
	recs, err = s.ListAddresses(ctx)
	if !errors.As(err, &se) || se.Count != n+2 || len(se.Records) != store.MaxSkipped || len(recs) != 4 {
		t.Fatalf("with %d keys left out: %d records, %v; want 4 and a *store.SkippedError counting %d, naming %d", n+2, len(recs), err, n+2, store.MaxSkipped)
	}
	if !strings.HasSuffix(err.Error(), "and 5 more") {
		t.Errorf("error %q does not count the keys it does not name", err)
	}
}

// newPagedStore returns a store on prefix that lists in pages of 2 keys
// (with opts besides), over a one-member cluster, its client, and the
// client's KV, which can compact the history between two pages; the store
// is closed with the test.
func newPagedStore(t *testing.T, prefix string, opts ...Option) (*clientv3.Client, *compactingKV, *Store) {
	t.Helper()
	c := startCluster(t, 1)
	cli := c.newClient(t)
	kv := &compactingKV{KV: cli.KV}
	cli.KV = kv
	s, err := New(cli, append([]Option{WithPrefix(prefix), WithPageSize(2)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return cli, kv, s
}
