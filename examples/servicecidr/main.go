// Command servicecidr runs SPEC walkthroughs 8.1 (exhaustion) and 8.2
// (deletion safety) on the in-memory store, printing what an operator of a
// Kubernetes cluster would see with kubectl.
//
//	go run ./examples/servicecidr
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/examples/internal/show"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store/memory"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(w io.Writer) error {
	ctx := context.Background()
	st := memory.New()
	// A seeded random start: the Kubernetes strategy, reproducible output.
	a, err := allocator.New(ctx, st, allocator.WithStrategy(allocator.RandomStart(rand.NewPCG(1880, 3070))))
	if err != nil {
		return err
	}
	defer a.Close()

	fmt.Fprintln(w, "== 8.1 Exhaustion: the default CIDR fills up, a new CIDR extends it")
	fmt.Fprintln(w, "$ apiserver --service-cluster-ip-range=10.96.0.0/28")
	if _, err := a.EnsureDefault(ctx, netip.MustParsePrefix("10.96.0.0/28")); err != nil {
		return err
	}
	show.CIDRs(w, a.CIDRs(), time.Now())
	for _, s := range []struct{ ns, name, ip string }{{"default", "kubernetes", "10.96.0.1"}, {"kube-system", "kube-dns", "10.96.0.10"}} {
		r, err := a.Allocate(ctx, netip.MustParseAddr(s.ip), show.Service(s.ns, s.name))
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "service %s/%s: clusterIP %s\n", s.ns, s.name, r.Addr)
	}
	fmt.Fprintln(w, "$ create services until the range is full")
	for i := 1; ; i++ {
		name := fmt.Sprintf("test-%d", i)
		r, err := a.AllocateNext(ctx, ipaddress.IPv4, show.Service("default", name))
		if errors.Is(err, allocator.ErrFull) {
			fmt.Fprintf(w, "service default/%s: error: failed to allocate a serviceIP: %v\n", name, err)
			break
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "service default/%s: clusterIP %s\n", name, r.Addr)
	}
	u, _ := a.Usage("kubernetes")
	fmt.Fprintf(w, "kubernetes: %s of %s addresses used\n", u.Prefixes[0].Used, u.Prefixes[0].Size)

	fmt.Fprintln(w, "$ kubectl create servicecidr newcidr1 --cidrs=192.96.0.0/24")
	if _, err := a.CreateCIDR(ctx, "newcidr1", netip.MustParsePrefix("192.96.0.0/24")); err != nil {
		return err
	}
	show.CIDRs(w, a.CIDRs(), time.Now())
	var moved []netip.Addr
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("after-%d", i)
		r, err := a.AllocateNext(ctx, ipaddress.IPv4, show.Service("default", name))
		if err != nil {
			return err
		}
		moved = append(moved, r.Addr)
		fmt.Fprintf(w, "service default/%s: clusterIP %s\n", name, r.Addr)
	}
	fmt.Fprintln(w, "$ kubectl get ipaddresses")
	recs, err := st.ListAddresses(ctx)
	if err != nil {
		return err
	}
	show.IPAddresses(w, recs)

	fmt.Fprintln(w, "")
	fmt.Fprintln(w, "== 8.2 Deletion: a CIDR still holding addresses is kept until they are released")
	fmt.Fprintln(w, "$ kubectl delete servicecidr newcidr1")
	err = a.DeleteCIDR(ctx, "newcidr1")
	var blocked *allocator.DeletionBlockedError
	if !errors.As(err, &blocked) {
		return fmt.Errorf("deleting newcidr1: want it blocked, got %v", err)
	}
	fmt.Fprintf(w, "servicecidr newcidr1 deletion requested; blocked by %s\n", show.Addrs(blocked.Blocking))
	show.CIDRs(w, a.CIDRs(), time.Now())
	c, err := a.GetCIDR("newcidr1")
	if err != nil {
		return err
	}
	show.Condition(w, c)
	r, err := a.AllocateNext(ctx, ipaddress.IPv4, show.Service("default", "late"))
	fmt.Fprintf(w, "service default/late: %v\n", outcome(r, err))
	for i, addr := range moved {
		fmt.Fprintf(w, "$ kubectl delete service after-%d   # releases %s\n", i+1, addr)
		if err := a.Release(ctx, addr); err != nil {
			return err
		}
	}
	fmt.Fprintln(w, "$ kubectl get servicecidrs")
	show.CIDRs(w, a.CIDRs(), time.Now())
	if _, err := a.GetCIDR("newcidr1"); errors.Is(err, allocator.ErrNotFound) {
		fmt.Fprintln(w, "newcidr1 is gone: its finalizer was released with its last address")
	} else {
		return fmt.Errorf("newcidr1 still present: %v", err)
	}
	return nil
}

func outcome(r ipaddress.IPAddress, err error) string {
	if err != nil {
		return "error: failed to allocate a serviceIP: " + err.Error()
	}
	return "clusterIP " + r.Addr.String()
}
