// Command resize runs SPEC walkthrough 8.5: a full 10.0.0.0/24 is resized by
// adding the overlapping 10.0.0.0/23; the /24 can then be deleted at once,
// since the /23 covers every address it held.
//
//	go run ./examples/resize
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	a, err := allocator.New(ctx, memory.New())
	if err != nil {
		return err
	}
	defer a.Close()
	if _, err := a.CreateCIDR(ctx, "small", netip.MustParsePrefix("10.0.0.0/24")); err != nil {
		return err
	}
	n := 0
	for ; ; n++ {
		_, err := a.AllocateNext(ctx, ipaddress.IPv4, show.Service("default", fmt.Sprint("svc-", n)))
		if errors.Is(err, allocator.ErrFull) {
			fmt.Fprintf(w, "10.0.0.0/24 is full after %d services: %v\n", n, err)
			break
		}
		if err != nil {
			return err
		}
	}
	fmt.Fprintln(w, "$ kubectl create servicecidr big --cidrs=10.0.0.0/23")
	if _, err := a.CreateCIDR(ctx, "big", netip.MustParsePrefix("10.0.0.0/23")); err != nil {
		return err
	}
	show.CIDRs(w, a.CIDRs(), time.Now())
	fmt.Fprintln(w, "$ kubectl delete servicecidr small")
	if err := a.DeleteCIDR(ctx, "small"); err != nil {
		return fmt.Errorf("deleting small: %w", err)
	}
	fmt.Fprintln(w, "small deleted at once: big covers every address it held")
	show.CIDRs(w, a.CIDRs(), time.Now())
	r, err := a.AllocateNext(ctx, ipaddress.IPv4, show.Service("default", "after-resize"))
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "service default/after-resize: clusterIP %s\n", r.Addr)
	u, err := a.Usage("big")
	if err != nil {
		return err
	}
	p := u.Prefixes[0]
	fmt.Fprintf(w, "big %s: %s used, %s free of %s\n", p.Prefix, p.Used, p.Free, p.Size)
	return nil
}
