// Package bolt is a durable single-node store.Store: one file, written
// through go.etcd.io/bbolt. Every write is committed in a bbolt read-write
// transaction, synced to disk before it returns, so every acknowledged write
// survives a crash of the process or the machine. Writes made at the same
// time share a transaction and its fsync (group commit), each at its own
// revision and with the outcome it would have alone. The file is locked
// while open: one process at a time (Open fails with ErrLocked for the
// second).
//
// Watchers are in-process, as in store/memory: Watch delivers a snapshot
// read in one transaction, then every committed write in revision order,
// called after the commit, before the write returns, while the store's write
// mutex is held, in the goroutine that committed it (another writer's, when
// writes share a transaction). An allocator's index is current the moment a
// write returns, and opening an existing file and watching it rebuilds the
// index from everything in it (an allocator's cold start).
//
// # File layout (format version 1)
//
// Four top-level buckets:
//
//	meta    "version"  → 1 byte: the format version (1)
//	        "revision" → 8 bytes big-endian: the store revision, that of the
//	                     last write; one more for every write
//	cidrs   CIDR name                 → CIDR value
//	addrs   address key (17 bytes)    → address value
//	owners  owner ‖ address key       → empty (the owner index)
//
// An address key is the family byte (4 or 6) followed by the address as a
// 128-bit big-endian number (an IPv4 address in the last four bytes, the
// twelve before it zero): keys sort by family, then numerically, so a
// cursor walks IPv4 before IPv6, each in address order.
//
// An owner is encoded as its four fields Group, Resource, Namespace and
// Name, in that order, each as a uvarint length followed by its bytes. The
// encoding is self-delimiting, so no owner's encoding is a prefix of
// another's, and AddressesOf is a prefix scan of the owner index. The
// key of every owner store.CheckOwner takes fits a bbolt key. Files
// written before this store applied it may hold a few owners it refuses
// (not UTF-8, or up to 3 bytes longer): they are read, found and deleted
// like any other.
//
// # Values (value version 1)
//
// Every value starts with the version byte 1. Varints are encoding/binary
// varints in their shortest form (signed ones zig-zag encoded); Created is
// stored as Unix nanoseconds.
//
//	address: 0x01 ‖ varint created ‖ uvarint revision ‖ owner
//	CIDR:    0x01 ‖ flags ‖ varint created ‖ uvarint revision ‖ count (1 byte) ‖
//	         count × (family (4 or 6) ‖ 4 or 16 address bytes ‖ prefix length)
//
// The flags byte of a CIDR has bit 0 for Terminating; the other bits are
// zero. A decoder accepts exactly what the encoder writes: a value of
// another version, a truncated value, trailing bytes, a varint not in its
// shortest form or an unknown flag is an error wrapping store.ErrCorrupt
// (a *CorruptError naming the bucket and the key), never a panic.
// ListAddresses leaves out an address record it cannot decode and returns
// the others with a *store.SkippedError naming it; so does AddressesOf,
// for such a record the owner index files under the owner asked for, or
// one whose value names another owner. Other reads of it fail, Watch too
// (so an allocator does not start on the file). A file damaged
// below the records, which bbolt panics on (a bad page) or which faults
// when read (a truncated file), gives a *CorruptError too, with no bucket;
// the store that read it is best closed. So does Open, for a file bbolt
// cannot open as a database at all: one of another kind, one too short for
// its two meta pages, or one whose meta pages are both damaged.
//
// Created times are kept to the nanosecond between the years 1678 and 2262.
package bolt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// DefaultLockTimeout is how long Open waits for the file lock by default.
const DefaultLockTimeout = time.Second

// Option configures Open.
type Option func(*options)

type options struct {
	lockTimeout time.Duration
	now         func() time.Time
	mode        os.FileMode
	readOnly    bool
	maxSize     int
}

// WithLockTimeout sets how long Open waits for another process to release
// the file lock before it fails with ErrLocked (default DefaultLockTimeout;
// it tries every 50 ms). Zero tries once; a negative timeout waits for
// ever, or until OpenContext's context ends.
func WithLockTimeout(d time.Duration) Option { return func(o *options) { o.lockTimeout = d } }

// WithReadOnly opens the file for reading only, under a lock shared with
// other readers: enough to read a file one may not write, and no write
// reaches it (every write fails with ErrReadOnly). Open then refuses a
// file that is not a netipam store yet, such as an empty one, with
// ErrNotAStore, rather than making it one.
func WithReadOnly() Option { return func(o *options) { o.readOnly = true } }

// WithClock sets the clock that stamps Created (for tests); nil is
// time.Now. A write reads it when called, before it waits for the file,
// so a panic of the clock is its caller's panic: the store and the writes
// of others go on, and it is not reported as a damaged file.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithMaxSize bounds the file at n bytes (default, or n <= 0: no bound).
// A write that would grow it past n fails with an error matching
// store.ErrNoSpace and writes nothing; so does one that finds the disk
// full. The file never shrinks, but the pages of deleted records are
// reused, so deleting records makes room again. bbolt grows the file in
// powers of two up to 16 MiB and in 16 MiB steps past that, so the bound
// is reached a little before the data fills n bytes.
func WithMaxSize(n int) Option { return func(o *options) { o.maxSize = n } }

// WithFileMode sets the permissions of a file Open creates (default 0600).
func WithFileMode(m os.FileMode) Option { return func(o *options) { o.mode = m } }

// Store is a store.Store in one bbolt file. Create it with Open and Close it
// when done; it is safe for concurrent use.
type Store struct {
	db     *bbolt.DB
	path   string
	now    func() time.Time
	closed atomic.Bool

	// mu is the write mutex: it serialises write transactions with the
	// delivery of their events, and guards watchers.
	mu       sync.Mutex
	watchers map[*watcher]struct{}

	// qmu guards the queue of writes waiting to be committed, and
	// committing, true while a caller commits (see update).
	qmu        sync.Mutex
	queue      []*pendingWrite
	committing bool
	commits    int // transactions committed, for tests; guarded by mu
}

type watcher struct {
	ctx context.Context
	w   store.Watcher
}

var (
	_ store.Store          = (*Store)(nil)
	_ store.RecordsDeleter = (*Store)(nil)
)

// Open opens the store in the file at path, creating it if missing. The
// file stays locked until Close; if another process holds it, Open waits up
// to the lock timeout and then returns a *LockedError (ErrLocked). A file
// bbolt cannot read (not a bbolt file, or damaged) is a *CorruptError
// (store.ErrCorrupt); a bbolt file of another program's, ErrNotAStore.
func Open(path string, opts ...Option) (*Store, error) {
	return OpenContext(context.Background(), path, opts...)
}

// OpenContext is Open with a wait for the file lock that also ends when
// ctx does, with an error wrapping ctx's. A nil Option is ignored.
func OpenContext(ctx context.Context, path string, opts ...Option) (*Store, error) {
	o := options{lockTimeout: DefaultLockTimeout, now: time.Now, mode: 0o600}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.now == nil {
		o.now = time.Now
	}
	if o.readOnly {
		// bbolt would try to initialise an empty file, and fail to write.
		if fi, err := os.Stat(path); err == nil && fi.Size() == 0 {
			return nil, fmt.Errorf("bolt: open %s: %w (an empty file)", path, ErrNotAStore)
		}
	}
	// One attempt at a time, here rather than in bbolt, whose wait for
	// the lock knows no context.
	start := time.Now()
	var db *bbolt.DB
	for {
		// The file bbolt opens, for when it panics on it: the panic leaves
		// the file open and locked, which would refuse every later Open of
		// it in this process. (Its memory mapping stays; bbolt gives no way
		// to undo that.)
		var file *os.File
		openFile := func(name string, flag int, mode os.FileMode) (*os.File, error) {
			f, err := os.OpenFile(name, flag, mode)
			file = f
			return f, err
		}
		err := guard(path, func() (err error) {
			db, err = bbolt.Open(path, o.mode, &bbolt.Options{Timeout: time.Nanosecond, ReadOnly: o.readOnly, OpenFile: openFile, MaxSize: o.maxSize})
			return err
		})
		if err == nil {
			break
		}
		if errors.Is(err, store.ErrCorrupt) {
			if file != nil {
				_ = unlockFile(file)
				_ = file.Close()
			}
			return nil, err
		}
		if unreadable(err) {
			// bbolt closed the file: no lock is left.
			return nil, &CorruptError{Err: fmt.Errorf("%s: not a bbolt file, or a damaged one (%w); \"bbolt check %s\" tells more", path, err, path)}
		}
		if !errors.Is(err, berrors.ErrTimeout) {
			return nil, fmt.Errorf("bolt: open %s: %w", path, err)
		}
		if o.lockTimeout >= 0 && time.Since(start) >= o.lockTimeout {
			return nil, &LockedError{Path: path, Timeout: o.lockTimeout}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("bolt: open %s: waiting for another process's file lock: %w", path, ctx.Err())
		case <-time.After(lockRetry):
		}
	}
	created := false
	if err := guard(path, func() (err error) { created, err = initFile(db, o.readOnly); return err }); err != nil {
		_ = db.Close()
		if isNoSpace(err) {
			return nil, noSpaceError(path, err)
		}
		return nil, fmt.Errorf("bolt: open %s: %w", path, err)
	}
	if created {
		// The file's contents are synced with every commit, but its name
		// is an entry of the directory: a machine that crashed before the
		// directory reached the disk would lose the whole store.
		if err := syncDir(filepath.Dir(path)); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("bolt: open %s: syncing its directory: %w", path, err)
		}
	}
	return &Store{db: db, path: path, now: o.now, watchers: map[*watcher]struct{}{}}, nil
}

// clock reads the embedder's clock (WithClock) in Unix nanoseconds. Writes
// read it before they queue, never inside a transaction: a panic of the
// embedder's code then reaches its own caller, holding no lock and
// failing no write queued with it, and guard never sees it.
func (s *Store) clock() int64 { return s.now().UnixNano() }

// lockRetry is how often Open tries the file lock again, as bbolt would.
const lockRetry = 50 * time.Millisecond

// initFile creates the buckets of a new file and checks the format version
// of an existing one; created reports that it made a new store. A file
// opened read-only must have them already.
func initFile(db *bbolt.DB, readOnly bool) (created bool, err error) {
	ready := false
	err = db.View(func(tx *bbolt.Tx) error {
		var err error
		ready, err = checkMeta(tx)
		return err
	})
	if err != nil || ready {
		return false, err
	}
	if readOnly {
		return false, ErrNotAStore
	}
	return true, db.Update(func(tx *bbolt.Tx) error {
		if ready, err := checkMeta(tx); err != nil || ready {
			return err
		}
		if tx.Bucket(bucketMeta) == nil {
			var foreign []byte
			_ = tx.ForEach(func(name []byte, _ *bbolt.Bucket) error {
				foreign = name
				return errors.New("stop")
			})
			if foreign != nil {
				return fmt.Errorf("%w: bucket %q without a %q bucket", ErrNotAStore, foreign, bucketMeta)
			}
		}
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		if err := meta.Put(keyVersion, []byte{formatVersion}); err != nil {
			return err
		}
		if meta.Get(keyRevision) == nil {
			if err := meta.Put(keyRevision, encodeRevision(0)); err != nil {
				return err
			}
		}
		for _, name := range [][]byte{bucketCIDRs, bucketAddrs, bucketOwners} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	})
}

// errMissing is the cause of a CorruptError for a key or bucket that an
// initialised file always has.
var errMissing = errors.New("missing from an initialised file")

// checkMeta reports whether the file is initialised, and an error if its
// format version is not this package's or it lacks part of what
// initialisation wrote.
func checkMeta(tx *bbolt.Tx) (bool, error) {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		return false, nil
	}
	// Initialisation is one transaction, so a file with a meta bucket but
	// without its version or a data bucket was damaged: recreating what is
	// missing would hide lost CIDRs or owner keys behind an empty bucket.
	v := meta.Get(keyVersion)
	if v == nil {
		return false, corruptAt(bucketMeta, keyVersion, errMissing)
	}
	ver, err := decodeFormatVersion(v)
	if err != nil {
		return false, corruptAt(bucketMeta, keyVersion, err)
	}
	if ver != formatVersion {
		return false, fmt.Errorf("format version %d, this package reads %d: %w", ver, formatVersion, ErrFormatVersion)
	}
	if _, err := readMetaRevision(tx); err != nil {
		return false, err
	}
	for _, name := range [][]byte{bucketCIDRs, bucketAddrs, bucketOwners} {
		if tx.Bucket(name) == nil {
			return false, corruptAt(name, nil, errMissing)
		}
	}
	return true, nil
}

func readMetaRevision(tx *bbolt.Tx) (int64, error) {
	v := tx.Bucket(bucketMeta).Get(keyRevision)
	if v == nil {
		return 0, corruptAt(bucketMeta, keyRevision, corrupt("missing"))
	}
	rev, err := decodeRevision(v)
	if err != nil {
		return 0, corruptAt(bucketMeta, keyRevision, err)
	}
	return rev, nil
}

// Path returns the file the store is in.
func (s *Store) Path() string { return s.path }

// checkOpen returns ErrClosed or the context's error, in that order, for a
// call to give before it looks at its input: after Close every call is
// ErrClosed, whatever else is wrong.
func (s *Store) checkOpen(ctx context.Context) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	return ctx.Err()
}

// view runs fn in a read transaction.
func (s *Store) view(ctx context.Context, fn func(*bbolt.Tx) error) error {
	if err := s.checkOpen(ctx); err != nil {
		return err
	}
	err := guard(s.path, func() error { return s.db.View(fn) })
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return store.ErrClosed
	}
	return err
}

// A writeFn is one write: it runs in a read-write transaction at the
// store revision rev, returns the events to deliver once the transaction
// is committed, or an error, before or after writing to tx. It may be run
// more than once (see update), so it keeps no state but what each run sets
// afresh. One that returns no events must have written nothing: it takes
// no revision (an empty CreateAddresses).
type writeFn func(tx *bbolt.Tx, rev int64) ([]store.Event, error)

// A pendingWrite is a write waiting in the queue, and its outcome.
type pendingWrite struct {
	fn  writeFn
	evs []store.Event
	// done is set once the write is committed or has failed (err).
	done bool
	err  error
	// signal is sent true when the write's goroutine is to commit the
	// queue itself, false when the write is done.
	signal chan bool
}

// errNotRun is the outcome of a write that was queued behind a commit
// whose goroutine panicked (in a watcher's Apply) before running it.
var errNotRun = errors.New("bolt: write not made: a watcher panicked while an earlier write in its commit was delivered")

// maxGroup bounds the writes one transaction commits, so that one
// commit's latency stays bounded under a flood of writes.
const maxGroup = 256

// update runs fn in a write transaction at the next revision, stores that
// revision if fn succeeds, and delivers fn's events to the watchers once
// the transaction is committed (synced).
//
// Writes made at the same time share a transaction (group commit): the
// caller that finds no commit in progress commits every write queued by
// the time it holds the write mutex, in the order queued, each at its own
// revision, with one fsync; writes queued meanwhile wait, and the first of
// them commits the next group. A write is therefore acknowledged only once
// it is on disk, as with a transaction each, and its effects and events
// are exactly those of the writes run one after the other in queue order:
// a write that fails leaves nothing behind and sees the writes before it
// (see commitGroup).
func (s *Store) update(ctx context.Context, fn writeFn) error {
	if err := s.checkOpen(ctx); err != nil {
		return err
	}
	w := &pendingWrite{fn: fn, signal: make(chan bool, 1)}
	s.qmu.Lock()
	s.queue = append(s.queue, w)
	lead := !s.committing
	s.committing = true
	s.qmu.Unlock()
	if !lead && !<-w.signal {
		return w.err
	}
	var group []*pendingWrite
	defer s.handOver(w, &group)
	s.mu.Lock()
	defer s.mu.Unlock()
	// The group is taken once the write mutex is held, so that writes
	// queued while it was waited for join it.
	s.qmu.Lock()
	n := min(len(s.queue), maxGroup)
	group = s.queue[:n:n]
	s.queue = s.queue[n:]
	s.qmu.Unlock()
	s.commitGroup(group)
	return w.err
}

// handOver ends a commit by w's goroutine: it passes the commit to the
// first write queued meanwhile, if any, and tells the others of group
// their outcome. It runs deferred, so that a watcher's panic leaves no
// write waiting for ever.
func (s *Store) handOver(w *pendingWrite, group *[]*pendingWrite) {
	s.qmu.Lock()
	if len(s.queue) > 0 {
		s.queue[0].signal <- true
	} else {
		s.committing = false
		s.queue = nil
	}
	s.qmu.Unlock()
	for _, o := range *group {
		if !o.done {
			o.done, o.err = true, errNotRun
		}
		if o != w {
			o.signal <- false
		}
	}
}

// commitGroup commits the writes of group, in order, and delivers their
// events; it sets each write's outcome. A write that fails is judged
// against the store as the writes before it in group left it: the
// transaction is rolled back, the writes before it are committed again
// without it, and its error is the one it gives when run first in a
// transaction of its own. A transaction of several writes that fails to
// commit (the file full, say) is retried a write at a time, so that each
// gets its own outcome. s.mu is held.
func (s *Store) commitGroup(group []*pendingWrite) {
	for len(group) > 0 {
		if s.closed.Load() {
			for _, w := range group {
				w.done, w.err = true, store.ErrClosed // closed meanwhile
			}
			return
		}
		ran, failed, err := s.commit(group)
		switch {
		case failed && ran == 0:
			group[0].done, group[0].err = true, err
			group = group[1:]
			continue
		case failed:
			// group[ran] failed: the ones before it are committed again
			// without it, and it runs first in the next transaction.
			if _, failed, err := s.commit(group[:ran]); failed || err != nil {
				// The same writes over the same store did not fail a
				// moment ago: only the file can differ (I/O, space).
				s.commitAlone(group[:ran])
				group = group[ran:]
				continue
			}
		case err != nil && len(group) > 1:
			s.commitAlone(group)
			return
		case err != nil:
			group[0].done, group[0].err = true, err
			return
		}
		// All marked made before any is delivered: a watcher's panic
		// must not have handOver report a committed write as not made.
		for _, w := range group[:ran] {
			w.done = true
		}
		for _, w := range group[:ran] {
			s.deliver(w.evs)
		}
		group = group[ran:]
	}
}

// commitAlone commits each write of group in a transaction of its own.
func (s *Store) commitAlone(group []*pendingWrite) {
	for _, w := range group {
		if s.closed.Load() {
			w.done, w.err = true, store.ErrClosed
			continue
		}
		_, failed, err := s.commit([]*pendingWrite{w})
		w.done = true
		if failed || err != nil {
			w.err = err
			continue
		}
		s.deliver(w.evs)
	}
}

// commit runs the writes of group in one transaction, each at the next
// revision. If the write at index ran fails, the transaction is rolled back
// and commit returns ran, true and its error; otherwise it returns
// len(group), false and the commit's error (nil when every write is on
// disk, their events in their evs).
func (s *Store) commit(group []*pendingWrite) (ran int, failed bool, err error) {
	err = guard(s.path, func() error {
		return s.db.Update(func(tx *bbolt.Tx) error {
			rev, err := readMetaRevision(tx)
			if err != nil {
				failed = true
				return err
			}
			for _, w := range group {
				if rev == math.MaxInt64 {
					// The next revision would wrap to one the decoders
					// refuse, leaving a file that no longer opens. No
					// store writes that often: the counter was damaged.
					failed = true
					return corruptAt(bucketMeta, keyRevision, corrupt("revision %d leaves none for a write", rev))
				}
				rev++
				evs, err := w.fn(tx, rev)
				if err != nil {
					failed = true
					return err
				}
				w.evs = evs
				if len(evs) == 0 {
					rev-- // it wrote nothing: no revision, which no watcher would hear of
				}
				ran++
			}
			return tx.Bucket(bucketMeta).Put(keyRevision, encodeRevision(rev))
		})
	})
	switch {
	case err == nil:
		s.commits++
	case errors.Is(err, berrors.ErrDatabaseNotOpen):
		err = store.ErrClosed
	case errors.Is(err, berrors.ErrDatabaseReadOnly):
		err = fmt.Errorf("bolt: %s: %w", s.path, ErrReadOnly)
	case isNoSpace(err):
		err = noSpaceError(s.path, err)
	}
	return ran, failed, err
}

// deliver gives evs to every watcher still watching; s.mu is held.
func (s *Store) deliver(evs []store.Event) {
	for _, e := range evs {
		for w := range s.watchers {
			if w.ctx.Err() == nil {
				w.w.Apply(e)
			}
		}
	}
}

// getCIDR reads and decodes one CIDR; ok is false if it is missing.
func getCIDR(tx *bbolt.Tx, name string) (c cidrset.CIDR, ok bool, err error) {
	key := []byte(name)
	v := tx.Bucket(bucketCIDRs).Get(key)
	if v == nil {
		return c, false, nil
	}
	c, err = decodeCIDRValue(name, v)
	if err != nil {
		return c, false, corruptAt(bucketCIDRs, key, err)
	}
	return c, true, nil
}

func putCIDR(tx *bbolt.Tx, c cidrset.CIDR) error {
	if err := tx.Bucket(bucketCIDRs).Put([]byte(c.Name), appendCIDRValue(nil, c)); err != nil {
		return fmt.Errorf("bolt: storing CIDR %q: %w", c.Name, err)
	}
	return nil
}

// checkFences reports the first fence that does not hold in tx, whose
// write is to be at revision rev.
func checkFences(tx *bbolt.Tx, fences []store.Fence, rev int64) error {
	for _, f := range fences {
		c, ok, err := getCIDR(tx, f.CIDR)
		if err != nil {
			return err
		}
		if !ok || !f.HeldAt(c.Revision) {
			return &store.FencedError{Fence: f, Seen: rev - 1}
		}
	}
	return nil
}

// CreateCIDR implements store.Store.
func (s *Store) CreateCIDR(ctx context.Context, c cidrset.CIDR) (cidrset.CIDR, error) {
	if err := s.checkOpen(ctx); err != nil {
		return cidrset.CIDR{}, err
	}
	if err := store.CheckCIDR(c); err != nil {
		return cidrset.CIDR{}, err
	}
	c = c.Clone()
	created := s.clock()
	err := s.update(ctx, func(tx *bbolt.Tx, rev int64) ([]store.Event, error) {
		if tx.Bucket(bucketCIDRs).Get([]byte(c.Name)) != nil {
			return nil, fmt.Errorf("CIDR %q: %w", c.Name, store.ErrExists)
		}
		c.Created = unixTime(created)
		c.Revision = rev
		if err := putCIDR(tx, c); err != nil {
			return nil, err
		}
		return []store.Event{{Kind: store.CIDRPut, Revision: rev, CIDR: c.Clone()}}, nil
	})
	if err != nil {
		return cidrset.CIDR{}, err
	}
	return c, nil
}

// UpdateCIDR implements store.Store.
func (s *Store) UpdateCIDR(ctx context.Context, c cidrset.CIDR) (cidrset.CIDR, error) {
	if err := s.checkOpen(ctx); err != nil {
		return cidrset.CIDR{}, err
	}
	if err := store.CheckCIDR(c); err != nil {
		return cidrset.CIDR{}, err
	}
	c = c.Clone()
	want := c.Revision // c.Revision is set by a run of the write, which may run again
	err := s.update(ctx, func(tx *bbolt.Tx, rev int64) ([]store.Event, error) {
		old, ok, err := getCIDR(tx, c.Name)
		switch {
		case err != nil:
			return nil, err
		case !ok:
			return nil, fmt.Errorf("CIDR %q: %w", c.Name, store.ErrNotFound)
		case old.Revision != want:
			return nil, fmt.Errorf("CIDR %q at revision %d, not %d: %w", c.Name, old.Revision, want, store.ErrConflict)
		}
		c.Created = old.Created
		c.Revision = rev
		if err := putCIDR(tx, c); err != nil {
			return nil, err
		}
		return []store.Event{{Kind: store.CIDRPut, Revision: rev, CIDR: c.Clone()}}, nil
	})
	if err != nil {
		return cidrset.CIDR{}, err
	}
	return c, nil
}

// DeleteCIDR implements store.Store.
func (s *Store) DeleteCIDR(ctx context.Context, name string, rev int64, fences ...store.Fence) error {
	return s.update(ctx, func(tx *bbolt.Tx, next int64) ([]store.Event, error) {
		old, ok, err := getCIDR(tx, name)
		switch {
		case err != nil:
			return nil, err
		case !ok:
			return nil, fmt.Errorf("CIDR %q: %w", name, store.ErrNotFound)
		case old.Revision != rev:
			return nil, fmt.Errorf("CIDR %q at revision %d, not %d: %w", name, old.Revision, rev, store.ErrConflict)
		}
		if err := checkFences(tx, fences, next); err != nil {
			return nil, err
		}
		if err := tx.Bucket(bucketCIDRs).Delete([]byte(name)); err != nil {
			return nil, err
		}
		return []store.Event{{Kind: store.CIDRDeleted, Revision: next, CIDR: old}}, nil
	})
}

// GetCIDR implements store.Store.
func (s *Store) GetCIDR(ctx context.Context, name string) (cidrset.CIDR, error) {
	var c cidrset.CIDR
	err := s.view(ctx, func(tx *bbolt.Tx) error {
		var ok bool
		var err error
		c, ok, err = getCIDR(tx, name)
		if err == nil && !ok {
			err = fmt.Errorf("CIDR %q: %w", name, store.ErrNotFound)
		}
		return err
	})
	if err != nil {
		return cidrset.CIDR{}, err
	}
	return c, nil
}

// CreateAddresses implements store.Store.
func (s *Store) CreateAddresses(ctx context.Context, recs []ipaddress.IPAddress, fences ...store.Fence) ([]ipaddress.IPAddress, error) {
	if err := s.checkOpen(ctx); err != nil {
		return nil, err
	}
	keys := make([][]byte, len(recs))
	var seen map[netip.Addr]bool // a batch's own duplicates, for a large batch
	if len(recs) > 8 {
		seen = make(map[netip.Addr]bool, len(recs))
	}
	for i, r := range recs {
		if err := ipaddress.ValidateAddr(r.Addr); err != nil {
			return nil, err
		}
		if err := store.CheckOwner(r.Parent); err != nil {
			return nil, err
		}
		// Before the write lock, and linear in the batch.
		dup := seen[r.Addr]
		if seen != nil {
			seen[r.Addr] = true
		} else {
			dup = slices.ContainsFunc(recs[:i], func(p ipaddress.IPAddress) bool { return p.Addr == r.Addr })
		}
		if dup {
			return nil, &store.AddressExistsError{Addr: r.Addr}
		}
		keys[i] = appendAddrKey(make([]byte, 0, addrKeyLen), r.Addr)
	}
	var out []ipaddress.IPAddress
	now := s.clock()
	err := s.update(ctx, func(tx *bbolt.Tx, rev int64) ([]store.Event, error) {
		addrs, owners := tx.Bucket(bucketAddrs), tx.Bucket(bucketOwners)
		for i, r := range recs {
			if addrs.Get(keys[i]) != nil {
				return nil, &store.AddressExistsError{Addr: r.Addr}
			}
		}
		if err := checkFences(tx, fences, rev); err != nil {
			return nil, err
		}
		var evs []store.Event
		for i, f := range fences {
			if !f.Touch || slices.ContainsFunc(fences[:i], func(g store.Fence) bool { return g.Touch && g.CIDR == f.CIDR }) {
				continue // touched, and told, once
			}
			c, _, err := getCIDR(tx, f.CIDR)
			if err != nil {
				return nil, err
			}
			c.Revision = rev
			if err := putCIDR(tx, c); err != nil {
				return nil, err
			}
			evs = append(evs, store.Event{Kind: store.CIDRPut, Revision: rev, CIDR: c.Clone()})
		}
		out = make([]ipaddress.IPAddress, len(recs))
		for i, r := range recs {
			// bbolt keeps keys and values until the commit: no buffer reuse.
			v := addrValue{parent: r.Parent, created: now, rev: rev}
			if err := addrs.Put(keys[i], appendAddrValue(nil, v)); err != nil {
				return nil, fmt.Errorf("bolt: storing address %s: %w", r.Addr, err)
			}
			if err := owners.Put(appendOwnerKey(nil, r.Parent, r.Addr), nil); err != nil {
				return nil, fmt.Errorf("bolt: indexing address %s: %w", r.Addr, err)
			}
			out[i] = v.record(r.Addr)
			evs = append(evs, store.Event{Kind: store.AddressPut, Revision: rev, Address: out[i]})
		}
		return evs, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// getAddress reads and decodes the record of key; ok is false if missing.
func getAddress(tx *bbolt.Tx, a netip.Addr, key []byte) (ipaddress.IPAddress, bool, error) {
	v := tx.Bucket(bucketAddrs).Get(key)
	if v == nil {
		return ipaddress.IPAddress{}, false, nil
	}
	av, err := decodeAddrValue(v)
	if err != nil {
		return ipaddress.IPAddress{}, false, corruptAt(bucketAddrs, key, err)
	}
	return av.record(a), true, nil
}

// DeleteAddress implements store.Store.
func (s *Store) DeleteAddress(ctx context.Context, addr netip.Addr) (ipaddress.IPAddress, int64, error) {
	return s.deleteAddress(ctx, addr, 0, true)
}

// DeleteAddressAt implements store.Store.
func (s *Store) DeleteAddressAt(ctx context.Context, addr netip.Addr, rev int64) (ipaddress.IPAddress, int64, error) {
	return s.deleteAddress(ctx, addr, rev, false)
}

// deleteAddress removes the record of addr if its revision is want, or
// whatever its revision if anyRev. A flag, not a sentinel revision: every
// want DeleteAddressAt is given must be compared, 0 included.
func (s *Store) deleteAddress(ctx context.Context, addr netip.Addr, want int64, anyRev bool) (ipaddress.IPAddress, int64, error) {
	if checkAddr(addr) != nil {
		if err := s.checkOpen(ctx); err != nil {
			return ipaddress.IPAddress{}, 0, err
		}
		return ipaddress.IPAddress{}, 0, fmt.Errorf("address %s: %w", addr, store.ErrNotFound)
	}
	key := appendAddrKey(nil, addr)
	var rec ipaddress.IPAddress
	var deleted int64
	err := s.update(ctx, func(tx *bbolt.Tx, rev int64) ([]store.Event, error) {
		deleted = rev
		var ok bool
		var err error
		rec, ok, err = getAddress(tx, addr, key)
		switch {
		case err != nil:
			return nil, err
		case !ok:
			return nil, fmt.Errorf("address %s: %w", addr, store.ErrNotFound)
		case !anyRev && rec.Revision != want:
			return nil, fmt.Errorf("address %s at revision %d, not %d: %w", addr, rec.Revision, want, store.ErrConflict)
		}
		if err := deleteOwnerEntry(tx, rec, key); err != nil {
			return nil, err
		}
		if err := tx.Bucket(bucketAddrs).Delete(key); err != nil {
			return nil, err
		}
		return []store.Event{{Kind: store.AddressDeleted, Revision: rev, Address: rec}}, nil
	})
	if err != nil {
		return ipaddress.IPAddress{}, 0, err
	}
	return rec, deleted, nil
}

// DeleteRecords implements store.RecordsDeleter: one write transaction, and
// one fsync, for all of recs, where DeleteAddressAt takes one each.
func (s *Store) DeleteRecords(ctx context.Context, recs []ipaddress.IPAddress) (int64, error) {
	if len(recs) == 0 {
		return 0, s.checkOpen(ctx)
	}
	if err := store.CheckDistinct(recs); err != nil {
		return 0, err
	}
	var deleted int64
	err := s.update(ctx, func(tx *bbolt.Tx, rev int64) ([]store.Event, error) {
		deleted = rev
		evs := make([]store.Event, 0, len(recs))
		for _, want := range recs {
			rec, key, err := heldAsGiven(tx, want)
			if err != nil {
				return nil, err
			}
			if err := deleteOwnerEntry(tx, rec, key); err != nil {
				return nil, err
			}
			if err := tx.Bucket(bucketAddrs).Delete(key); err != nil {
				return nil, err
			}
			evs = append(evs, store.Event{Kind: store.AddressDeleted, Revision: rev, Address: rec})
		}
		return evs, nil
	})
	if err != nil {
		return 0, err
	}
	return deleted, nil
}

// heldAsGiven returns the record of want's address and its key, if tx holds
// it as want gives it (revision, owner and creation time): the check of
// each record of DeleteRecords and ReplaceRecords. ErrConflict otherwise.
func heldAsGiven(tx *bbolt.Tx, want ipaddress.IPAddress) (ipaddress.IPAddress, []byte, error) {
	if checkAddr(want.Addr) != nil {
		return ipaddress.IPAddress{}, nil, fmt.Errorf("address %q is no record's: %w", want.Addr, store.ErrConflict)
	}
	key := appendAddrKey(nil, want.Addr)
	rec, ok, err := getAddress(tx, want.Addr, key)
	switch {
	case err != nil:
		return ipaddress.IPAddress{}, nil, err
	case !ok || rec.Revision != want.Revision || rec.Parent != want.Parent || !rec.Created.Equal(want.Created):
		return ipaddress.IPAddress{}, nil, fmt.Errorf("address %s: not the record given: %w", want.Addr, store.ErrConflict)
	}
	return rec, key, nil
}

// deleteOwnerEntry deletes the owner index's entry for rec, stored under
// key. A record whose value names another owner than the one the index
// holds it under (a damaged value that still decodes) is corrupt:
// deleting it would leave the real owner's entry behind, and every later
// AddressesOf of that owner failing, so the write is refused and nothing
// is changed. A record with no entry at all is written as asked, which
// leaves the file consistent.
func deleteOwnerEntry(tx *bbolt.Tx, rec ipaddress.IPAddress, key []byte) error {
	okey := appendOwnerKey(nil, rec.Parent, rec.Addr)
	c := tx.Bucket(bucketOwners).Cursor()
	// Seek, not Get: an entry's value is empty, which Get cannot tell
	// from a missing key.
	if k, _ := c.Seek(okey); bytes.Equal(k, okey) {
		return c.Delete()
	}
	// Rare (a damaged file): a scan of the index for the address.
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if len(k) < len(key) || !bytes.Equal(k[len(k)-len(key):], key) {
			continue
		}
		if p, a, err := decodeOwnerKey(k); err == nil && a == rec.Addr {
			return corruptAt(bucketAddrs, key, corrupt("held by %s in the owner index, by %s in its value", p, rec.Parent))
		}
	}
	return nil
}

// ReplaceRecords implements store.RecordsReplacer: one write transaction,
// which checks each record as DeleteRecords does and writes it for its new
// owner as ReplaceAddressAt does.
func (s *Store) ReplaceRecords(ctx context.Context, recs []ipaddress.IPAddress, to []ipaddress.ParentRef) ([]ipaddress.IPAddress, error) {
	if err := store.CheckReplacements(recs, to); err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return nil, s.checkOpen(ctx)
	}
	out := make([]ipaddress.IPAddress, len(recs))
	now := s.clock()
	err := s.update(ctx, func(tx *bbolt.Tx, rev int64) ([]store.Event, error) {
		evs := make([]store.Event, 0, len(recs))
		for i, want := range recs {
			cur, key, err := heldAsGiven(tx, want)
			if err != nil {
				return nil, err
			}
			if out[i], err = replace(tx, cur, key, to[i], now, rev); err != nil {
				return nil, err
			}
			evs = append(evs, store.Event{Kind: store.AddressPut, Revision: rev, Address: out[i]})
		}
		return evs, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ReplaceAddressAt implements store.Store.
func (s *Store) ReplaceAddressAt(ctx context.Context, rec ipaddress.IPAddress, want int64) (ipaddress.IPAddress, error) {
	if err := s.checkOpen(ctx); err != nil {
		return ipaddress.IPAddress{}, err
	}
	if checkAddr(rec.Addr) != nil {
		return ipaddress.IPAddress{}, fmt.Errorf("address %s: %w", rec.Addr, store.ErrNotFound)
	}
	if err := store.CheckOwner(rec.Parent); err != nil {
		return ipaddress.IPAddress{}, err
	}
	key := appendAddrKey(nil, rec.Addr)
	var out ipaddress.IPAddress
	now := s.clock()
	err := s.update(ctx, func(tx *bbolt.Tx, rev int64) ([]store.Event, error) {
		cur, ok, err := getAddress(tx, rec.Addr, key)
		switch {
		case err != nil:
			return nil, err
		case !ok:
			return nil, fmt.Errorf("address %s: %w", rec.Addr, store.ErrNotFound)
		case cur.Revision != want:
			return nil, fmt.Errorf("address %s at revision %d, not %d: %w", rec.Addr, cur.Revision, want, store.ErrConflict)
		}
		if out, err = replace(tx, cur, key, rec.Parent, now, rev); err != nil {
			return nil, err
		}
		return []store.Event{{Kind: store.AddressPut, Revision: rev, Address: out}}, nil
	})
	if err != nil {
		return ipaddress.IPAddress{}, err
	}
	return out, nil
}

// replace writes the record cur, stored under key, for owner at revision
// rev, created now (Unix nanoseconds), and returns the new record: the
// write of ReplaceAddressAt and of ReplaceRecords.
func replace(tx *bbolt.Tx, cur ipaddress.IPAddress, key []byte, owner ipaddress.ParentRef, now, rev int64) (ipaddress.IPAddress, error) {
	if err := deleteOwnerEntry(tx, cur, key); err != nil {
		return ipaddress.IPAddress{}, err
	}
	v := addrValue{parent: owner, created: now, rev: rev}
	if err := tx.Bucket(bucketAddrs).Put(key, appendAddrValue(nil, v)); err != nil {
		return ipaddress.IPAddress{}, fmt.Errorf("bolt: storing address %s: %w", cur.Addr, err)
	}
	if err := tx.Bucket(bucketOwners).Put(appendOwnerKey(nil, owner, cur.Addr), nil); err != nil {
		return ipaddress.IPAddress{}, fmt.Errorf("bolt: indexing address %s: %w", cur.Addr, err)
	}
	return v.record(cur.Addr), nil
}

// GetAddress implements store.Store.
func (s *Store) GetAddress(ctx context.Context, addr netip.Addr) (ipaddress.IPAddress, error) {
	var rec ipaddress.IPAddress
	err := s.view(ctx, func(tx *bbolt.Tx) error {
		ok := false
		var err error
		if checkAddr(addr) == nil {
			rec, ok, err = getAddress(tx, addr, appendAddrKey(nil, addr))
		}
		if err == nil && !ok {
			err = fmt.Errorf("address %s: %w", addr, store.ErrNotFound)
		}
		return err
	})
	if err != nil {
		return ipaddress.IPAddress{}, err
	}
	return rec, nil
}

// AddressesOf implements store.Store: a prefix scan of the owner index.
// An entry under owner's prefix whose address key or record does not
// decode, or whose record names another owner, is left out, and named in a
// *store.SkippedError (its Err a *CorruptError) returned with owner's other
// records: the record it files may be owner's. An entry with no record
// (no address is held for it to leave out) or a file bbolt cannot read
// fails the call whole.
func (s *Store) AddressesOf(ctx context.Context, owner ipaddress.ParentRef) ([]ipaddress.IPAddress, error) {
	prefix := appendOwner(nil, owner)
	var out []ipaddress.IPAddress
	var skipped store.SkippedError
	err := s.view(ctx, func(tx *bbolt.Tx) error {
		out = out[:0]
		skipped = store.SkippedError{}
		c := tx.Bucket(bucketOwners).Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			akey := k[len(prefix):]
			a, err := decodeAddrKey(akey)
			if err != nil {
				skipped.Skip(netip.Addr{}, corruptAt(bucketOwners, k, err))
				continue
			}
			rec, ok, err := getAddress(tx, a, akey)
			switch {
			case err != nil: // a *CorruptError: the value does not decode
				skipped.Skip(a, err)
				continue
			case !ok:
				return corruptAt(bucketOwners, k, corrupt("index entry without an address record"))
			case rec.Parent != owner:
				skipped.Skip(a, corruptAt(bucketOwners, k, corrupt("index entry for an address held by %+v", rec.Parent)))
				continue
			}
			out = append(out, rec)
		}
		return nil
	})
	switch {
	case err != nil:
		return nil, err
	case out == nil:
		out = []ipaddress.IPAddress{}
	}
	if skipped.Count > 0 {
		return out, &skipped
	}
	return out, nil
}

// ListAddresses implements store.Store. Records come sorted by address,
// IPv4 first. A record whose key or value does not decode is left out, and
// named in a *store.SkippedError (its Err a *CorruptError) returned with
// the other records; it is not touched. A file bbolt cannot read (a bad
// page, a truncated file) is no record left out: that error comes alone.
func (s *Store) ListAddresses(ctx context.Context) ([]ipaddress.IPAddress, error) {
	var out []ipaddress.IPAddress
	var skipped store.SkippedError
	err := s.view(ctx, func(tx *bbolt.Tx) error {
		out = []ipaddress.IPAddress{}
		return tx.Bucket(bucketAddrs).ForEach(func(k, v []byte) error {
			a, err := decodeAddrKey(k)
			if err != nil {
				skipped.Skip(netip.Addr{}, corruptAt(bucketAddrs, k, err))
				return nil
			}
			av, err := decodeAddrValue(v)
			if err != nil {
				skipped.Skip(a, corruptAt(bucketAddrs, k, err))
				return nil
			}
			out = append(out, av.record(a))
			return nil
		})
	})
	switch {
	case err != nil:
		return nil, err
	case skipped.Count > 0:
		return out, &skipped
	}
	return out, nil
}

// Revision returns the store revision: that of the last write.
func (s *Store) Revision(ctx context.Context) (int64, error) {
	var rev int64
	err := s.view(ctx, func(tx *bbolt.Tx) error {
		var err error
		rev, err = readMetaRevision(tx)
		return err
	})
	return rev, err
}

// snapshot reads the whole state in tx.
func snapshot(tx *bbolt.Tx) (store.Snapshot, error) {
	var snap store.Snapshot
	var err error
	if snap.Revision, err = readMetaRevision(tx); err != nil {
		return snap, err
	}
	err = tx.Bucket(bucketCIDRs).ForEach(func(k, v []byte) error {
		c, err := decodeCIDRValue(string(k), v)
		if err != nil {
			return corruptAt(bucketCIDRs, k, err)
		}
		snap.CIDRs = append(snap.CIDRs, c)
		return nil
	})
	if err != nil {
		return snap, err
	}
	snap.Addrs = []netip.Addr{}
	err = tx.Bucket(bucketAddrs).ForEach(func(k, v []byte) error {
		a, err := decodeAddrKey(k)
		if err != nil {
			return corruptAt(bucketAddrs, k, err)
		}
		if _, err := decodeAddrValue(v); err != nil {
			return corruptAt(bucketAddrs, k, err)
		}
		snap.Addrs = append(snap.Addrs, a)
		return nil
	})
	return snap, err
}

// Watch implements store.Store. Reset gets a snapshot read in one
// transaction; Apply runs after each commit, before the write returns, in
// the goroutine that committed it. A nil w is refused with an
// *ipaddress.FieldError (ipaddress.ErrInvalid), as every store refuses it.
func (s *Store) Watch(ctx context.Context, w store.Watcher) error {
	if err := s.checkOpen(ctx); err != nil {
		return err
	}
	if w == nil {
		return &ipaddress.FieldError{Field: "watcher", Required: true, Detail: "Watch needs a watcher to tell"}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return store.ErrClosed // closed meanwhile
	}
	var snap store.Snapshot
	err := guard(s.path, func() error {
		return s.db.View(func(tx *bbolt.Tx) error {
			var err error
			snap, err = snapshot(tx)
			return err
		})
	})
	if err != nil {
		return err
	}
	w.Reset(snap)
	reg := &watcher{ctx: ctx, w: w}
	s.watchers[reg] = struct{}{}
	context.AfterFunc(ctx, func() {
		s.mu.Lock()
		delete(s.watchers, reg)
		s.mu.Unlock()
	})
	return nil
}

// Close closes the file and releases its lock. It is idempotent; every
// other call after it returns store.ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Swap(true) {
		return nil
	}
	clear(s.watchers)
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("bolt: close %s: %w", s.path, err)
	}
	return nil
}
