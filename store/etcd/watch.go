package etcd

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// Backoff between failed re-lists.
const (
	minRelistBackoff = 50 * time.Millisecond
	maxRelistBackoff = 5 * time.Second
)

// Watch implements store.Store. It delivers the first snapshot before it
// returns, and fails if that snapshot cannot be read. After that, one
// goroutine per call applies the changes in revision order, and re-lists
// and Resets after a compacted, canceled or broken watch, until ctx ends or
// the store is closed.
//
// A key or value it cannot decode is reported to the error handler
// (*CorruptError), in the first snapshot as in every later one and in
// events, and the watch goes on: a CIDR it cannot read is left out, so it
// serves nothing until repaired; an address record's value is never read
// for a snapshot (the key is the address). One corrupt CIDR thus keeps no
// allocator from starting, as one corrupt record never did.
//
// A nil w is refused with an *ipaddress.FieldError (ipaddress.ErrInvalid),
// as every store refuses it.
func (s *Store) Watch(ctx context.Context, w store.Watcher) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.end()
	if w == nil {
		return &ipaddress.FieldError{Field: "watcher", Required: true, Detail: "Watch needs a watcher to tell"}
	}
	snap, err := s.snapshot(ctx, s.report)
	if err != nil {
		return err
	}
	w.Reset(snap)
	return s.goWatch(func(stop context.Context) {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(stop, cancel)()
		s.follow(wctx, w, snap.Revision)
	})
}

func (s *Store) report(err error) {
	if s.onError != nil {
		s.onError(err)
	}
}

// watchRange is the key range a watch reads and follows: the CIDRs and the
// address records; owner keys sort after it.
func (s *Store) watchRange() (start, end string) {
	return s.cidrPfx, clientv3.GetPrefixRangeEnd(s.ipPfx)
}

// snapshot reads the CIDRs (with values) and the address keys (keys only)
// at one revision. With report nil it fails on the first key or value it
// cannot decode; otherwise it reports it, leaves it out and goes on.
func (s *Store) snapshot(ctx context.Context, report func(error)) (store.Snapshot, error) {
	return retryCompacted(func() (store.Snapshot, error) { return s.snapshotOnce(ctx, report) })
}

func (s *Store) snapshotOnce(ctx context.Context, report func(error)) (store.Snapshot, error) {
	snap := store.Snapshot{Addrs: []netip.Addr{}}
	bad := func(err error) error {
		if report == nil {
			return err
		}
		report(err)
		return nil
	}
	rev, err := s.list(ctx, s.cidrPfx, clientv3.GetPrefixRangeEnd(s.cidrPfx), 0, false, func(kv *mvccpb.KeyValue) error {
		key := string(kv.Key)
		if nested(key[len(s.cidrPfx):]) {
			return nil
		}
		c, err := cidrFromKV(key, key[len(s.cidrPfx):], kv.Value, kv.ModRevision)
		if err != nil {
			return bad(err)
		}
		snap.CIDRs = append(snap.CIDRs, c)
		return nil
	})
	if err != nil {
		return store.Snapshot{}, err
	}
	_, err = s.list(ctx, s.ipPfx, clientv3.GetPrefixRangeEnd(s.ipPfx), rev, true, func(kv *mvccpb.KeyValue) error {
		key := string(kv.Key)
		a, err := addrFromKey(key, s.ipPfx)
		if err != nil {
			return bad(err)
		}
		snap.Addrs = append(snap.Addrs, a)
		return nil
	})
	if err != nil {
		return store.Snapshot{}, err
	}
	snap.Revision = rev
	return snap, nil
}

// follow applies the changes after revision rev to w until ctx ends,
// re-listing whenever the etcd watch ends while ctx is live.
func (s *Store) follow(ctx context.Context, w store.Watcher, rev int64) {
	for {
		err := s.watchFrom(ctx, w, &rev)
		if ctx.Err() != nil {
			return
		}
		s.report(fmt.Errorf("etcd store: watch from revision %d ended, re-listing: %w", rev+1, err))
		snap, ok := s.relist(ctx)
		if !ok {
			return
		}
		w.Reset(snap)
		rev = snap.Revision
	}
}

// relist reads a fresh snapshot, retrying with backoff; false when ctx ended
// first.
func (s *Store) relist(ctx context.Context) (store.Snapshot, bool) {
	backoff := minRelistBackoff
	for {
		snap, err := s.snapshot(ctx, s.report)
		if ctx.Err() != nil {
			return store.Snapshot{}, false
		}
		if err == nil {
			return snap, true
		}
		s.report(fmt.Errorf("etcd store: re-list: %w", err))
		select {
		case <-ctx.Done():
			return store.Snapshot{}, false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxRelistBackoff)
	}
}

// errWatchClosed: the etcd watch channel closed without saying why.
var errWatchClosed = errors.New("watch channel closed")

// watchFrom runs one etcd watch from *rev+1, applying its events and
// advancing *rev, until it ends; it returns why.
func (s *Store) watchFrom(ctx context.Context, w store.Watcher, rev *int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	start, end := s.watchRange()
	// No WithPrevKV: a delete's key names what went (the CIDR's name, the
	// address), which is all a delete event carries, and etcd would read
	// the old value of every deleted or updated key for every watcher.
	ch := s.cli.Watch(wctx, start, clientv3.WithRange(end), clientv3.WithRev(*rev+1))
	for resp := range ch {
		if err := resp.Err(); err != nil {
			return err
		}
		if resp.Canceled {
			return errors.New("watch canceled")
		}
		for _, ev := range resp.Events {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if e, ok := s.event(ev); ok {
				w.Apply(e)
			}
			*rev = ev.Kv.ModRevision
		}
	}
	return errWatchClosed
}

// event translates an etcd event; false for keys that are none of ours or
// cannot be decoded (reported).
func (s *Store) event(ev *clientv3.Event) (store.Event, bool) {
	key := string(ev.Kv.Key)
	rev := ev.Kv.ModRevision
	put := ev.Type == clientv3.EventTypePut
	switch {
	case len(key) >= len(s.cidrPfx) && key[:len(s.cidrPfx)] == s.cidrPfx:
		name := key[len(s.cidrPfx):]
		if nested(name) {
			return store.Event{}, false
		}
		if put {
			c, err := cidrFromKV(key, name, ev.Kv.Value, rev)
			if err != nil {
				s.report(err)
				// Serve nothing from a CIDR we cannot read.
				return store.Event{Kind: store.CIDRDeleted, Revision: rev, CIDR: cidrset.CIDR{Name: name}}, true
			}
			return store.Event{Kind: store.CIDRPut, Revision: rev, CIDR: c}, true
		}
		return store.Event{Kind: store.CIDRDeleted, Revision: rev, CIDR: cidrset.CIDR{Name: name}}, true
	case len(key) >= len(s.ipPfx) && key[:len(s.ipPfx)] == s.ipPfx:
		a, err := addrFromKey(key, s.ipPfx)
		if err != nil {
			s.report(err)
			return store.Event{}, false
		}
		r := ipaddress.IPAddress{Addr: a}
		if !put {
			return store.Event{Kind: store.AddressDeleted, Revision: rev, Address: r}, true
		}
		if dec, err := recordFromKV(key, a, ev.Kv.Value, 0); err != nil {
			s.report(err)
		} else {
			r.Parent, r.Created = dec.Parent, dec.Created
		}
		r.Revision = ev.Kv.ModRevision
		return store.Event{Kind: store.AddressPut, Revision: rev, Address: r}, true
	}
	return store.Event{}, false
}
