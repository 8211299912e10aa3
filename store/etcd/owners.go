package etcd

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// progressEvery is how often a caller waiting for the owner index to reach a
// revision asks etcd again for a progress notification: etcd drops the
// request while the stream has a watcher still catching up.
const progressEvery = 50 * time.Millisecond

// streamMetadataKey is outgoing gRPC metadata that gives each owner index
// a watch stream of its own (see watchFrom); etcd ignores it.
const streamMetadataKey = "netipam-owner-index"

// ownedAddr is one address of an owner, as the owner index keeps it.
type ownedAddr struct {
	addr    netip.Addr
	created int64 // Unix nanoseconds
	rev     int64 // the record's revision (its key's ModRevision)
}

// owned is an owner and its addresses, in no particular order.
type owned struct {
	ref   ipaddress.ParentRef
	addrs []ownedAddr
}

// ownedAt is where the owner index keeps an address: its owner, and its
// place in the owner's addrs, so that removing one of an owner's million
// addresses does not scan the others.
type ownedAt struct {
	o *owned
	i int
}

// corruptKey is a key under the address prefix the owner index cannot
// decode: its address (the zero Addr if the key does not decode either)
// and why, a *CorruptError naming the key.
type corruptKey struct {
	addr netip.Addr
	err  error
}

// ownerIndex maps owners to their address records, in this process. The
// first AddressesOf starts it: a listing of the address records, values
// included, then a watch of the address keys, until the store is closed.
type ownerIndex struct {
	s *Store
	// id tells this index's watch stream from every other (see watchFrom).
	id uint64

	mu sync.Mutex
	// rev is the revision the index reflects: every record created or
	// deleted at rev or before is in it or gone from it. 0 until the first
	// listing is done.
	rev     int64
	advance chan struct{} // closed and replaced when rev advances
	byAddr  map[netip.Addr]ownedAt
	byOwner map[ipaddress.ParentRef]*owned
	// corrupt holds the keys under the address prefix whose key or value
	// cannot be decoded: their owner is unknown, so every lookup names them.
	corrupt map[string]corruptKey
	// wctx is the context of the running etcd watch, whose gRPC stream
	// progress requests must go to.
	wctx context.Context
}

func newOwnerIndex(s *Store) *ownerIndex {
	// Random, not counted: no state shared by every store of the process.
	// Two of 2^64 alike on one client would only share a stream again.
	x := &ownerIndex{s: s, id: rand.Uint64(), advance: make(chan struct{})}
	x.clearLocked()
	return x
}

func (x *ownerIndex) clearLocked() {
	x.byAddr = map[netip.Addr]ownedAt{}
	x.byOwner = map[ipaddress.ParentRef]*owned{}
	x.corrupt = map[string]corruptKey{}
}

// setRevLocked records that the index reflects rev, waking waiters.
func (x *ownerIndex) setRevLocked(rev int64) {
	if rev <= x.rev {
		return
	}
	x.rev = rev
	close(x.advance)
	x.advance = make(chan struct{})
}

// putLocked applies a put of key (an address key, value included).
func (x *ownerIndex) putLocked(key string, value []byte, rev int64) {
	a, err := addrFromKey(key, x.s.ipPfx)
	if err != nil {
		x.corrupt[key] = corruptKey{err: err}
		return
	}
	x.removeLocked(a)
	delete(x.corrupt, key)
	r, err := recordFromKV(key, a, value, rev)
	if err != nil {
		x.corrupt[key] = corruptKey{addr: a, err: err}
		return
	}
	o := x.byOwner[r.Parent]
	if o == nil {
		o = &owned{ref: r.Parent}
		x.byOwner[r.Parent] = o
	}
	x.byAddr[a] = ownedAt{o, len(o.addrs)}
	o.addrs = append(o.addrs, ownedAddr{addr: a, created: r.Created.UnixNano(), rev: rev})
}

// deleteLocked applies a delete of key.
func (x *ownerIndex) deleteLocked(key string) {
	delete(x.corrupt, key)
	if a, err := addrFromKey(key, x.s.ipPfx); err == nil {
		x.removeLocked(a)
	}
}

func (x *ownerIndex) removeLocked(a netip.Addr) {
	at, ok := x.byAddr[a]
	if !ok {
		return
	}
	delete(x.byAddr, a)
	o, last := at.o, at.o.addrs[len(at.o.addrs)-1]
	if last.addr != a {
		o.addrs[at.i] = last
		x.byAddr[last.addr] = ownedAt{o, at.i}
	}
	o.addrs = o.addrs[:len(o.addrs)-1]
	if len(o.addrs) == 0 {
		delete(x.byOwner, o.ref)
	}
}

// load replaces the index's content with a listing of the address records
// (values included), all at one revision, and returns that revision. A
// failed listing leaves the index as it was.
func (x *ownerIndex) load(ctx context.Context) (int64, error) {
	fresh := &ownerIndex{s: x.s}
	rev, err := retryCompacted(func() (int64, error) {
		fresh.clearLocked()
		return x.s.list(ctx, x.s.ipPfx, clientv3.GetPrefixRangeEnd(x.s.ipPfx), 0, false, func(kv *mvccpb.KeyValue) error {
			fresh.putLocked(string(kv.Key), kv.Value, kv.ModRevision)
			return nil
		})
	})
	if err != nil {
		return 0, err
	}
	x.mu.Lock()
	x.byAddr, x.byOwner, x.corrupt = fresh.byAddr, fresh.byOwner, fresh.corrupt
	x.setRevLocked(rev)
	x.mu.Unlock()
	return rev, nil
}

// run lists the address records and follows their changes, listing again
// whenever the watch ends (and retrying a failed listing with backoff),
// until ctx ends.
func (x *ownerIndex) run(ctx context.Context) {
	backoff := minRelistBackoff
	for {
		rev, err := x.load(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			x.s.report(fmt.Errorf("etcd store: owner index: list: %w", err))
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, maxRelistBackoff)
			continue
		}
		backoff = minRelistBackoff
		err = x.watchFrom(ctx, rev)
		if ctx.Err() != nil {
			return
		}
		x.s.report(fmt.Errorf("etcd store: owner index: watch from revision %d ended, re-listing: %w", rev+1, err))
	}
}

// watchFrom runs one etcd watch of the address keys from rev+1 until it
// ends, and returns why.
func (x *ownerIndex) watchFrom(ctx context.Context, rev int64) error {
	// A gRPC stream of its own: the client shares one stream among the
	// watches whose contexts carry the same outgoing metadata, and etcd
	// answers a progress request only when every watcher on the stream is
	// synced and starts at or before the current revision. A Store.Watch
	// (an allocator's) or another Store's index on this client, started or
	// resumed after the latest write, starts past it, and would hold back
	// the notification that ends waitFor until etcd is written again.
	// Alone on its stream, the index's watch, from rev+1, holds back only
	// a wait for a revision the index has already reached.
	md := metadata.AppendToOutgoingContext(clientv3.WithRequireLeader(ctx), streamMetadataKey, strconv.FormatUint(x.id, 10))
	wctx, cancel := context.WithCancel(md)
	defer cancel()
	x.mu.Lock()
	x.wctx = wctx
	x.mu.Unlock()
	defer func() {
		x.mu.Lock()
		x.wctx = nil
		x.mu.Unlock()
	}()
	ch := x.s.cli.Watch(wctx, x.s.ipPfx, clientv3.WithRange(clientv3.GetPrefixRangeEnd(x.s.ipPfx)), clientv3.WithRev(rev+1))
	for resp := range ch {
		if err := resp.Err(); err != nil {
			return err
		}
		if resp.Canceled {
			return errors.New("watch canceled")
		}
		x.mu.Lock()
		if resp.IsProgressNotify() {
			// Every event up to the header's revision was delivered.
			x.setRevLocked(resp.Header.Revision)
		}
		for _, ev := range resp.Events {
			if ev.Type == clientv3.EventTypePut {
				x.putLocked(string(ev.Kv.Key), ev.Kv.Value, ev.Kv.ModRevision)
			} else {
				x.deleteLocked(string(ev.Kv.Key))
			}
		}
		if n := len(resp.Events); n > 0 {
			// Not the header's revision: a watch catching up may send
			// its events in several responses, each with the current
			// revision in its header.
			x.setRevLocked(resp.Events[n-1].Kv.ModRevision)
		}
		x.mu.Unlock()
	}
	return errWatchClosed
}

// ownerIndex returns the store's owner index, starting it (in the
// background, for the store's lifetime) on the first call. It may not have
// loaded yet: see waitFor.
func (s *Store) ownerIndex() (*ownerIndex, error) {
	if x := s.owners.Load(); x != nil {
		return x, nil
	}
	s.startMu.Lock()
	defer s.startMu.Unlock()
	if x := s.owners.Load(); x != nil {
		return x, nil
	}
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	x := newOwnerIndex(s)
	s.watches.Add(1)
	go func() {
		defer s.watches.Done()
		x.run(s.stop)
	}()
	s.owners.Store(x)
	return x, nil
}

// waitFor blocks until the index reflects revision rev, asking etcd for
// progress notifications meanwhile (a revision that is not an address
// write produces no event).
func (x *ownerIndex) waitFor(ctx context.Context, rev int64) error {
	var last time.Time
	for {
		x.mu.Lock()
		at, advance, wctx := x.rev, x.advance, x.wctx
		x.mu.Unlock()
		if at >= rev {
			return nil
		}
		if wctx != nil && time.Since(last) >= progressEvery {
			last = time.Now()
			// Failures are not errors here: a broken watch re-lists,
			// which advances the index too.
			_ = x.s.cli.RequestProgress(wctx)
		}
		timer := time.NewTimer(progressEvery)
		select {
		case <-advance:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-x.s.stop.Done():
			timer.Stop()
			return store.ErrClosed
		}
		timer.Stop()
	}
}

// reaches waits up to d for the index to reflect revision rev, without
// asking etcd for anything, and reports whether it does.
func (x *ownerIndex) reaches(ctx context.Context, rev int64, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		x.mu.Lock()
		at, advance := x.rev, x.advance
		x.mu.Unlock()
		if at >= rev {
			return true
		}
		select {
		case <-advance:
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		case <-x.s.stop.Done():
			return false
		}
	}
}

// lookup returns owner's records, in address order, and a
// *store.SkippedError naming every key that cannot be decoded, in key order:
// any of them might be owner's.
func (x *ownerIndex) lookup(owner ipaddress.ParentRef) ([]ipaddress.IPAddress, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	var skipped *store.SkippedError
	if len(x.corrupt) > 0 {
		skipped = &store.SkippedError{}
		for _, k := range slices.Sorted(maps.Keys(x.corrupt)) {
			c := x.corrupt[k]
			skipped.Skip(c.addr, c.err)
		}
	}
	out := []ipaddress.IPAddress{}
	if o := x.byOwner[owner]; o != nil {
		for _, e := range o.addrs {
			out = append(out, ipaddress.IPAddress{Addr: e.addr, Parent: o.ref, Created: time.Unix(0, e.created), Revision: e.rev})
		}
	}
	slices.SortFunc(out, func(a, b ipaddress.IPAddress) int { return a.Addr.Compare(b.Addr) })
	if skipped != nil {
		return out, skipped
	}
	return out, nil
}
