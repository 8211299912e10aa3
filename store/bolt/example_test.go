package bolt_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store/bolt"
)

func Example() {
	dir, err := os.MkdirTemp("", "netipam-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "ipam.db")
	ctx := context.Background()
	kubernetes := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "kubernetes"}
	dns := ipaddress.ParentRef{Resource: "services", Namespace: "kube-system", Name: "kube-dns"}

	// First run: a new file.
	st, err := bolt.Open(path)
	if err != nil {
		log.Fatal(err)
	}
	a, err := allocator.New(ctx, st, allocator.WithStrategy(allocator.Sequential()))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := a.EnsureDefault(ctx, netip.MustParsePrefix("10.96.0.0/28")); err != nil {
		log.Fatal(err)
	}
	rec, err := a.AllocateNext(ctx, ipaddress.IPv4, kubernetes)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(rec.Name(), "for", rec.Parent.Name)
	a.Close()
	st.Close()

	// Second run: the allocator starts from what the file holds.
	st, err = bolt.Open(path)
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	a, err = allocator.New(ctx, st, allocator.WithStrategy(allocator.Sequential()))
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	rec, err = a.AllocateNext(ctx, ipaddress.IPv4, dns)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(rec.Name(), "for", rec.Parent.Name)
	held, err := a.AddressesOf(ctx, kubernetes)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(held[0].Name(), "still held by", held[0].Parent.Name)
	// Output:
	// 10.96.0.1 for kubernetes
	// 10.96.0.2 for kube-dns
	// 10.96.0.1 still held by kubernetes
}

// A reader beside other readers, on a file it may not be allowed to write:
// WithReadOnly takes a shared lock and writes nothing, and OpenContext
// gives up waiting for a writer's lock when its context ends.
func ExampleWithReadOnly() {
	dir, err := os.MkdirTemp("", "netipam-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "ipam.db")
	ctx := context.Background()

	st, err := bolt.Open(path)
	if err != nil {
		log.Fatal(err)
	}
	a, err := allocator.New(ctx, st)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := a.CreateCIDR(ctx, "kubernetes", netip.MustParsePrefix("10.96.0.0/28")); err != nil {
		log.Fatal(err)
	}
	a.Close()

	// The writer still holds the file: a reader waits for it, until its
	// context ends.
	waitBriefly, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = bolt.OpenContext(waitBriefly, path, bolt.WithReadOnly(), bolt.WithLockTimeout(-1))
	fmt.Println("while written:", errors.Is(err, context.DeadlineExceeded))
	st.Close()

	r1, err := bolt.OpenContext(ctx, path, bolt.WithReadOnly())
	if err != nil {
		log.Fatal(err)
	}
	defer r1.Close()
	r2, err := bolt.OpenContext(ctx, path, bolt.WithReadOnly())
	if err != nil {
		log.Fatal(err)
	}
	defer r2.Close()
	c, err := r2.GetCIDR(ctx, "kubernetes")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("two readers; one reads", c.Name, c.Prefixes[0])
	_, err = r1.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: netip.MustParseAddr("10.96.0.1"), Parent: ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "kubernetes"}}})
	fmt.Println("a write:", errors.Is(err, bolt.ErrReadOnly))
	// Output:
	// while written: true
	// two readers; one reads kubernetes 10.96.0.0/28
	// a write: true
}
