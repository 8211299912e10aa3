package bolt_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"os"
	"path/filepath"

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
