package main

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/memory"
)

// noWrites refuses every write of store.Store with store.ErrReadOnly, and
// leaves the store it holds as it was; every other method reads. A method
// added to store.Store fails the test until it is sorted here.
func TestNoWritesRefusesEveryWriteOfTheStore(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	c, err := mem.CreateCIDR(ctx, cidrset.CIDR{Name: "c", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}})
	if err != nil {
		t.Fatal(err)
	}
	owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "a"}
	recs, err := mem.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: netip.MustParseAddr("10.0.0.1"), Parent: owner}})
	if err != nil {
		t.Fatal(err)
	}
	rec := recs[0]
	other := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "b"}
	ro := noWrites{mem}
	terminating := c
	terminating.Terminating = true
	writes := map[string]func() error{
		"CreateCIDR": func() error {
			_, err := ro.CreateCIDR(ctx, cidrset.CIDR{Name: "d", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24")}})
			return err
		},
		"UpdateCIDR": func() error { _, err := ro.UpdateCIDR(ctx, terminating); return err },
		"DeleteCIDR": func() error { return ro.DeleteCIDR(ctx, "c", c.Revision) },
		"CreateAddresses": func() error {
			_, err := ro.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: netip.MustParseAddr("10.0.0.2"), Parent: owner}})
			return err
		},
		"DeleteAddress":   func() error { _, _, err := ro.DeleteAddress(ctx, rec.Addr); return err },
		"DeleteAddressAt": func() error { _, _, err := ro.DeleteAddressAt(ctx, rec.Addr, rec.Revision); return err },
		"ReplaceAddressAt": func() error {
			_, err := ro.ReplaceAddressAt(ctx, ipaddress.IPAddress{Addr: rec.Addr, Parent: other}, rec.Revision)
			return err
		},
	}
	reads := []string{"GetCIDR", "GetAddress", "AddressesOf", "ListAddresses", "Watch", "Close"}
	st := reflect.TypeFor[store.Store]()
	for i := range st.NumMethod() {
		if m := st.Method(i).Name; writes[m] == nil && !slices.Contains(reads, m) {
			t.Errorf("store.Store.%s is neither a write noWrites refuses nor a read", m)
		}
	}
	for name, write := range writes {
		if err := write(); !errors.Is(err, store.ErrReadOnly) {
			t.Errorf("noWrites.%s: %v, want store.ErrReadOnly", name, err)
		}
	}
	for _, name := range []string{"c", "d"} {
		got, err := ro.GetCIDR(ctx, name)
		switch {
		case name == "c" && (err != nil || got.Revision != c.Revision || got.Terminating):
			t.Errorf("CIDR c is now %+v, %v", got, err)
		case name == "d" && !errors.Is(err, store.ErrNotFound):
			t.Errorf("CIDR d was made: %+v, %v", got, err)
		}
	}
	all, err := ro.ListAddresses(ctx)
	if err != nil || len(all) != 1 || all[0].Addr != rec.Addr || all[0].Parent != owner || all[0].Revision != rec.Revision {
		t.Errorf("the records are now %+v, %v; want %+v only", all, err, rec)
	}
}
