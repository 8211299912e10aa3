// Package walk holds the renumbering walkthrough (SPEC 8.3), shared by the
// renumber and familymigration examples: moving to another family (8.4) is
// renumbering into a prefix of that family.
package walk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/examples/internal/show"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store/memory"
)

// Renumber moves a cluster whose default CIDR is from to the prefix to:
// create the new CIDR, delete the old one (it stops serving at once),
// re-create every service so it moves, and replace the default CIDR last.
func Renumber(w io.Writer, from, to netip.Prefix) error {
	ctx := context.Background()
	st := memory.New()
	a, err := allocator.New(ctx, st, allocator.WithStrategy(allocator.RandomStart(rand.NewPCG(8, 3))))
	if err != nil {
		return err
	}
	defer a.Close()
	newFamily := ipaddress.FamilyOf(to.Addr())
	firstOf := func(p netip.Prefix) netip.Addr { r, _ := cidrset.HostRange(p); return r.From() }

	fmt.Fprintf(w, "$ apiserver --service-cluster-ip-range=%s\n", from)
	if _, err := a.EnsureDefault(ctx, from); err != nil {
		return err
	}
	services := []string{"kubernetes", "web", "db", "cache"}
	if _, err := a.Allocate(ctx, firstOf(from), show.Service("default", "kubernetes")); err != nil {
		return err
	}
	for _, s := range services[1:] {
		if _, err := a.AllocateNext(ctx, ipaddress.FamilyOf(from.Addr()), show.Service("default", s)); err != nil {
			return err
		}
	}
	printState(ctx, w, a)

	fmt.Fprintf(w, "$ kubectl create servicecidr renumbered --cidrs=%s\n", to)
	if _, err := a.CreateCIDR(ctx, "renumbered", to); err != nil {
		return err
	}
	fmt.Fprintln(w, "$ kubectl delete servicecidr kubernetes")
	if err := a.DeleteCIDR(ctx, cidrset.DefaultName); !errors.Is(err, allocator.ErrDeletionBlocked) {
		return fmt.Errorf("deleting the old default CIDR: want it blocked, got %v", err)
	}
	c, _ := a.GetCIDR(cidrset.DefaultName)
	show.Condition(w, c)
	if _, err := a.Allocate(ctx, firstOf(from).Next().Next().Next().Next().Next(), show.Service("default", "late")); err != nil {
		fmt.Fprintf(w, "a new service asking for an address of %s: %v\n", from, err)
	}

	fmt.Fprintln(w, "$ re-create every service, so that it moves")
	for _, s := range services {
		owner := show.Service("default", s)
		old, err := a.ReleaseOwner(ctx, owner)
		if err != nil {
			return err
		}
		var r ipaddress.IPAddress
		if s == "kubernetes" {
			r, err = a.Allocate(ctx, firstOf(to), owner)
		} else {
			r, err = a.AllocateNext(ctx, newFamily, owner)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "service default/%s: %s -> %s\n", s, show.Addrs(old), r.Addr)
	}
	if _, err := a.GetCIDR(cidrset.DefaultName); !errors.Is(err, allocator.ErrNotFound) {
		return fmt.Errorf("old default CIDR still there after its last address moved: %v", err)
	}
	fmt.Fprintf(w, "the old default CIDR (%s) is gone\n", from)

	fmt.Fprintf(w, "$ apiserver --service-cluster-ip-range=%s   # the default is replaced last\n", to)
	if _, err := a.EnsureDefault(ctx, to); err != nil {
		return err
	}
	fmt.Fprintln(w, "$ kubectl delete servicecidr renumbered   # covered by the new default: goes at once")
	if err := a.DeleteCIDR(ctx, "renumbered"); err != nil {
		return err
	}
	printState(ctx, w, a)
	return nil
}

func printState(ctx context.Context, w io.Writer, a *allocator.Allocator) {
	show.CIDRs(w, a.CIDRs(), time.Now())
	recs, err := a.Store().ListAddresses(ctx)
	if err != nil {
		fmt.Fprintln(w, "listing addresses:", err)
		return
	}
	show.IPAddresses(w, recs)
}
