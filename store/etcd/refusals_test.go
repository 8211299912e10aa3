package etcd

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// countingKV counts the requests a store sends through its client's KV.
type countingKV struct {
	clientv3.KV
	n atomic.Int64
}

func (k *countingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	k.n.Add(1)
	return k.KV.Get(ctx, key, opts...)
}

func (k *countingKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	k.n.Add(1)
	return k.KV.Put(ctx, key, val, opts...)
}

func (k *countingKV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	k.n.Add(1)
	return k.KV.Delete(ctx, key, opts...)
}

func (k *countingKV) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	k.n.Add(1)
	return k.KV.Do(ctx, op)
}

func (k *countingKV) Txn(ctx context.Context) clientv3.Txn {
	k.n.Add(1)
	return k.KV.Txn(ctx)
}

// countedStore returns a store on its own client whose KV requests are
// counted, and a plain store on the same prefix for setting up and checking.
func countedStore(t *testing.T, prefix string) (counted *Store, kv *countingKV, plain *Store) {
	t.Helper()
	c := startCluster(t, 1)
	cli := c.newClient(t)
	kv = &countingKV{KV: cli.KV}
	cli.KV = kv
	counted, err := New(cli, WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = counted.Close() })
	plain, err = New(c.newClient(t), WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plain.Close() })
	return counted, kv, plain
}

// TestRefusalsSendNothingToEtcd: what the conformance suite checks the
// store refuses (fences of revision 0, unstorable CIDRs, lookups of
// unstorable addresses) is refused before any request to etcd: an address
// key drops the zone and the zero Addr's is ::'s, and a compare with
// revision 0 holds for a missing key, so none of it may reach etcd.
func TestRefusalsSendNothingToEtcd(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	s, kv, plain := countedStore(t, "/refusals")
	c, err := plain.CreateCIDR(ctx, cidrset.CIDR{Name: "here", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}})
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, ctx, plain, netip.MustParseAddr("::"), netip.MustParseAddr("fe80::1"), netip.MustParseAddr("10.0.0.1"))
	bad := c.Clone()
	bad.Prefixes = append(bad.Prefixes, netip.Prefix{})
	refusals := map[string]func() error{
		"CreateCIDR with a zero prefix": func() error {
			_, err := s.CreateCIDR(ctx, cidrset.CIDR{Name: "zero", Prefixes: []netip.Prefix{{}}})
			return err
		},
		"UpdateCIDR adding a zero prefix": func() error { _, err := s.UpdateCIDR(ctx, bad); return err },
	}
	for _, f := range []store.Fence{{CIDR: "missing"}, {CIDR: c.Name, Revision: -1}, {CIDR: c.Name, Touch: true}} {
		refusals[fmt.Sprintf("CreateAddresses fenced on %+v", f)] = func() error {
			_, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: netip.MustParseAddr("10.0.0.9"), Parent: svc("a")}}, f)
			return err
		}
	}
	for _, a := range []netip.Addr{{}, netip.MustParseAddr("fe80::1%eth0"), netip.MustParseAddr("::ffff:10.0.0.1")} {
		refusals[fmt.Sprintf("GetAddress(%q)", a)] = func() error { _, err := s.GetAddress(ctx, a); return err }
		refusals[fmt.Sprintf("DeleteAddress(%q)", a)] = func() error { _, _, err := s.DeleteAddress(ctx, a); return err }
		refusals[fmt.Sprintf("DeleteAddressAt(%q)", a)] = func() error {
			_, _, err := s.DeleteAddressAt(ctx, a, c.Revision)
			return err
		}
	}
	for name, call := range refusals {
		before := kv.n.Load()
		if err := call(); err == nil {
			t.Errorf("%s succeeded", name)
		}
		if n := kv.n.Load() - before; n != 0 {
			t.Errorf("%s sent %d requests to etcd, want none", name, n)
		}
	}
}
