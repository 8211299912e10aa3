// Package bench compares netipam with the two Kubernetes v1.34 Service IP
// allocators (the bitmap and the IPAddress-object allocator) behind one small
// interface, and builds the fixtures the benchmarks share: address sets of a
// given fill level or layout, and owners.
//
// It is a separate module so that the library itself does not depend on
// k8s.io/kubernetes. See BENCHMARKS.md for results and run.sh to reproduce
// them.
package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	listersv1 "k8s.io/client-go/listers/networking/v1"
	api "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/registry/core/service/ipallocator"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/memory"
)

// Implementation names, used as the impl= key of benchmark names.
const (
	ImplNetipam    = "netipam"     // default strategy: random start, as Kubernetes
	ImplNetipamSeq = "netipam-seq" // Sequential strategy: lowest free address
	// ImplNetipamIndexed is ImplNetipam over a store whose owner index is
	// kept (the memory store builds it on the first AddressesOf, and keeps
	// it from then on): what an embedder that looks records up by owner
	// pays per allocation.
	ImplNetipamIndexed = "netipam-indexed"
	ImplBitmap         = "k8s-bitmap"
	ImplIPAddress      = "k8s-ipaddress"
)

// Allocator is what the benchmarks drive: one prefix, one owner per call.
type Allocator interface {
	// AllocateNext allocates a free address of the prefix.
	AllocateNext() (netip.Addr, error)
	// Allocate allocates addr.
	Allocate(addr netip.Addr) error
	// Release frees addr.
	Release(addr netip.Addr) error
	// Fill allocates addrs (all free) as fast as the implementation allows;
	// it is fixture setup, not measured.
	Fill(addrs []netip.Addr) error
	// Close releases the implementation's resources.
	Close() error
}

// New returns the implementation impl over prefix, empty.
func New(impl string, prefix netip.Prefix) (Allocator, error) {
	switch impl {
	case ImplNetipam:
		return NewNetipam(prefix, allocator.RandomStart(nil))
	case ImplNetipamSeq:
		return NewNetipam(prefix, allocator.Sequential())
	case ImplNetipamIndexed:
		n, err := NewNetipam(prefix, allocator.RandomStart(nil))
		if err != nil {
			return nil, err
		}
		return n, n.IndexOwners()
	case ImplBitmap:
		return NewBitmap(prefix)
	case ImplIPAddress:
		return NewIPAddress(prefix, nil)
	case ImplFloor:
		return NewFloor(prefix), nil
	case ImplFloorDense:
		return NewFloorDense(prefix), nil
	case ImplFloorIndexed:
		return NewFloorIndexed(prefix), nil
	}
	return nil, fmt.Errorf("unknown implementation %q", impl)
}

// Owner returns the i-th benchmark owner: a Service in namespace "default"
// whose name is exactly 32 bytes, the upper end of what the memory
// benchmark assumes.
func Owner(i int) ipaddress.ParentRef {
	var buf [32]byte
	copy(buf[:], "service-")
	s := strconv.AppendUint(buf[:8], uint64(i), 16)
	// left-pad the hex number with zeros to 24 digits
	n := len(s) - 8
	copy(buf[32-n:], s[8:])
	for j := 8; j < 32-n; j++ {
		buf[j] = '0'
	}
	return ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: string(buf[:])}
}

// cycleOwners own the addresses the measured operations allocate, each
// allocation the next of them in turn: an allocation is for a new owner (a
// Service), whose entry in the store's owner index is created and deleted
// with the record, as it would be. In alloc+release each is released before
// it comes round again. Distinct from every fill owner (Owner(i)).
var cycleOwners = func() []ipaddress.ParentRef {
	out := make([]ipaddress.ParentRef, ownerCycle)
	for i := range out {
		out[i] = Owner(1<<40 + i)
	}
	return out
}()

// ownerCycle is the number of cycleOwners, a constant power of two so that
// taking the next one costs no division.
const ownerCycle = 1024

// ownerRing hands out cycleOwners in turn. It is part of every measured
// operation of the implementations that take owners, not of the bitmap's,
// so it must cost next to nothing: its count is a plain one, as an atomic
// add costs ~10 ns on the benchmark host (Calibrate/op=owner-ring). A
// benchmark that calls one implementation from several goroutines shares
// its ring first (shareRing), which makes the count atomic until unshared.
type ownerRing struct {
	n      uint64
	shared bool
}

func (r *ownerRing) next() ipaddress.ParentRef { return cycleOwners[r.nextIndex()] }

// nextIndex returns the place in cycleOwners of the next owner.
func (r *ownerRing) nextIndex() int {
	if r.shared {
		return int((atomic.AddUint64(&r.n, 1) - 1) % ownerCycle)
	}
	r.n++
	return int((r.n - 1) % ownerCycle)
}

// ringed is an implementation that takes owners from a ring.
type ringed interface{ cycleRing() *ownerRing }

// shareRing makes a's owner ring, if it has one, safe for concurrent use,
// until the function it returns is called, after the goroutines are done.
func shareRing(a Allocator) (unshare func()) {
	r, ok := a.(ringed)
	if !ok {
		return func() {}
	}
	r.cycleRing().shared = true
	return func() { r.cycleRing().shared = false }
}

// --- netipam ---------------------------------------------------------------

// Netipam is netipam's allocator over its in-memory store, with one CIDR.
type Netipam struct {
	owners   ownerRing
	Store    *memory.Store
	Alloc    *allocator.Allocator
	family   ipaddress.Family
	strategy allocator.Strategy
	filled   int
	// hints, when set, is the store as the allocator sees it: Store
	// behind a switch of its prefetch hints (BenchmarkPrefetch).
	hints *hintSwitch
}

// hintSwitch is a memory store whose store.Prefetcher forwards the hints
// while on is set and drops them otherwise, so that one allocator over one
// store can be measured with them and without them, in turns.
type hintSwitch struct {
	*memory.Store
	on bool
}

// PrefetchOwnerLocked implements store.Prefetcher.
func (h *hintSwitch) PrefetchOwnerLocked(owner ipaddress.ParentRef) {
	if h.on {
		h.Store.PrefetchOwnerLocked(owner)
	}
}

// PrefetchAddressLocked implements store.Prefetcher.
func (h *hintSwitch) PrefetchAddressLocked(addr netip.Addr) {
	if h.on {
		h.Store.PrefetchAddressLocked(addr)
	}
}

// CIDRName is the name of the CIDR the netipam fixtures use.
const CIDRName = "bench"

// NewNetipam returns a memory store holding one CIDR of prefix and an
// allocator over it using strategy.
func NewNetipam(prefix netip.Prefix, strategy allocator.Strategy) (*Netipam, error) {
	n := &Netipam{Store: memory.New(), family: ipaddress.FamilyOf(prefix.Addr()), strategy: strategy}
	ctx := context.Background()
	if _, err := n.Store.CreateCIDR(ctx, cidrset.CIDR{Name: CIDRName, Prefixes: []netip.Prefix{prefix}}); err != nil {
		return nil, err
	}
	return n, n.open()
}

// IndexOwners has the store build its owner index, by looking records up
// by owner once; every write keeps it from then on.
func (n *Netipam) IndexOwners() error {
	_, err := n.Store.AddressesOf(context.Background(), Owner(0))
	return err
}

func (n *Netipam) open() error {
	var st store.Store = n.Store
	if n.hints != nil {
		st = n.hints
	}
	a, err := allocator.New(context.Background(), st, allocator.WithStrategy(n.strategy))
	n.Alloc = a
	return err
}

// hintSwitch restarts the allocator over Store behind a hintSwitch, unless
// it already is, and returns the switch.
func (n *Netipam) hintSwitch() (*hintSwitch, error) {
	if n.hints != nil {
		return n.hints, nil
	}
	if err := n.Alloc.Close(); err != nil {
		return nil, err
	}
	n.hints = &hintSwitch{Store: n.Store, on: true}
	return n.hints, n.open()
}

func (n *Netipam) cycleRing() *ownerRing { return &n.owners }

// AllocateNext implements Allocator.
func (n *Netipam) AllocateNext() (netip.Addr, error) {
	r, err := n.Alloc.AllocateNext(context.Background(), n.family, n.owners.next())
	return r.Addr, err
}

// Allocate implements Allocator.
func (n *Netipam) Allocate(addr netip.Addr) error {
	_, err := n.Alloc.Allocate(context.Background(), addr, n.owners.next())
	return err
}

// Release implements Allocator.
func (n *Netipam) Release(addr netip.Addr) error {
	return n.Alloc.Release(context.Background(), addr)
}

// Fill implements Allocator the way a restarted process sees it: the
// allocator is closed, the records are written to the store in batches,
// each owned by its own Owner, and a new allocator starts over the store.
func (n *Netipam) Fill(addrs []netip.Addr) error {
	if err := n.Alloc.Close(); err != nil {
		return err
	}
	if err := FillStore(n.Store, addrs, n.filled); err != nil {
		return err
	}
	n.filled += len(addrs)
	return n.open()
}

// Close implements Allocator.
func (n *Netipam) Close() error {
	err := n.Alloc.Close()
	return errors.Join(err, n.Store.Close())
}

// fillBatch is the batch size of FillStore: one store write (one lock,
// one revision) per batch.
const fillBatch = 1024

// FillStore writes a record for every address of addrs into st, the i-th
// owned by Owner(first+i), in batches of fillBatch.
func FillStore(st *memory.Store, addrs []netip.Addr, first int) error {
	ctx := context.Background()
	recs := make([]ipaddress.IPAddress, 0, fillBatch)
	for i := 0; i < len(addrs); i += fillBatch {
		recs = recs[:0]
		for j := i; j < min(i+fillBatch, len(addrs)); j++ {
			recs = append(recs, ipaddress.IPAddress{Addr: addrs[j], Parent: Owner(first + j)})
		}
		if _, err := st.CreateAddresses(ctx, recs); err != nil {
			return err
		}
	}
	return nil
}

// --- Kubernetes bitmap allocator --------------------------------------------

// Bitmap is the Kubernetes bitmap allocator (ipallocator.NewInMemory), the
// one kube-apiserver used before KEP-1880.
type Bitmap struct {
	R *ipallocator.Range
}

// NewBitmap returns an empty bitmap allocator over prefix. Note: for IPv6 it
// only covers the first 65536 addresses of the prefix, whatever its size.
func NewBitmap(prefix netip.Prefix) (*Bitmap, error) {
	r, err := ipallocator.NewInMemory(IPNet(prefix))
	if err != nil {
		return nil, err
	}
	return &Bitmap{R: r}, nil
}

// AllocateNext implements Allocator.
func (b *Bitmap) AllocateNext() (netip.Addr, error) {
	ip, err := b.R.AllocateNext()
	if err != nil {
		return netip.Addr{}, err
	}
	return addrOf(ip), nil
}

// Allocate implements Allocator.
func (b *Bitmap) Allocate(addr netip.Addr) error { return b.R.Allocate(addr.AsSlice()) }

// Release implements Allocator.
func (b *Bitmap) Release(addr netip.Addr) error { return b.R.Release(addr.AsSlice()) }

// Fill implements Allocator.
func (b *Bitmap) Fill(addrs []netip.Addr) error {
	for _, a := range addrs {
		if err := b.R.Allocate(a.AsSlice()); err != nil {
			return fmt.Errorf("bitmap: allocate %s: %w", a, err)
		}
	}
	return nil
}

// Close implements Allocator.
func (b *Bitmap) Close() error { b.R.Destroy(); return nil }

// --- Kubernetes IPAddress allocator -----------------------------------------

// IPAddress is the Kubernetes IPAddress-object allocator
// (ipallocator.NewIPAllocator, the KEP-1880 one) over a fake clientset and
// an informer, started and synced. Every allocation and release waits until
// the informer's lister shows the change: the allocator decides from the
// lister, and the fake watcher panics ("channel full") when more than 100
// events are left unread.
type IPAddress struct {
	A       *ipallocator.Allocator
	Client  *fake.Clientset
	lister  listersv1.IPAddressLister
	prefix  netip.Prefix
	addrs   []netip.Addr
	stop    chan struct{}
	factory informers.SharedInformerFactory
	svcs    []*api.Service // cycleServices, shared by every instance
	owners  *ownerRing
	mu      *sync.Mutex
}

// cycleServices are the Services of cycleOwners, in order; read-only.
var cycleServices = func() []*api.Service {
	out := make([]*api.Service, len(cycleOwners))
	for i, o := range cycleOwners {
		out[i] = &api.Service{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name}}
	}
	return out
}()

// nextService returns the Service of the next cycle owner.
func (x *IPAddress) nextService() *api.Service { return x.svcs[x.owners.nextIndex()] }

func (x *IPAddress) cycleRing() *ownerRing { return x.owners }

// NewIPAddress returns the allocator over prefix, with an IPAddress object
// already stored for each of initial.
func NewIPAddress(prefix netip.Prefix, initial []netip.Addr) (*IPAddress, error) {
	objs := make([]k8sruntime.Object, 0, len(initial))
	for i, a := range initial {
		objs = append(objs, ipAddressObject(a, Owner(i)))
	}
	client := fake.NewSimpleClientset(objs...)
	factory := informers.NewSharedInformerFactory(client, 0)
	inf := factory.Networking().V1().IPAddresses()
	a, err := ipallocator.NewIPAllocator(IPNet(prefix), client.NetworkingV1(), inf)
	if err != nil {
		return nil, err
	}
	// initial is kept, not copied (Fill appends to a full slice, so into a
	// new array): the heap benchmark charges the adapter only what the
	// clientset and informer hold, as the owners of netipam's rows are
	// not charged to netipam either.
	x := &IPAddress{
		A: a, Client: client, lister: inf.Lister(), prefix: prefix,
		addrs: initial[:len(initial):len(initial)], stop: make(chan struct{}), factory: factory,
		mu: new(sync.Mutex), owners: new(ownerRing), svcs: cycleServices,
	}
	factory.Start(x.stop)
	for typ, ok := range factory.WaitForCacheSync(x.stop) {
		if !ok {
			x.Close()
			return nil, fmt.Errorf("informer for %v did not sync", typ)
		}
	}
	return x, nil
}

func ipAddressObject(a netip.Addr, owner ipaddress.ParentRef) *networkingv1.IPAddress {
	fam := "IPv4"
	if a.Is6() {
		fam = "IPv6"
	}
	return &networkingv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{
			Name: a.String(),
			Labels: map[string]string{
				networkingv1.LabelIPAddressFamily: fam,
				networkingv1.LabelManagedBy:       ipallocator.ControllerName,
			},
		},
		Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{
			Resource: owner.Resource, Namespace: owner.Namespace, Name: owner.Name,
		}},
	}
}

// waitLister waits until the lister has (present) or lacks the object.
func (x *IPAddress) waitLister(name string, present bool) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := x.lister.Get(name)
		if (err == nil) == present {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("informer did not see %s (present=%v) within 30s", name, present)
		}
		runtime.Gosched()
	}
}

// AllocateNext implements Allocator.
func (x *IPAddress) AllocateNext() (netip.Addr, error) {
	// The allocator draws its random start from a math/rand.Rand that is
	// not safe for concurrent use; serialize the call (the wait for the
	// informer below stays concurrent).
	x.mu.Lock()
	ip, err := x.A.AllocateNextService(x.nextService())
	x.mu.Unlock()
	if err != nil {
		return netip.Addr{}, err
	}
	a := addrOf(ip)
	return a, x.waitLister(a.String(), true)
}

// Allocate implements Allocator.
func (x *IPAddress) Allocate(addr netip.Addr) error {
	if err := x.A.AllocateService(x.nextService(), addr.AsSlice()); err != nil {
		return err
	}
	return x.waitLister(addr.String(), true)
}

// Release implements Allocator.
func (x *IPAddress) Release(addr netip.Addr) error {
	if err := x.A.Release(addr.AsSlice()); err != nil {
		return err
	}
	return x.waitLister(addr.String(), false)
}

// Fill implements Allocator by starting over: a new fake clientset holding
// every object from the start, and a new informer that lists them. Creating
// them one by one through the API would be far slower.
func (x *IPAddress) Fill(addrs []netip.Addr) error {
	all := append(x.addrs, addrs...)
	x.Close()
	nx, err := NewIPAddress(x.prefix, all)
	if err != nil {
		return err
	}
	*x = *nx
	return nil
}

// Close implements Allocator.
func (x *IPAddress) Close() error {
	close(x.stop)
	x.factory.Shutdown()
	return nil
}

// --- addresses ----------------------------------------------------------------

// IPNet converts a prefix to the *net.IPNet the Kubernetes allocators take.
func IPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func addrOf(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

// Usable returns how many addresses prefix offers (network address and
// IPv4 broadcast excluded). It must fit in an int.
func Usable(p netip.Prefix) int {
	h := p.Addr().BitLen() - p.Bits()
	if p.Addr().Is4() {
		return 1<<h - 2
	}
	return 1<<h - 1
}

// AddrAt returns the address at offset (hi<<64 | lo) from the start of p.
func AddrAt(p netip.Prefix, hi, lo uint64) netip.Addr {
	if p.Addr().Is4() {
		b := p.Addr().As4()
		v := binary.BigEndian.Uint32(b[:]) + uint32(lo)
		binary.BigEndian.PutUint32(b[:], v)
		return netip.AddrFrom4(b)
	}
	b := p.Addr().As16()
	blo := binary.BigEndian.Uint64(b[8:])
	bhi := binary.BigEndian.Uint64(b[:8])
	sum := blo + lo
	carry := uint64(0)
	if sum < blo {
		carry = 1
	}
	binary.BigEndian.PutUint64(b[8:], sum)
	binary.BigEndian.PutUint64(b[:8], bhi+hi+carry)
	return netip.AddrFrom16(b)
}

// Shuffled returns every usable address of p in a random order fixed by
// seed. Its first k elements are a random fill of k addresses, and a
// higher fill level extends a lower one.
func Shuffled(p netip.Prefix, seed uint64) []netip.Addr {
	n := Usable(p)
	out := make([]netip.Addr, n)
	for i := range out {
		out[i] = AddrAt(p, 0, uint64(i+1))
	}
	r := rand.New(rand.NewPCG(seed, 0x6e657469))
	r.Shuffle(n, func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// FillCount returns how many addresses a fill of pct percent of p holds.
func FillCount(p netip.Prefix, pct float64) int {
	return int(float64(Usable(p)) * pct / 100)
}

// Layout is how a large fixture's addresses lie in an IPv6 prefix.
type Layout string

// Layouts.
const (
	// Packed: consecutive addresses from the start of the upper band
	// (KEP-3070), as a sequential allocator would leave them.
	Packed Layout = "packed"
	// Random: scattered uniformly over the whole prefix.
	Random Layout = "random"
)

// reservedLower is the size of the KEP-3070 lower band of an IPv6 prefix
// of /64 or shorter.
const reservedLower = 256

// LargeAddrs returns addresses [from, to) of the sequence that lays out
// addresses in an IPv6 prefix of at most /64 (so at least 64 host bits).
// The sequence is deterministic and its members distinct; a longer fill
// extends a shorter one.
func LargeAddrs(p netip.Prefix, l Layout, from, to int) []netip.Addr {
	hostBits := 128 - p.Bits()
	out := make([]netip.Addr, 0, to-from)
	for i := from; i < to; i++ {
		switch l {
		case Packed:
			out = append(out, AddrAt(p, 0, uint64(1+reservedLower+i)))
		default:
			// mix64 is a bijection, so low words (and addresses) are distinct;
			// index 0 maps to 0, the network address, so shift by one.
			lo := mix64(uint64(i) + 1)
			var hi uint64
			if hostBits > 64 {
				hi = mix64(^uint64(i)) & (1<<(hostBits-64) - 1)
			}
			out = append(out, AddrAt(p, hi, lo))
		}
	}
	return out
}

// mix64 is the SplitMix64 finalizer: a bijection of uint64 that scatters.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
