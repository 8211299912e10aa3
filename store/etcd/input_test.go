package etcd

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
)

// New's bad input gets a typed error: no client, or a prefix inside
// another store's records, is ipaddress.ErrInvalid, a *FieldError naming
// the field, as every validation error of the module.
func TestNewRefusesBadInputWithATypedError(t *testing.T) {
	var fe *ipaddress.FieldError
	if s, err := New(nil); s != nil || !errors.Is(err, ipaddress.ErrInvalid) || !errors.As(err, &fe) || fe.Field != "client" {
		t.Errorf("New(nil) = %v, %v; want ErrInvalid for the field client", s, err)
	}
	c := startCluster(t, 1)
	cli := c.newClient(t)
	for _, p := range []string{"/n1/v1/cidrs/zz", "/n1/v1/ips", "/n1/v1/owners/x/"} {
		for name, err := range map[string]error{"New": errOf(New(cli, WithPrefix(p))), "CheckPrefix": CheckPrefix(p)} {
			if !errors.Is(err, ipaddress.ErrInvalid) || !errors.As(err, &fe) || fe.Field != "prefix" || !strings.Contains(err.Error(), "inside another store's records") {
				t.Errorf("%s with prefix %q: %v; want ErrInvalid for the field prefix", name, p, err)
			}
		}
	}
}

func errOf[T any](_ T, err error) error { return err }

// A nil Option, or WithClock(nil), leaves the store as New makes it: an
// option list built conditionally must not make a write panic.
func TestNilOptionsAreTheDefaults(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	c := startCluster(t, 1)
	s, err := New(c.newClient(t), nil, WithClock(nil), WithErrorHandler(nil), WithPrefix("/nil-options"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.CreateCIDR(ctx, cidrset.CIDR{Name: "x", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}}); err != nil {
		t.Fatalf("CreateCIDR: %v", err)
	}
	owner := ipaddress.ParentRef{Resource: "services", Namespace: "d", Name: "a"}
	if _, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: netip.MustParseAddr("10.0.0.1"), Parent: owner}}); err != nil {
		t.Fatalf("CreateAddresses: %v", err)
	}
}
