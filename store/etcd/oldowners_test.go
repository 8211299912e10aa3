package etcd

import (
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// A record of an owner longer than store.MaxOwnerLen, written before this
// store applied store.CheckOwner, is read, found by owner, replaced and
// deleted like any other: the rule keeps such owners from being written,
// and loses no record that has one.
func TestRecordsOfOwnersWrittenBeforeCheckOwnerStayUsable(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	c := startCluster(t, 1)
	cli := c.newClient(t)
	s, err := New(cli, WithPrefix("/oldowners"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	long := ipaddress.ParentRef{Resource: "services", Name: strings.Repeat("n", 40<<10)}
	if store.CheckOwner(long) == nil {
		t.Fatal("CheckOwner takes the case")
	}
	for _, a := range []int{1, 2} {
		val := fmt.Sprintf(`{"v":2,"resource":"services","name":"%s","created":1}`, long.Name)
		if _, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(s.addrKey(v4(a))), "=", 0)).Then(clientv3.OpPut(s.addrKey(v4(a)), val)).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	r, err := s.GetAddress(ctx, v4(1))
	if err != nil || r.Parent != long {
		t.Fatalf("GetAddress: owner as written %v, %v", r.Parent == long, err)
	}
	recs, err := s.AddressesOf(ctx, long)
	if err != nil || len(recs) != 2 {
		t.Fatalf("AddressesOf(the long owner) = %d records, %v; want 2", len(recs), err)
	}
	heir := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "heir"}
	if _, err := s.ReplaceAddressAt(ctx, ipaddress.IPAddress{Addr: v4(1), Parent: heir}, r.Revision); err != nil {
		t.Errorf("ReplaceAddressAt of a record of the long owner: %v", err)
	}
	if _, _, err := s.DeleteAddress(ctx, v4(2)); err != nil {
		t.Errorf("DeleteAddress of a record of the long owner: %v", err)
	}
	if recs, err := s.AddressesOf(ctx, long); err != nil || len(recs) != 0 {
		t.Errorf("AddressesOf(the long owner) after its records went = %d records, %v; want none", len(recs), err)
	}
	if recs, err := s.AddressesOf(ctx, heir); err != nil || len(recs) != 1 || recs[0].Addr != v4(1) {
		t.Errorf("AddressesOf(heir) = %+v, %v; want the record it was given", recs, err)
	}
}
