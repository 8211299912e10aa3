package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/netip"
	"net/url"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store/etcd"
)

// Two allocators, as two control-plane instances would run them, each with
// its own client and store over one etcd: an address one of them holds is
// refused to the other, and what either allocates the other sees.
func Example() {
	endpoint, stop := startEtcd()
	defer stop()
	ctx := context.Background()
	kubernetes := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "kubernetes"}
	dns := ipaddress.ParentRef{Resource: "services", Namespace: "kube-system", Name: "kube-dns"}

	a, closeA := newAllocator(ctx, endpoint, "/netipam")
	defer closeA()
	b, closeB := newAllocator(ctx, endpoint, "/netipam")
	defer closeB()
	if _, err := a.EnsureDefault(ctx, netip.MustParsePrefix("10.96.0.0/28")); err != nil {
		log.Fatal(err)
	}

	rec, err := a.Allocate(ctx, netip.MustParseAddr("10.96.0.10"), dns)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("a:", rec.Name(), "for", rec.Parent.Name)
	// b's allocator started before the CIDR existed: it learns of it, and
	// of the address, through its watch. The store refuses a duplicate
	// either way; waiting makes b's own choice see it.
	if err := b.WaitRevision(ctx, rec.Revision); err != nil {
		log.Fatal(err)
	}
	_, err = b.Allocate(ctx, netip.MustParseAddr("10.96.0.10"), kubernetes)
	fmt.Println("b:", err, errors.Is(err, allocator.ErrAllocated))
	rec, err = b.AllocateNext(ctx, ipaddress.IPv4, kubernetes)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("b:", rec.Name(), "for", rec.Parent.Name)
	held, err := a.AddressesOf(ctx, kubernetes)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("a sees", held[0].Name(), "held by", held[0].Parent.Name)
	// Output:
	// a: 10.96.0.10 for kube-dns
	// b: provided IP is already allocated true
	// b: 10.96.0.1 for kubernetes
	// a sees 10.96.0.1 held by kubernetes
}

// Stores under different prefixes share an etcd and nothing else: each
// prefix is its own set of CIDRs and addresses.
func ExampleWithPrefix() {
	endpoint, stop := startEtcd()
	defer stop()
	ctx := context.Background()
	web := ipaddress.ParentRef{Resource: "services", Namespace: "web", Name: "frontend"}
	for _, prefix := range []string{"/tenants/blue", "/tenants/green"} {
		a, closeA := newAllocator(ctx, endpoint, prefix)
		if _, err := a.EnsureDefault(ctx, netip.MustParsePrefix("10.96.0.0/28")); err != nil {
			log.Fatal(err)
		}
		rec, err := a.Allocate(ctx, netip.MustParseAddr("10.96.0.10"), web)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(prefix, rec.Name(), "for", rec.Parent.Name)
		closeA()
	}
	// Output:
	// /tenants/blue 10.96.0.10 for frontend
	// /tenants/green 10.96.0.10 for frontend
}

// newAllocator returns an allocator over its own client and store, under
// prefix, with the sequential strategy (so that the output above is fixed),
// and a function that closes all three.
func newAllocator(ctx context.Context, endpoint, prefix string) (*allocator.Allocator, func()) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		log.Fatal(err)
	}
	st, err := etcd.New(cli, etcd.WithPrefix(prefix), etcd.WithCloseClient())
	if err != nil {
		log.Fatal(err)
	}
	a, err := allocator.New(ctx, st, allocator.WithStrategy(allocator.Sequential()))
	if err != nil {
		log.Fatal(err)
	}
	return a, func() {
		a.Close()
		st.Close() // and the client, WithCloseClient
	}
}

// startEtcd starts a one-member etcd on loopback, with its data in a
// temporary directory; in production, give the client your cluster's
// endpoints instead. It returns the client URL and a function that stops
// the member and removes the directory.
func startEtcd() (string, func()) {
	dir, err := os.MkdirTemp("", "netipam-etcd-example")
	if err != nil {
		log.Fatal(err)
	}
	client, peer := loopbackURL(), loopbackURL()
	cfg := embed.NewConfig()
	cfg.Name = "example"
	cfg.Dir = dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	cfg.LogLevel = "fatal"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatal(err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		log.Fatal(err)
	case <-time.After(time.Minute):
		log.Fatal("etcd not ready after a minute")
	}
	return client.String(), func() {
		e.Close()
		os.RemoveAll(dir)
	}
}

// loopbackURL returns an http URL on a loopback port that was free a
// moment ago.
func loopbackURL() url.URL {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	return url.URL{Scheme: "http", Host: l.Addr().String()}
}
