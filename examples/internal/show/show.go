// Package show prints CIDRs and address records as kubectl prints
// ServiceCIDR and IPAddress objects, for the examples.
package show

import (
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
)

// Age formats d as kubectl does: 0s, 45s, 3m, 5h, 2d.
func Age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// CIDRs prints NAME CIDRS AGE, marking Terminating CIDRs.
func CIDRs(w io.Writer, cidrs []cidrset.CIDR, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tCIDRS\tAGE")
	for _, c := range cidrs {
		ps := make([]string, len(c.Prefixes))
		for i, p := range c.Prefixes {
			ps[i] = p.String()
		}
		name := c.Name
		if c.Terminating {
			name += " (Terminating)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", name, strings.Join(ps, ","), Age(now.Sub(c.Created)))
	}
	tw.Flush()
}

// IPAddresses prints NAME PARENTREF, sorted by address.
func IPAddresses(w io.Writer, recs []ipaddress.IPAddress) {
	recs = slices.Clone(recs)
	slices.SortFunc(recs, func(a, b ipaddress.IPAddress) int { return a.Addr.Compare(b.Addr) })
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPARENTREF")
	for _, r := range recs {
		fmt.Fprintf(tw, "%s\t%s\n", r.Addr, r.Parent)
	}
	tw.Flush()
}

// Condition prints a CIDR's Ready condition as kubectl describe does.
func Condition(w io.Writer, c cidrset.CIDR) {
	cond := c.Ready()
	status := "False"
	if cond.Status {
		status = "True"
	}
	fmt.Fprintf(w, "%s: Ready=%s", c.Name, status)
	if cond.Reason != "" {
		fmt.Fprintf(w, " reason=%s", cond.Reason)
	}
	fmt.Fprintf(w, " message=%q\n", cond.Message)
}

// Service returns the owner reference of a Service.
func Service(namespace, name string) ipaddress.ParentRef {
	return ipaddress.ParentRef{Resource: "services", Namespace: namespace, Name: name}
}

// Addrs formats addresses as a comma-separated list.
func Addrs(addrs []netip.Addr) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}
