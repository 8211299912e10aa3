// Package etcd is a store.Store kept in etcd, for allocators running in
// several processes (an HA control plane) that must hand out each address at
// most once between them.
//
// # Key layout
//
// Every key starts with a prefix (default "/netipam", see WithPrefix) and
// "v1", the version of the key format:
//
//	<prefix>/v1/cidrs/<name>                a CIDR
//	<prefix>/v1/ips/4/<8 hex digits>        an IPv4 address record
//	<prefix>/v1/ips/6/<32 hex digits>       an IPv6 address record
//
// Address keys hold the address as fixed-width lower-case hex, so key order is
// numeric order and the addresses of a prefix are one key range. A CIDR's
// name has no "/" (store.CheckCIDRName): a key under the CIDR prefix with
// one more "/" is none of the store's, and GetCIDR, DeleteCIDR and fences
// never read or write the key of a name with one.
//
// # Values
//
// Values are JSON objects with a version field "v":
//
//	CIDR:    {"v":1,"prefixes":["10.96.0.0/28"],"terminating":true,"created":<Unix ns>}
//	address: {"v":2,"resource":"services","namespace":"default","name":"kubernetes","created":<Unix ns>}
//
// "terminating", "group" and "namespace" are left out when empty. A JSON
// string holds UTF-8 text only: store.CheckOwner, which CreateAddresses
// and ReplaceAddressAt apply, refuses an owner field of other bytes, which
// would read back as U+FFFD. Names and addresses are keys, never values;
// revisions are etcd's: a CIDR's Revision is its key's ModRevision, and
// so is a record's: the revision of the transaction that created it, or
// of the ReplaceAddressAt that gave it to its owner (nothing else writes a
// record's key). A key or value this package cannot decode (garbage, a
// "v" it does not know) is reported as a *CorruptError naming the key,
// which matches store.ErrCorrupt. So is a value that is not byte for byte
// what this package writes for what it holds (spaces, unknown or repeated
// keys, an escape json.Marshal does not write, bytes that are not UTF-8,
// a prefix spelled otherwise than netip prints it): no version of it
// wrote one, and it is not read as the CIDR or record it resembles.
// Prefixes are read as written, never masked.
// ListAddresses leaves out the address records it cannot decode and
// returns the others, with a *store.SkippedError naming those keys: one
// record edited by hand stops no repair pass. AddressesOf, which cannot
// know whose such a record is, names every one in a *store.SkippedError
// beside the owner's records (see The owner index).
//
// # Layout versions
//
// This is layout 2: one key per address, whose record has "v":2. Layout 1
// also put, in the transaction creating each address key, an owner key
//
//	<prefix>/v1/owners/<group>/<resource>/<namespace>/<name>/<4|6>/<hex>
//
// (owner fields escaped: every byte outside [A-Za-z0-9._~-] became %XX)
// holding the same record with "v":1, and served AddressesOf from those keys.
// A store opened on data written under layout 1 works as it is, with no
// migration step: "v":1 records are read like the others, owner keys are
// never read, and DeleteAddress deletes the owner key of a "v":1 record in
// the transaction that deletes its address key, so the owner keys go with
// their addresses. The key format did not change, hence "v1" in every key.
//
// A record ReplaceAddressAt gave to its owner has "v":3: its revision is
// its key's ModRevision, where releases before ReplaceAddressAt (which had
// no such record) took the CreateRevision. They report such a record as
// corrupt, and so never delete it on a revision read before the
// replacement; their watches still count its address as taken.
//
// Layout-1 processes must not share a prefix with layout-2 ones; upgrade
// every process on a prefix together. A layout-1 process reports "v":2
// records as corrupt (GetAddress, DeleteAddress, ListAddresses), and its
// AddressesOf, reading owner keys, does not see them. Its watches still
// count their addresses as taken (the key is the address), so no address is
// handed out twice meanwhile.
//
// # The owner index
//
// AddressesOf is served by an index in each process, started by the Store's
// first AddressesOf: a listing of the address records, values included, at
// one revision, then a watch of the address keys from the next revision,
// which applies every create and delete (and re-lists after a compacted or
// broken watch). The index answers as of the last revision its watch
// applied, so AddressesOf first learns the current revision with one
// linearizable read (of a key that is never written) and waits until the
// index has applied it, asking etcd for a progress notification so that the
// wait ends even when no address changed since. The index watches on a gRPC
// stream of its own: etcd sends no progress notification on a stream while
// any of its watchers starts past the current revision, as another watch of
// the client (an allocator's) does when started or resumed after the latest
// write. A caller therefore sees every write that completed before its
// call, its own and any other client's, and no answer is older than the
// call. AddressesOfSince (store.SinceReader) makes no read: it waits until
// the index has applied the revision it is given, which the watch brings
// within a moment when it is an address write's. allocator.EnsureNext
// reads an owner's records back so after it allocates, one round trip
// fewer.
//
// A process that never calls AddressesOf pays nothing for the index. One
// that does pays, on the first call, a listing of every record (about 1.2 s
// for 200,000 addresses here; it goes on in the background if that call
// gives up); memory for every address (about 360 bytes, with one address
// per owner; see TestWatchManyAddresses); one more watch event per address
// created or deleted; and, per call, the read and a wait of about one round
// trip. While a record that cannot be decoded exists, every AddressesOf
// names it in a *store.SkippedError (its Err a *CorruptError naming the
// key), beside the owner's records that decode: whose it is cannot be
// known, so any owner's answer might lack it.
//
// Layout 1 kept the index in etcd instead, as the owner keys: a linearizable
// range read per call and nothing in memory, but one more put in every
// creating transaction, which cost every allocation about a sixth of its
// throughput at 16 callers (BenchmarkAllocVsRaw) whether anyone asked for an
// owner's addresses or not.
//
// # Atomicity
//
// CreateAddresses is one transaction: if every address key has
// CreateRevision 0 and every fenced CIDR key has the fence's ModRevision,
// all keys are put. If it is refused, a second read tells which address was
// taken (*store.AddressExistsError) or which fence failed
// (*store.FencedError); if neither shows (the address was released in
// between), the create is tried again, at most eight times. That read is not
// the transaction's Else branch: an Else travels with every create, through
// the raft log and the WAL, to serve the rare refusal. UpdateCIDR and
// DeleteCIDR compare the CIDR's ModRevision, and DeleteCIDR the fences'
// too. A batch may hold at most MaxBatch addresses.
//
// A *store.FencedError's Seen is the revision of the fenced CIDR's last
// change or, if it is gone, from DeleteCIDR, of its first change after the
// fence's revision (read with a watch of its key from there, which etcd
// answers within 100 ms; 0 if that history is compacted); from
// CreateAddresses, 0 for a CIDR gone, so that an allocation fenced out
// fails at once. It is a revision every Watch of the store delivers, where
// etcd's current one may be another key's.
//
// # Lost answers
//
// The answer to a write can be lost: the connection to the member breaks,
// the member gives up waiting for the entry to commit ("request timed
// out"), the leader changes, the caller's ctx ends while the write is in
// flight, or Close closes the client under it. etcd may have applied the
// write, or apply it later. Every write (CreateCIDR, UpdateCIDR,
// DeleteCIDR, CreateAddresses, DeleteAddress, DeleteAddressAt,
// ReplaceAddressAt) then returns an error matching
// store.ErrOutcomeUnknown and its cause (the ctx error, store.ErrClosed,
// the client's error), unless:
//
//   - etcd refused it in a way that shows it was not applied: a check made
//     before the request is proposed to raft (too many operations, request
//     too large, too many requests, an invalid auth token, a message past
//     gRPC's size limit on either side) or as its entry is applied
//     (permission denied, an old auth revision). The error is
//     the refusal alone. "database space exceeded" is not such a refusal:
//     etcd also returns it for the transaction that crossed the quota,
//     after applying it.
//   - a create's read-back (below) found its records: it succeeded.
//
// The error of a read a write makes before its transaction, or to explain a
// refusal, means nothing was written, as does that of a call whose ctx had
// ended before it began (or, for CreateAddresses, before an attempt): none
// matches store.ErrOutcomeUnknown.
//
// A create, once sent, is not canceled with the caller's ctx: etcd may
// apply it all the same. CreateAddresses waits up to 5 s past ctx for
// etcd's answer, so that a create etcd applied is reported as done, with
// its records, even after ctx ended. When the answer is lost, the store
// reads the keys back, retrying failed reads, again for at most 5 s past
// ctx: keys holding exactly the values it wrote mean the create succeeded.
// A read sees only what etcd committed before it, so a create still in
// flight then may commit later: the error matches store.ErrOutcomeUnknown,
// and the records of such a create belong to an owner told nothing; a
// repair pass (package repair) deletes them as leaked once they are older
// than its grace (60 s by default). Other writes are not read back: the
// absence of a deleted key, or an updated value, could as well be another
// writer's, and the caller must read anyway to decide again.
//
// # Watch
//
// Watch reads the CIDRs and the address keys (keys only: the key is the
// address) in pages, all at one revision R, hands that to Reset, then
// watches the range from R+1. The watch asks for no previous values: a
// delete event's key names the CIDR or address that went, which is all the
// store.Event of a delete carries (Revision and CIDR.Name or Address.Addr),
// and previous values would make etcd read the old value of every deleted
// or updated key for every watcher. A compacted, canceled or broken watch
// makes it read and Reset again.
//
// # Cost
//
// An allocation is one transaction (two compares, one put) and, for every
// allocator watching, one watch event. Against one embedded member on a
// 2-core machine, fsync on, AllocateNext runs at 85–93 % of the rate of a
// bare compare-and-create (If CreateRevision(k)==0 Then Put) at 1 to 16
// callers, measured in alternating chunks (BenchmarkAllocVsRaw,
// bench/BENCHMARKS.md). The rest is inside etcd: the fence's compare, which
// reads the CIDR's key, and sending and decoding the watch event.
//
// A watch starts with a paginated read of the address keys: a million
// addresses take about ten seconds to list here.
//
// # Availability
//
// The store is as available as its client: give the client every endpoint
// of the cluster (clientv3.Config.Endpoints), so it moves to another member
// when one is lost. Watches run with clientv3.WithRequireLeader, so a member
// cut off from the leader ends them and they resume elsewhere.
package etcd

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// DefaultPrefix is the key prefix used unless WithPrefix says otherwise.
const DefaultPrefix = "/netipam"

// MaxBatch is the most addresses one CreateAddresses call may create: each
// takes a compare and a put, and etcd allows 128 of either per transaction
// by default, fences included. A larger batch, or one whose records and
// fences together pass 128, is refused with an *ipaddress.FieldError
// (ipaddress.ErrInvalid), and nothing is sent. So is a batch that etcd (or
// gRPC) refuses as more operations or bytes than one transaction may hold:
// 64 records whose owners are near store.MaxOwnerLen pass etcd's default
// MaxRequestBytes (1.5 MiB). That error also matches etcd's own.
const MaxBatch = 64

// maxTxnOps is etcd's default limit of compares (and of puts) in one
// transaction: a create's records and fences together, each a compare.
const maxTxnOps = 2 * MaxBatch

// maxCreateAttempts bounds the retries of a create refused because an
// address was taken, when the address is free again by the time the store
// reads why.
const maxCreateAttempts = 8

// defaultPageSize is how many keys one range read of a listing returns.
const defaultPageSize = 10000

// Option configures a Store.
type Option func(*Store)

// WithPrefix sets the key prefix (default "/netipam"). A trailing "/" is
// dropped. Stores with different prefixes share nothing; New refuses a
// prefix inside another store's records (with a "/v1/cidrs/",
// "/v1/ips/" or "/v1/owners/" element), whose keys that store would read.
func WithPrefix(p string) Option {
	return func(s *Store) { s.prefix = strings.TrimRight(p, "/") }
}

// WithClock sets the clock that stamps Created (for tests); nil is
// time.Now.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// WithCloseClient makes Close close the client too. By default the caller
// keeps ownership of the client.
func WithCloseClient() Option { return func(s *Store) { s.closeClient = true } }

// WithPageSize sets how many keys one range read returns when listing
// (default 10000).
func WithPageSize(n int64) Option {
	return func(s *Store) {
		if n > 0 {
			s.pageSize = n
		}
	}
}

// WithErrorHandler receives the errors a watch meets and does not return:
// failed re-lists (it retries with backoff) and keys or values it cannot
// decode (*CorruptError), also those of the snapshot Watch reads before it
// returns. A value that cannot be decoded does not stop the watch: an
// address is still delivered (its key is the address), with a zero Parent;
// a CIDR is left out of a snapshot, or delivered as deleted, so it serves
// nothing until it is repaired. The handler is called from the watch's
// goroutine, or from Watch itself for its first snapshot, and must not
// block. By default errors are dropped.
func WithErrorHandler(fn func(error)) Option { return func(s *Store) { s.onError = fn } }

// Store is a store.Store in etcd. It is safe for concurrent use, by any
// number of Stores in any number of processes sharing the cluster and prefix.
type Store struct {
	cli         *clientv3.Client
	prefix      string
	now         func() time.Time
	closeClient bool
	pageSize    int64
	onError     func(error)

	cidrPfx, ipPfx, ownerPfx string

	closed atomic.Bool
	stop   context.Context // canceled by Close; ends every watch
	// callMu guards calls, the number of calls in flight, and idle,
	// closed when calls drops to zero after Close asked (callsDone).
	callMu    sync.Mutex
	calls     int
	idle      chan struct{}
	closeWait time.Duration // the constant closeWait, but in tests
	// ownWriteWait is how long AddressesOfSince waits for the owner index
	// to reach a revision before it asks etcd for its current one: the
	// constant ownWriteWait, but in tests.
	ownWriteWait time.Duration

	// startMu orders starting a watch goroutine with Close: a goroutine is
	// added to watches only while the store is open.
	startMu sync.Mutex
	// owners is the owner index, started by the first AddressesOf.
	owners atomic.Pointer[ownerIndex]
	// readBacks counts failed creates that a read-back found applied.
	readBacks atomic.Int64
	cancel    context.CancelFunc
	watches   sync.WaitGroup
}

var (
	_ store.Store          = (*Store)(nil)
	_ store.SinceReader    = (*Store)(nil)
	_ store.RecordsDeleter = (*Store)(nil)
)

// New returns a store on client. The client should know every endpoint of
// the cluster. A nil client, or a prefix CheckPrefix refuses, is an error
// matching ipaddress.ErrInvalid (a *ipaddress.FieldError for the field
// "client" or "prefix"); a nil Option is ignored.
func New(client *clientv3.Client, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, &ipaddress.FieldError{Field: "client", Required: true, Detail: "an etcd store needs an etcd client"}
	}
	s := &Store{cli: client, prefix: DefaultPrefix, now: time.Now, pageSize: defaultPageSize, closeWait: closeWait, ownWriteWait: ownWriteWait}
	for _, o := range opts {
		if o != nil {
			o(s)
		}
	}
	if s.now == nil {
		s.now = time.Now
	}
	if err := checkPrefix(s.prefix); err != nil {
		return nil, err
	}
	base := s.prefix + "/v1/"
	s.cidrPfx, s.ipPfx, s.ownerPfx = base+"cidrs/", base+"ips/", base+"owners/"
	s.stop, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// CheckPrefix returns the error New gives for WithPrefix(p), or nil if New
// takes p; it contacts nothing. The error matches ipaddress.ErrInvalid.
func CheckPrefix(p string) error { return checkPrefix(strings.TrimRight(p, "/")) }

// checkPrefix is CheckPrefix for a prefix WithPrefix has trimmed.
func checkPrefix(p string) error {
	for _, part := range []string{"/v1/cidrs/", "/v1/ips/", "/v1/owners/"} {
		if strings.Contains(p+"/", part) {
			return &ipaddress.FieldError{Field: "prefix", Value: p, Detail: fmt.Sprintf("must not be inside another store's records (it has %q): the two would read each other's keys", strings.Trim(part, "/"))}
		}
	}
	return nil
}

// Prefix returns the key prefix.
func (s *Store) Prefix() string { return s.prefix }

// goWatch runs fn in a goroutine that Close waits for, with a context that
// Close cancels; ErrClosed if the store is closed.
func (s *Store) goWatch(fn func(ctx context.Context)) error {
	s.startMu.Lock()
	defer s.startMu.Unlock()
	if s.closed.Load() {
		return store.ErrClosed
	}
	s.watches.Add(1)
	go func() {
		defer s.watches.Done()
		fn(s.stop)
	}()
	return nil
}

// begin starts a call: ErrClosed after Close, else the context's error,
// else nil, and the caller then calls end when done. Close waits for the
// calls begun (up to closeWait) before it closes a client it owns.
func (s *Store) begin(ctx context.Context) error {
	s.callMu.Lock()
	defer s.callMu.Unlock()
	if s.closed.Load() {
		return store.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.calls++
	return nil
}

// end ends a call begin started.
func (s *Store) end() {
	s.callMu.Lock()
	defer s.callMu.Unlock()
	if s.calls--; s.calls == 0 && s.idle != nil {
		close(s.idle)
		s.idle = nil
	}
}

// callsDone returns a channel closed once no call is in flight; Close calls
// it after marking the store closed, so that no call begins after.
func (s *Store) callsDone() <-chan struct{} {
	s.callMu.Lock()
	defer s.callMu.Unlock()
	done := make(chan struct{})
	if s.calls == 0 {
		close(done)
	} else {
		s.idle = done
	}
	return done
}

// closeWait bounds how long Close waits for calls in flight: a create's
// own wait for etcd's answer (inFlightGrace), and a little more.
const closeWait = inFlightGrace + time.Second

func (s *Store) cidrKey(name string) string { return s.cidrPfx + name }

// nested reports whether the rest of a key under the CIDR prefix, which
// names a CIDR, is rather a key of a store nested under it: no CIDR name
// has a "/" (store.CheckCIDRName). Such keys are none of this store's, and
// are skipped.
func nested(name string) bool { return strings.IndexByte(name, '/') >= 0 }
func (s *Store) addrKey(a netip.Addr) string {
	b := make([]byte, 0, len(s.ipPfx)+34)
	return string(appendAddrSuffix(append(b, s.ipPfx...), a))
}

// ownerKey returns the layout-1 owner key of a's record held by o.
func (s *Store) ownerKey(o ipaddress.ParentRef, a netip.Addr) string {
	return s.ownerPfx + escape(o.Group) + "/" + escape(o.Resource) + "/" + escape(o.Namespace) + "/" + escape(o.Name) + "/" + addrSuffix(a)
}

// wrap names the operation in err; an error of a call that Close cut
// short (the client closing under it) also matches store.ErrClosed, and
// etcd's "database space exceeded" store.ErrNoSpace. A write refused so
// also matches store.ErrOutcomeUnknown (see notApplied).
func (s *Store) wrap(op string, err error) error {
	if s.closed.Load() && (status.Code(err) == codes.Canceled || errors.Is(err, context.Canceled)) {
		return fmt.Errorf("etcd store: %s: %w (%w)", op, store.ErrClosed, err)
	}
	if errors.Is(err, rpctypes.ErrNoSpace) {
		// The space quota: etcd takes no write until an operator compacts,
		// defragments and disarms the alarm, deleted records or not.
		return fmt.Errorf("etcd store: %s: %w: %w", op, store.ErrNoSpace, err)
	}
	return fmt.Errorf("etcd store: %s: %w", op, err)
}

// wrapWrite is wrap for the error of a transaction that writes: unless
// notApplied shows that etcd did not apply it, it matches
// store.ErrOutcomeUnknown too. Errors of the reads before such a
// transaction, or of a read-only one, are wrap's: nothing was written.
func (s *Store) wrapWrite(op string, err error) error {
	if notApplied(err) {
		return s.wrap(op, err)
	}
	return s.wrap(op, fmt.Errorf("%w: %w", store.ErrOutcomeUnknown, err))
}

// notApplied reports whether err, returned for a transaction that writes,
// shows that etcd did not apply it and never will: etcd refused the
// request before proposing it to raft, or refuses its entry on every member
// as it applies it. The client resends a write only after such a refusal
// (with a refreshed token) or when it found no connection to send it on, so
// an earlier attempt cannot have been applied either. Any other error may
// come after the request reached a member: a timeout ("request timed out",
// ctx), Unavailable (a connection broken, "leader changed", "server
// stopped"), and "database space exceeded" too, which etcd returns also
// for the transaction that crossed the quota, after applying it.
func notApplied(err error) bool {
	switch {
	// Checked by etcd's gRPC service before the request reaches its server.
	case errors.Is(err, rpctypes.ErrEmptyKey), errors.Is(err, rpctypes.ErrKeyNotFound),
		errors.Is(err, rpctypes.ErrValueProvided), errors.Is(err, rpctypes.ErrLeaseProvided),
		errors.Is(err, rpctypes.ErrTooManyOps), errors.Is(err, rpctypes.ErrDuplicateKey):
		return true
	// Checked by the server before it proposes the request.
	case errors.Is(err, rpctypes.ErrRequestTooLarge), errors.Is(err, rpctypes.ErrTooManyRequests),
		errors.Is(err, rpctypes.ErrInvalidAuthToken):
		return true
	// Permissions, checked as the entry is applied: it applies as nothing.
	case errors.Is(err, rpctypes.ErrPermissionDenied), errors.Is(err, rpctypes.ErrUserEmpty),
		errors.Is(err, rpctypes.ErrAuthOldRevision):
		return true
	// The client's token refresh after such a refusal failed.
	case errors.Is(err, rpctypes.ErrAuthFailed):
		return true
	case pastGRPCSizeLimit(err):
		return true
	}
	return false
}

// pastGRPCSizeLimit reports whether err is a refusal by one of gRPC's own
// size limits: the client's (MaxCallSendMsgSize), before sending the
// message, or the server's, before reading it. Not every
// ResourceExhausted: etcd's "database space exceeded" is one.
func pastGRPCSizeLimit(err error) bool {
	if status.Code(err) != codes.ResourceExhausted {
		return false
	}
	msg := status.Convert(err).Message()
	return strings.Contains(msg, "trying to send message larger than max") ||
		strings.Contains(msg, "received message larger than max")
}

// tooLargeForOneTxn reports whether err is etcd's or gRPC's refusal of a
// transaction for its size: more operations (MaxTxnOps) or bytes
// (MaxRequestBytes, gRPC's message limits) than they take in one. Each is
// a notApplied refusal.
func tooLargeForOneTxn(err error) bool {
	return errors.Is(err, rpctypes.ErrTooManyOps) || errors.Is(err, rpctypes.ErrRequestTooLarge) || pastGRPCSizeLimit(err)
}

// CreateCIDR implements store.Store.
func (s *Store) CreateCIDR(ctx context.Context, c cidrset.CIDR) (cidrset.CIDR, error) {
	if err := s.begin(ctx); err != nil {
		return cidrset.CIDR{}, err
	}
	defer s.end()
	// A value decodeCIDR refuses would break every later Watch of the
	// prefix; the key of a name with a "/" would read as a nested store's,
	// and no Watch would show the CIDR.
	if err := store.CheckCIDR(c); err != nil {
		return cidrset.CIDR{}, err
	}
	c = c.Clone()
	c.Created = time.Unix(0, s.now().UnixNano())
	key := s.cidrKey(c.Name)
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(encodeCIDR(c)))).
		Commit()
	if err != nil {
		return cidrset.CIDR{}, s.wrapWrite("create CIDR", err)
	}
	if !resp.Succeeded {
		return cidrset.CIDR{}, fmt.Errorf("CIDR %q: %w", c.Name, store.ErrExists)
	}
	c.Revision = resp.Header.Revision
	return c, nil
}

// getCIDR reads one CIDR key; found is false when it is missing.
func (s *Store) getCIDR(ctx context.Context, name string) (c cidrset.CIDR, found bool, err error) {
	key := s.cidrKey(name)
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return cidrset.CIDR{}, false, s.wrap("get CIDR", err)
	}
	if len(resp.Kvs) == 0 {
		return cidrset.CIDR{}, false, nil
	}
	kv := resp.Kvs[0]
	c, err = cidrFromKV(key, name, kv.Value, kv.ModRevision)
	return c, true, err
}

// UpdateCIDR implements store.Store.
func (s *Store) UpdateCIDR(ctx context.Context, c cidrset.CIDR) (cidrset.CIDR, error) {
	if err := s.begin(ctx); err != nil {
		return cidrset.CIDR{}, err
	}
	defer s.end()
	if err := store.CheckCIDR(c); err != nil {
		return cidrset.CIDR{}, err
	}
	old, found, err := s.getCIDR(ctx, c.Name)
	switch {
	case err != nil:
		return cidrset.CIDR{}, err
	case !found:
		return cidrset.CIDR{}, fmt.Errorf("CIDR %q: %w", c.Name, store.ErrNotFound)
	case old.Revision != c.Revision:
		return cidrset.CIDR{}, fmt.Errorf("CIDR %q at revision %d, not %d: %w", c.Name, old.Revision, c.Revision, store.ErrConflict)
	}
	c = c.Clone()
	c.Created = old.Created
	key := s.cidrKey(c.Name)
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", c.Revision)).
		Then(clientv3.OpPut(key, string(encodeCIDR(c)))).
		Else(clientv3.OpGet(key, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return cidrset.CIDR{}, s.wrapWrite("update CIDR", err)
	}
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			return cidrset.CIDR{}, fmt.Errorf("CIDR %q: %w", c.Name, store.ErrNotFound)
		}
		return cidrset.CIDR{}, fmt.Errorf("CIDR %q at revision %d, not %d: %w", c.Name, kvs[0].ModRevision, c.Revision, store.ErrConflict)
	}
	c.Revision = resp.Header.Revision
	return c, nil
}

// fenceCmp returns the comparison of a fence (store.Fence.HeldAt), which
// must not be one neverHolds refuses. A missing key's ModRevision reads
// 0, below every revision such a fence names.
func (s *Store) fenceCmp(f store.Fence) clientv3.Cmp {
	if f.Touch {
		return clientv3.Compare(clientv3.ModRevision(s.cidrKey(f.CIDR)), ">", f.Revision-1)
	}
	return clientv3.Compare(clientv3.ModRevision(s.cidrKey(f.CIDR)), "=", f.Revision)
}

// fenceCmps returns the comparisons of fences and the reads that explain a
// failure, in the same order.
func (s *Store) fenceCmps(fences []store.Fence) ([]clientv3.Cmp, []clientv3.Op) {
	cmps := make([]clientv3.Cmp, len(fences))
	gets := make([]clientv3.Op, len(fences))
	for i, f := range fences {
		cmps[i] = s.fenceCmp(f)
		gets[i] = clientv3.OpGet(s.cidrKey(f.CIDR), clientv3.WithKeysOnly())
	}
	return cmps, gets
}

// neverHolds returns a *store.FencedError for the first fence that cannot
// hold, or nil: one of revision <= 0, or naming no CIDR (a name
// store.CheckCIDRName refuses). Revisions start at 1, so the first never
// holds; but etcd reads the ModRevision of a missing key as 0, so its
// compare would hold for a missing CIDR. The key of the second may be
// another store's, whose revision the compare would read and a Touch
// change. Both must be refused before any compare.
func neverHolds(fences []store.Fence) error {
	for _, f := range fences {
		if f.Revision <= 0 || store.CheckCIDRName(f.CIDR) != nil {
			return &store.FencedError{Fence: f}
		}
	}
	return nil
}

// failedFence returns the first fence that the reads rs (one per fence),
// made at revision at, show to be broken, or nil. See fenced for history.
func (s *Store) failedFence(ctx context.Context, fences []store.Fence, rs []*clientv3.GetResponse, at int64, history bool) error {
	for i, f := range fences {
		if kvs := rs[i].Kvs; len(kvs) == 0 || !f.HeldAt(kvs[0].ModRevision) {
			return s.fenced(ctx, f, kvs, at, history)
		}
	}
	return nil
}

// fenced returns the *store.FencedError of fence f, which a read at
// revision at found broken (kvs: the CIDR's key, as read). Its Seen is the
// revision of a change of that key, which every watch of the store
// delivers; at is etcd's revision, maybe of another key (another prefix's,
// another application's), which no watch of the store would reach. For a
// CIDR gone since, only a watch of its history tells when (firstChange),
// which etcd serves from its next sync of past watchers, up to 100 ms
// later: so only with history; else Seen is 0, unknown. An allocation
// fenced out does not wait on Seen (it re-reads the CIDR, and waits for
// its watch to reach the revision read); the finalizer's DeleteCIDR does.
func (s *Store) fenced(ctx context.Context, f store.Fence, kvs []*mvccpb.KeyValue, at int64, history bool) error {
	switch {
	case len(kvs) > 0:
		return &store.FencedError{Fence: f, Seen: kvs[0].ModRevision}
	case history:
		return &store.FencedError{Fence: f, Seen: s.firstChange(ctx, s.cidrKey(f.CIDR), f.Revision, at)}
	}
	return &store.FencedError{Fence: f}
}

// firstChangeWait bounds firstChange's watch, which etcd answers from its
// history at its next sync of past watchers (every 100 ms).
const firstChangeWait = 2 * time.Second

// firstChange returns the revision of the first change of key after
// revision rev, key being gone at revision at (a read cannot tell when a
// key was deleted; a watch from rev+1 tells its first change since). It
// returns 0 when that cannot be learned: the history is compacted, or key
// did not have revision rev.
func (s *Store) firstChange(ctx context.Context, key string, rev, at int64) int64 {
	// Only if key had revision rev is a change up to at sure to come: else
	// the watch might wait for one that never does.
	resp, err := s.cli.Get(ctx, key, clientv3.WithRev(rev), clientv3.WithKeysOnly())
	if err != nil || len(resp.Kvs) == 0 || resp.Kvs[0].ModRevision != rev {
		return 0
	}
	wctx, cancel := context.WithTimeout(ctx, firstChangeWait)
	defer cancel()
	for wr := range s.cli.Watch(wctx, key, clientv3.WithRev(rev+1)) {
		if wr.Err() != nil || wr.Canceled {
			return 0
		}
		if len(wr.Events) > 0 {
			if r := wr.Events[0].Kv.ModRevision; r <= at {
				return r
			}
			return 0
		}
	}
	return 0
}

func rangeResponses(resp *clientv3.TxnResponse, from int) []*clientv3.GetResponse {
	out := make([]*clientv3.GetResponse, 0, len(resp.Responses)-from)
	for _, r := range resp.Responses[from:] {
		out = append(out, (*clientv3.GetResponse)(r.GetResponseRange()))
	}
	return out
}

// DeleteCIDR implements store.Store.
func (s *Store) DeleteCIDR(ctx context.Context, name string, rev int64, fences ...store.Fence) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.end()
	if store.CheckCIDRName(name) != nil {
		// No CIDR has it, and its key may be another store's.
		return fmt.Errorf("CIDR %q: %w", name, store.ErrNotFound)
	}
	key := s.cidrKey(name)
	cmps, gets := s.fenceCmps(fences)
	gets = append([]clientv3.Op{clientv3.OpGet(key, clientv3.WithKeysOnly())}, gets...)
	// A revision <= 0 never matches, but its compare would hold for a
	// missing key (see neverHolds): then only read why the delete fails,
	// in the order the checks below expect.
	refused := rev <= 0 || neverHolds(fences) != nil
	txn := s.cli.Txn(ctx)
	if refused {
		txn = txn.Then(gets...)
	} else {
		cmps = append([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)}, cmps...)
		txn = txn.If(cmps...).Then(clientv3.OpDelete(key)).Else(gets...)
	}
	resp, err := txn.Commit()
	if err != nil && refused {
		return s.wrap("delete CIDR", err) // only reads were sent
	}
	if err != nil {
		return s.wrapWrite("delete CIDR", err)
	}
	if resp.Succeeded && !refused {
		return nil
	}
	rs := rangeResponses(resp, 0)
	if kvs := rs[0].Kvs; len(kvs) == 0 {
		return fmt.Errorf("CIDR %q: %w", name, store.ErrNotFound)
	} else if kvs[0].ModRevision != rev {
		return fmt.Errorf("CIDR %q at revision %d, not %d: %w", name, kvs[0].ModRevision, rev, store.ErrConflict)
	}
	if err := neverHolds(fences); err != nil {
		return err
	}
	if err := s.failedFence(ctx, fences, rs[1:], resp.Header.Revision, true); err != nil {
		return err
	}
	return fmt.Errorf("CIDR %q: delete refused for no reason etcd showed: %w", name, store.ErrConflict)
}

// GetCIDR implements store.Store.
func (s *Store) GetCIDR(ctx context.Context, name string) (cidrset.CIDR, error) {
	if err := s.begin(ctx); err != nil {
		return cidrset.CIDR{}, err
	}
	defer s.end()
	if store.CheckCIDRName(name) != nil {
		// No CIDR has it, and its key may be another store's.
		return cidrset.CIDR{}, fmt.Errorf("CIDR %q: %w", name, store.ErrNotFound)
	}
	c, found, err := s.getCIDR(ctx, name)
	if err != nil {
		return cidrset.CIDR{}, err
	}
	if !found {
		return cidrset.CIDR{}, fmt.Errorf("CIDR %q: %w", name, store.ErrNotFound)
	}
	return c, nil
}

// CreateAddresses implements store.Store. Once its transaction is sent, it
// waits for the answer even if ctx ends meanwhile, for at most 5 s more,
// so that a create etcd applied is reported as done; when the answer is
// lost and a read-back does not find the records, the error matches
// store.ErrOutcomeUnknown (see Lost answers in the package documentation).
func (s *Store) CreateAddresses(ctx context.Context, recs []ipaddress.IPAddress, fences ...store.Fence) ([]ipaddress.IPAddress, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.end()
	if len(recs) > MaxBatch {
		return nil, &ipaddress.FieldError{Field: "records", Value: strconv.Itoa(len(recs)), Detail: fmt.Sprintf("at most %d addresses in one batch of the etcd store", MaxBatch)}
	}
	if n := len(recs) + len(fences); n > maxTxnOps {
		return nil, &ipaddress.FieldError{Field: "fences", Value: strconv.Itoa(len(fences)), Detail: fmt.Sprintf("at most %d addresses and fences together in one batch of the etcd store", maxTxnOps)}
	}
	for i, r := range recs {
		if err := ipaddress.ValidateAddr(r.Addr); err != nil {
			return nil, err
		}
		// JSON would read bytes that are not UTF-8 back as U+FFFD: the
		// record would not name the owner it was created for.
		if err := store.CheckOwner(r.Parent); err != nil {
			return nil, err
		}
		for _, prev := range recs[:i] {
			if prev.Addr == r.Addr {
				return nil, &store.AddressExistsError{Addr: r.Addr}
			}
		}
	}
	if err := neverHolds(fences); err != nil {
		return nil, err
	}
	created := time.Unix(0, s.now().UnixNano())
	kv := make([]string, 2*len(recs))
	keys, vals := kv[:len(recs)], kv[len(recs):]
	cmps := make([]clientv3.Cmp, 0, len(recs)+len(fences))
	puts := make([]clientv3.Op, 0, len(recs)+len(fences))
	for i, r := range recs {
		r.Created = created
		keys[i] = s.addrKey(r.Addr)
		vals[i] = string(encodeRecord(r))
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(keys[i]), "=", 0))
		puts = append(puts, clientv3.OpPut(keys[i], vals[i]))
	}
	// done sets Created and Revision in recs, as the store.Store contract
	// allows, once the records exist.
	done := func(rev int64) []ipaddress.IPAddress {
		for i := range recs {
			recs[i].Created, recs[i].Revision = created, rev
		}
		return recs
	}
	var touched []string
	for _, f := range fences {
		if !f.Touch || slices.Contains(touched, f.CIDR) {
			// etcd refuses a transaction putting one key twice; the
			// compares of every fence still apply.
			continue
		}
		touched = append(touched, f.CIDR)
		// Rewriting the CIDR's value, as etcd holds it when the
		// transaction applies, gives it the transaction's revision. The
		// fence's compare makes sure the key is there: etcd refuses to
		// keep the value of a missing key.
		puts = append(puts, clientv3.OpPut(s.cidrKey(f.CIDR), "", clientv3.WithIgnoreValue()))
	}
	for _, f := range fences {
		cmps = append(cmps, s.fenceCmp(f))
	}
	// A create in flight is not canceled with ctx: etcd applies it all the
	// same if it got it, and a caller told it failed would leave its
	// records to nobody. It is given inFlightGrace past ctx to be answered
	// or read back.
	wctx, cancel := outlive(ctx, inFlightGrace)
	defer cancel()
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, err // nothing in flight
		}
		// No Else: the reads that explain a refusal would travel with every
		// create, through the raft log and the WAL, and are rarely needed.
		resp, err := s.cli.Txn(wctx).If(cmps...).Then(puts...).Commit()
		if err != nil {
			if tooLargeForOneTxn(err) {
				// The batch is the caller's to split: its records are valid
				// one by one (each fits etcd's defaults), not together.
				err = fmt.Errorf("%w: %w", &ipaddress.FieldError{Field: "records", Value: strconv.Itoa(len(recs)), Detail: "more than this etcd takes in one transaction"}, err)
				return nil, s.wrap("create addresses", err)
			}
			if notApplied(err) {
				return nil, s.wrap("create addresses", err)
			}
			rev, ok := s.readBack(wctx, keys, vals)
			if !ok {
				if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
					// The caller's ctx ended first: say so, typed.
					err = fmt.Errorf("%w; while waiting past it for etcd's answer: %w", cerr, err)
				}
				return nil, s.wrapWrite("create addresses", err)
			}
			s.readBacks.Add(1)
			return done(rev), nil
		}
		if resp.Succeeded {
			return done(resp.Header.Revision), nil
		}
		// Refused: read why. A fence once broken stays broken (a revision
		// never comes back), but a taken address may have been released
		// since; then nothing is in the way and the create is tried again.
		gets := make([]clientv3.Op, 0, len(keys)+len(fences))
		for _, k := range keys {
			gets = append(gets, clientv3.OpGet(k, clientv3.WithKeysOnly()))
		}
		for _, f := range fences {
			gets = append(gets, clientv3.OpGet(s.cidrKey(f.CIDR), clientv3.WithKeysOnly()))
		}
		why, err := s.cli.Txn(ctx).Then(gets...).Commit()
		if err != nil {
			// The create was refused: only the reason is unknown.
			return nil, s.wrap("create addresses: refused, and reading why", err)
		}
		rs := rangeResponses(why, 0)
		for i, r := range recs {
			if len(rs[i].Kvs) > 0 {
				return nil, &store.AddressExistsError{Addr: r.Addr}
			}
		}
		if err := s.failedFence(ctx, fences, rs[len(recs):], why.Header.Revision, false); err != nil {
			return nil, err
		}
		if attempt >= maxCreateAttempts {
			return nil, fmt.Errorf("etcd store: create refused %d times for no reason etcd showed: %w", attempt+1, store.ErrConflict)
		}
	}
}

// inFlightGrace is how long past its caller's ctx a create may take to be
// answered and, failing that, read back.
const inFlightGrace = 5 * time.Second

// outlive returns a context with ctx's values that ends grace after ctx
// does, or when cancel is called.
func outlive(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	out, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-out.Done():
		}
	})
	return out, func() { stop(); cancel() }
}

// readBack resolves a create whose outcome is unknown: it succeeded if every
// key holds exactly the value written (the value holds the creation time to
// the nanosecond, so no other create wrote it), all at one create revision.
// A failed read tells nothing, and is retried until ctx ends: right after a
// leader is lost, reads fail until a new one is elected (which may take
// seconds), and its first linearizable read sees every entry of earlier
// terms that it will ever commit. ctx is
// CreateAddresses' own, which outlives its caller's; readBack takes at most
// inFlightGrace.
//
// A linearizable read sees what etcd committed before it: a create still
// in flight (on its way to the leader, or in its log waiting for a quorum)
// may commit later, so a read that finds nothing proves nothing, and
// reading again would only narrow that window, never close it: the caller
// gets store.ErrOutcomeUnknown instead. The records of such a create stay
// until a repair pass deletes them as leaked, once they are older than its
// grace (repair.DefaultLeakGrace, 60 s).
func (s *Store) readBack(ctx context.Context, keys, vals []string) (rev int64, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, inFlightGrace)
	defer cancel()
	ops := make([]clientv3.Op, len(keys))
	for i, k := range keys {
		ops[i] = clientv3.OpGet(k)
	}
	wait := 100 * time.Millisecond
	for ctx.Err() == nil && len(keys) > 0 {
		resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
		if clientv3.IsConnCanceled(err) {
			return 0, false // the client was closed: no read will do
		}
		if err != nil {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
			wait = min(2*wait, time.Second)
			continue
		}
		for i, r := range rangeResponses(resp, 0) {
			if len(r.Kvs) == 0 || string(r.Kvs[0].Value) != vals[i] || (rev != 0 && r.Kvs[0].CreateRevision != rev) {
				return 0, false
			}
			rev = r.Kvs[0].CreateRevision
		}
		return rev, true
	}
	return 0, false
}

// DeleteAddress implements store.Store. It reads the record, then deletes its
// key in a transaction fenced on the record's revision, with the owner key of
// a layout-1 record.
func (s *Store) DeleteAddress(ctx context.Context, addr netip.Addr) (ipaddress.IPAddress, int64, error) {
	return s.deleteAddress(ctx, addr, false, 0)
}

// DeleteAddressAt deletes the record of addr as DeleteAddress does, but only
// if its revision is still rev: store.ErrConflict if the address was
// released and taken again since, store.ErrNotFound if it is gone. A
// revision <= 0 matches no record: store.ErrConflict if there is one.
func (s *Store) DeleteAddressAt(ctx context.Context, addr netip.Addr, rev int64) (ipaddress.IPAddress, int64, error) {
	return s.deleteAddress(ctx, addr, true, rev)
}

// deleteAddress deletes the record of addr; with at, only the record created
// at rev.
func (s *Store) deleteAddress(ctx context.Context, addr netip.Addr, at bool, rev int64) (ipaddress.IPAddress, int64, error) {
	if err := s.begin(ctx); err != nil {
		return ipaddress.IPAddress{}, 0, err
	}
	defer s.end()
	if err := noRecord(addr); err != nil {
		return ipaddress.IPAddress{}, 0, err
	}
	key := s.addrKey(addr)
	for {
		resp, err := s.cli.Get(ctx, key)
		if err != nil {
			return ipaddress.IPAddress{}, 0, s.wrap("delete address", err)
		}
		if len(resp.Kvs) == 0 {
			return ipaddress.IPAddress{}, 0, fmt.Errorf("address %s: %w", addr, store.ErrNotFound)
		}
		kv := resp.Kvs[0]
		if at && kv.ModRevision != rev {
			return ipaddress.IPAddress{}, 0, fmt.Errorf("address %s at revision %d, not %d: %w", addr, kv.ModRevision, rev, store.ErrConflict)
		}
		rec, version, err := recordVersionFromKV(key, addr, kv.Value, kv.ModRevision)
		if err != nil {
			return ipaddress.IPAddress{}, 0, err
		}
		dels := []clientv3.Op{clientv3.OpDelete(key)}
		if version == legacyRecordVersion {
			dels = append(dels, clientv3.OpDelete(s.ownerKey(rec.Parent, addr)))
		}
		tx, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
			Then(dels...).
			Commit()
		if err != nil {
			return ipaddress.IPAddress{}, 0, s.wrapWrite("delete address", err)
		}
		if tx.Succeeded {
			return rec, tx.Header.Revision, nil
		}
		// Changed since the read (released, and maybe taken again): look
		// again.
	}
}

// DeleteRecords implements store.RecordsDeleter: one transaction, which
// compares each record's key with its revision and its value with the one
// this store writes for the record, and deletes them all. The value's
// compare is what keeps a key whose value does not decode from being
// deleted blind. A record ReplaceAddressAt wrote, or one of layout 1 (whose
// owner key goes with it), never matches: ErrConflict, and DeleteAddressAt
// deletes those. At most MaxBatch records.
func (s *Store) DeleteRecords(ctx context.Context, recs []ipaddress.IPAddress) (int64, error) {
	if err := s.begin(ctx); err != nil {
		return 0, err
	}
	defer s.end()
	if len(recs) > MaxBatch {
		return 0, &ipaddress.FieldError{Field: "records", Value: strconv.Itoa(len(recs)), Detail: fmt.Sprintf("at most %d records deleted in one batch of the etcd store", MaxBatch)}
	}
	if len(recs) == 0 {
		return 0, nil
	}
	if err := store.CheckDistinct(recs); err != nil {
		return 0, err
	}
	cmps := make([]clientv3.Cmp, 0, 2*len(recs))
	dels := make([]clientv3.Op, 0, len(recs))
	for _, r := range recs {
		if err := noRecord(r.Addr); err != nil {
			return 0, fmt.Errorf("address %q is no record's: %w", r.Addr, store.ErrConflict)
		}
		key := s.addrKey(r.Addr)
		cmps = append(cmps,
			clientv3.Compare(clientv3.ModRevision(key), "=", r.Revision),
			clientv3.Compare(clientv3.Value(key), "=", string(encodeRecord(r))))
		dels = append(dels, clientv3.OpDelete(key))
	}
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(dels...).Commit()
	if err != nil {
		if tooLargeForOneTxn(err) {
			// The compares carry the records' values: long owners pass
			// etcd's request limit before MaxBatch records do.
			err = fmt.Errorf("%w: %w", &ipaddress.FieldError{Field: "records", Value: strconv.Itoa(len(recs)), Detail: "more than this etcd takes in one transaction"}, err)
			return 0, s.wrap("delete records", err)
		}
		return 0, s.wrapWrite("delete records", err)
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("deleting %d records: one or more changed since they were read: %w", len(recs), store.ErrConflict)
	}
	return resp.Header.Revision, nil
}

// ReplaceRecords implements store.RecordsReplacer: one transaction, which
// compares each record's key with its revision and its value with the one
// this store writes for the record (as DeleteRecords does), and rewrites
// them all for their new owners, as ReplaceAddressAt writes a record. A
// record ReplaceAddressAt or this call wrote, or one of layout 1, never
// matches: ErrConflict, and ReplaceAddressAt replaces those. At most
// MaxBatch records.
func (s *Store) ReplaceRecords(ctx context.Context, recs []ipaddress.IPAddress, to []ipaddress.ParentRef) ([]ipaddress.IPAddress, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.end()
	if len(recs) > MaxBatch {
		return nil, &ipaddress.FieldError{Field: "records", Value: strconv.Itoa(len(recs)), Detail: fmt.Sprintf("at most %d records replaced in one batch of the etcd store", MaxBatch)}
	}
	if err := store.CheckReplacements(recs, to); err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return nil, nil
	}
	created := time.Unix(0, s.now().UnixNano())
	out := make([]ipaddress.IPAddress, len(recs))
	cmps := make([]clientv3.Cmp, 0, 2*len(recs))
	puts := make([]clientv3.Op, 0, len(recs))
	for i, r := range recs {
		if err := noRecord(r.Addr); err != nil {
			return nil, fmt.Errorf("address %q is no record's: %w", r.Addr, store.ErrConflict)
		}
		key := s.addrKey(r.Addr)
		out[i] = ipaddress.IPAddress{Addr: r.Addr, Parent: to[i], Created: created}
		cmps = append(cmps,
			clientv3.Compare(clientv3.ModRevision(key), "=", r.Revision),
			clientv3.Compare(clientv3.Value(key), "=", string(encodeRecord(r))))
		puts = append(puts, clientv3.OpPut(key, string(encodeRecordVersion(out[i], replacedRecordVersion))))
	}
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(puts...).Commit()
	if err != nil {
		if tooLargeForOneTxn(err) {
			// The compares and puts carry the records' values.
			err = fmt.Errorf("%w: %w", &ipaddress.FieldError{Field: "records", Value: strconv.Itoa(len(recs)), Detail: "more than this etcd takes in one transaction"}, err)
			return nil, s.wrap("replace records", err)
		}
		return nil, s.wrapWrite("replace records", err)
	}
	if !resp.Succeeded {
		return nil, fmt.Errorf("replacing %d records: one or more changed since they were read: %w", len(recs), store.ErrConflict)
	}
	for i := range out {
		out[i].Revision = resp.Header.Revision
	}
	return out, nil
}

// ReplaceAddressAt implements store.Store: one transaction, conditional on
// the key's ModRevision, rewrites the record's value (and deletes the owner
// key of a layout-1 record). The key is never absent between the two
// owners, and the rewrite gives the record a new ModRevision, its revision.
func (s *Store) ReplaceAddressAt(ctx context.Context, rec ipaddress.IPAddress, rev int64) (ipaddress.IPAddress, error) {
	if err := s.begin(ctx); err != nil {
		return ipaddress.IPAddress{}, err
	}
	defer s.end()
	if err := noRecord(rec.Addr); err != nil {
		return ipaddress.IPAddress{}, err
	}
	if err := store.CheckOwner(rec.Parent); err != nil {
		return ipaddress.IPAddress{}, err
	}
	key := s.addrKey(rec.Addr)
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return ipaddress.IPAddress{}, s.wrap("replace address", err)
	}
	if len(resp.Kvs) == 0 {
		return ipaddress.IPAddress{}, fmt.Errorf("address %s: %w", rec.Addr, store.ErrNotFound)
	}
	kv := resp.Kvs[0]
	if kv.ModRevision != rev {
		return ipaddress.IPAddress{}, fmt.Errorf("address %s at revision %d, not %d: %w", rec.Addr, kv.ModRevision, rev, store.ErrConflict)
	}
	old, version, err := recordVersionFromKV(key, rec.Addr, kv.Value, kv.ModRevision)
	if err != nil {
		return ipaddress.IPAddress{}, err
	}
	out := ipaddress.IPAddress{Addr: rec.Addr, Parent: rec.Parent, Created: time.Unix(0, s.now().UnixNano())}
	ops := []clientv3.Op{clientv3.OpPut(key, string(encodeRecordVersion(out, replacedRecordVersion)))}
	if version == legacyRecordVersion {
		ops = append(ops, clientv3.OpDelete(s.ownerKey(old.Parent, rec.Addr)))
	}
	tx, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(ops...).
		Commit()
	if err != nil {
		return ipaddress.IPAddress{}, s.wrapWrite("replace address", err)
	}
	if !tx.Succeeded {
		// Changed since the read: released, or released and taken again.
		if _, err := s.GetAddress(ctx, rec.Addr); errors.Is(err, store.ErrNotFound) {
			return ipaddress.IPAddress{}, err
		}
		return ipaddress.IPAddress{}, fmt.Errorf("address %s changed since revision %d: %w", rec.Addr, rev, store.ErrConflict)
	}
	out.Revision = tx.Header.Revision
	return out, nil
}

// noRecord returns store.ErrNotFound for an address CreateAddresses refuses:
// no record can have it, and its key may be another address's (a key drops
// the zone, and the zero Addr's is ::'s), so it must not reach etcd.
func noRecord(addr netip.Addr) error {
	if ipaddress.ValidateAddr(addr) != nil {
		return fmt.Errorf("address %q: %w", addr, store.ErrNotFound)
	}
	return nil
}

// GetAddress implements store.Store.
func (s *Store) GetAddress(ctx context.Context, addr netip.Addr) (ipaddress.IPAddress, error) {
	if err := s.begin(ctx); err != nil {
		return ipaddress.IPAddress{}, err
	}
	defer s.end()
	if err := noRecord(addr); err != nil {
		return ipaddress.IPAddress{}, err
	}
	key := s.addrKey(addr)
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return ipaddress.IPAddress{}, s.wrap("get address", err)
	}
	if len(resp.Kvs) == 0 {
		return ipaddress.IPAddress{}, fmt.Errorf("address %s: %w", addr, store.ErrNotFound)
	}
	return recordFromKV(key, addr, resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
}

// AddressesOf implements store.Store, from the owner index in this process
// (started by the first call). It learns the current revision with one
// linearizable read and answers once the index has caught up with it, so it
// sees every write that completed before the call, on any client. A key
// under the address prefix whose key or value does not decode might be
// owner's: each is named in a *store.SkippedError (its Err a
// *CorruptError), returned with owner's records.
func (s *Store) AddressesOf(ctx context.Context, owner ipaddress.ParentRef) ([]ipaddress.IPAddress, error) {
	return s.addressesOf(ctx, owner, 0)
}

// ownWriteWait is how long AddressesOfSince waits for the owner index to
// reach a revision on its own. An address write's event comes within a
// millisecond or so; a revision of any other write comes with no event,
// and is reached only when etcd is asked for a progress notification.
const ownWriteWait = progressEvery

// AddressesOfSince implements store.SinceReader, from the owner index as
// AddressesOf: once the index has applied revision rev, with no read of
// etcd's current revision. An address write's revision is there within a
// moment, the watch bringing it. One the index has not reached within
// ownWriteWait is waited for as AddressesOf waits for its own, after a
// read of the current revision, which also tells a rev etcd has not
// reached (an *ipaddress.FieldError for "revision").
func (s *Store) AddressesOfSince(ctx context.Context, owner ipaddress.ParentRef, rev int64) ([]ipaddress.IPAddress, error) {
	// Revision 1 at least: the index is at 0 until its first listing.
	return s.addressesOf(ctx, owner, max(rev, 1))
}

// addressesOf returns owner's records from the owner index once it has
// applied revision since or, since 0, etcd's current revision.
func (s *Store) addressesOf(ctx context.Context, owner ipaddress.ParentRef, since int64) ([]ipaddress.IPAddress, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.end()
	x, err := s.ownerIndex()
	if err != nil {
		return nil, err
	}
	if since == 0 || !x.reaches(ctx, since, s.ownWriteWait) {
		// A key that is never written: the read costs etcd next to nothing.
		resp, err := s.cli.Get(ctx, s.ipPfx, clientv3.WithCountOnly())
		if err != nil {
			return nil, s.wrap("addresses of", err)
		}
		cur := resp.Header.Revision
		if cur < since {
			return nil, &ipaddress.FieldError{Field: "revision", Value: strconv.FormatInt(since, 10), Detail: fmt.Sprintf("the store is at revision %d", cur)}
		}
		if err := x.waitFor(ctx, cur); err != nil {
			return nil, err
		}
	}
	return x.lookup(owner)
}

// ListAddresses implements store.Store: every record, at one revision, in
// address order (IPv4 first). A key under the address prefix whose key or
// value does not decode is left out, and named in a *store.SkippedError
// (its Err a *CorruptError) returned with the other records; it is not
// touched.
func (s *Store) ListAddresses(ctx context.Context) ([]ipaddress.IPAddress, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.end()
	var skipped store.SkippedError
	recs, err := retryCompacted(func() ([]ipaddress.IPAddress, error) {
		// Each attempt reads every page again, at a new revision: what
		// an earlier one skipped may have been repaired since.
		skipped = store.SkippedError{}
		var out []ipaddress.IPAddress
		_, err := s.list(ctx, s.ipPfx, clientv3.GetPrefixRangeEnd(s.ipPfx), 0, false, func(kv *mvccpb.KeyValue) error {
			key := string(kv.Key)
			a, err := addrFromKey(key, s.ipPfx)
			if err != nil {
				skipped.Skip(netip.Addr{}, err)
				return nil
			}
			r, err := recordFromKV(key, a, kv.Value, kv.ModRevision)
			if err != nil {
				skipped.Skip(a, err)
				return nil
			}
			out = append(out, r)
			return nil
		})
		if err != nil {
			return nil, err
		}
		return out, nil
	})
	switch {
	case err != nil:
		return nil, err
	case skipped.Count > 0:
		return recs, &skipped
	}
	return recs, nil
}

// maxCompactedRetries bounds how many times retryCompacted reads again.
const maxCompactedRetries = 5

// retryCompacted runs read, a listing of several pages at one revision,
// again when etcd compacted that revision between its pages (list fails
// with rpctypes.ErrCompacted), at most maxCompactedRetries times.
func retryCompacted[T any](read func() (T, error)) (T, error) {
	for attempt := 0; ; attempt++ {
		v, err := read()
		if errors.Is(err, rpctypes.ErrCompacted) && attempt < maxCompactedRetries {
			continue
		}
		return v, err
	}
}

// list reads the keys of [start, end) in pages of s.pageSize, all at one
// revision: rev, or the current one when rev is 0. It returns the revision
// read. fn sees the keys in order; an error from it ends the listing.
func (s *Store) list(ctx context.Context, start, end string, rev int64, keysOnly bool, fn func(kv *mvccpb.KeyValue) error) (int64, error) {
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(s.pageSize)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		if keysOnly {
			opts = append(opts, clientv3.WithKeysOnly())
		}
		resp, err := s.cli.Get(ctx, start, opts...)
		if err != nil {
			return 0, s.wrap("list", err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			if err := fn(kv); err != nil {
				return 0, err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return rev, nil
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// Close implements store.Store. It ends every watch and waits for their
// goroutines; it closes the client only with WithCloseClient, and then
// first waits for calls in flight (up to 6 s), so that a create
// etcd applied is reported as done. A call Close cuts short fails with an
// error matching store.ErrClosed; a write's also matches
// store.ErrOutcomeUnknown, as it may have been applied.
func (s *Store) Close() error {
	s.callMu.Lock()
	already := s.closed.Swap(true)
	s.callMu.Unlock()
	if already {
		return nil
	}
	s.cancel()
	// A goWatch that saw the store open has added its goroutine by the
	// time it lets go of startMu.
	s.startMu.Lock()
	//lint:ignore SA2001 a barrier: waits for a goWatch holding startMu
	s.startMu.Unlock()
	s.watches.Wait()
	if s.closeClient {
		// Not under a call in flight: a create etcd applied, whose answer
		// is on its way, would be reported failed.
		select {
		case <-s.callsDone():
		case <-time.After(s.closeWait):
		}
		return s.cli.Close()
	}
	return nil
}
