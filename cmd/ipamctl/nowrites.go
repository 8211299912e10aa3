package main

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// errNoWrites is the error of every write to a noWrites store. It matches
// store.ErrReadOnly, which the allocator knows: a CIDR left Terminating
// with nothing in it, which it would remove on opening the store, it
// leaves to a writer, as over a bbolt file opened read-only.
var errNoWrites = fmt.Errorf("this command writes nothing: %w", store.ErrReadOnly)

// noWrites is a store that reads through to the one it holds and refuses
// every write with errNoWrites: what a command that only reads, or a dry
// run, opens over etcd, so that it writes nothing whoever asks, the
// command or the allocator. It hides no
// interface the allocator looks for: only store/memory is store.Locked.
type noWrites struct{ store.Store }

func (noWrites) CreateCIDR(context.Context, cidrset.CIDR) (cidrset.CIDR, error) {
	return cidrset.CIDR{}, errNoWrites
}

func (noWrites) UpdateCIDR(context.Context, cidrset.CIDR) (cidrset.CIDR, error) {
	return cidrset.CIDR{}, errNoWrites
}

func (noWrites) DeleteCIDR(context.Context, string, int64, ...store.Fence) error {
	return errNoWrites
}

func (noWrites) CreateAddresses(context.Context, []ipaddress.IPAddress, ...store.Fence) ([]ipaddress.IPAddress, error) {
	return nil, errNoWrites
}

func (noWrites) DeleteAddress(context.Context, netip.Addr) (ipaddress.IPAddress, int64, error) {
	return ipaddress.IPAddress{}, 0, errNoWrites
}

func (noWrites) DeleteAddressAt(context.Context, netip.Addr, int64) (ipaddress.IPAddress, int64, error) {
	return ipaddress.IPAddress{}, 0, errNoWrites
}

func (noWrites) ReplaceAddressAt(context.Context, ipaddress.IPAddress, int64) (ipaddress.IPAddress, error) {
	return ipaddress.IPAddress{}, errNoWrites
}
