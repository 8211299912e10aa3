package etcd

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// lostRig is a store whose client reaches a one-member cluster through a
// proxy that can lose the answer to a write, and beside it a store on a
// client of its own, on the same prefix, to set up and check with.
type lostRig struct {
	px       *tcpProxy
	s, other *Store
}

func newLostRig(t *testing.T, prefix string) *lostRig {
	t.Helper()
	c := startCluster(t, 1)
	px := startProxy(t, c.members[0].client.Host)
	s, err := New(c.newClient(t, "http://"+px.Addr()), WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	other, err := New(c.newClient(t), WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	return &lostRig{px: px, s: s, other: other}
}

// lose runs write, whose call-th gRPC call (from 1) is the transaction it
// writes with, and lets etcd apply that transaction, holding its answer,
// until applied says so; then it cuts the connection, so that the answer
// is lost, and returns write's error. The proxy takes connections again
// once write has returned.
func (r *lostRig) lose(t *testing.T, ctx context.Context, call int, applied func() bool, write func() error) error {
	t.Helper()
	// A call answered: the connection is up, its setup counted before.
	if _, err := r.s.GetCIDR(ctx, "warm-up"); !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	r.px.HoldRepliesFromCall(call)
	done := make(chan error, 1)
	go func() { done <- write() }()
	deadline := time.Now().Add(30 * time.Second)
	for !applied() {
		select {
		case err := <-done:
			r.px.ReleaseReplies()
			t.Fatalf("the write returned before etcd applied it: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("etcd did not apply the write within 30 s")
		}
	}
	r.px.Pause()
	r.px.ReleaseReplies() // into the connections cut
	err := <-done
	r.px.Resume()
	return err
}

// A create etcd applied whose answer was lost, and which the read-back
// could not confirm (the client reaches no member any more), fails with an
// error matching store.ErrOutcomeUnknown, and its cause; the record exists.
func TestALostCreateAnswerIsOutcomeUnknown(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	r := newLostRig(t, "/lost-create")
	exists := func(a netip.Addr) func() bool {
		return func() bool { _, err := r.other.GetAddress(ctx, a); return err == nil }
	}
	check := func(t *testing.T, a netip.Addr, err error) {
		t.Helper()
		t.Logf("CreateAddresses: %v", err)
		if !errors.Is(err, store.ErrOutcomeUnknown) {
			t.Fatalf("a create whose answer was lost: %v, want an error matching ErrOutcomeUnknown", err)
		}
		if errors.Is(err, store.ErrExists) || errors.Is(err, store.ErrFenced) {
			t.Fatalf("a create whose answer was lost: %v, also matches a refusal", err)
		}
		got, gerr := r.other.GetAddress(ctx, a)
		if gerr != nil || got.Parent != svc("lost") {
			t.Fatalf("after an outcome unknown: %+v, %v; want the record etcd applied", got, gerr)
		}
	}

	t.Run("ctx alive", func(t *testing.T) {
		a := v4(1)
		err := r.lose(t, ctx, 1, exists(a), func() error {
			_, err := r.s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: a, Parent: svc("lost")}})
			return err
		})
		check(t, a, err)
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			t.Errorf("ctx alive: %v, matches a ctx error", err)
		}
	})

	// The caller's ctx ends while the answer is held: the error says so
	// as well. (Canceled once etcd applied the create: a deadline could
	// pass before it is sent, on a loaded machine.)
	t.Run("ctx ended in flight", func(t *testing.T) {
		a := v4(2)
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		err := r.lose(t, ctx, 1, func() bool {
			if !exists(a)() {
				return false
			}
			cancel()
			return true
		}, func() error {
			_, err := r.s.CreateAddresses(cctx, []ipaddress.IPAddress{{Addr: a, Parent: svc("lost")}})
			return err
		})
		check(t, a, err)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("ctx ended in flight: %v, want an error matching context.Canceled too", err)
		}
	})
}

// An allocation whose create's answer was lost is not tried again with
// another address: the caller gets an error matching
// store.ErrOutcomeUnknown, and the owner holds one record, the one etcd
// applied.
func TestALostAllocationIsOutcomeUnknownAndNotRetried(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	r := newLostRig(t, "/lost-alloc")
	if _, err := r.other.CreateCIDR(ctx, cidrset.CIDR{Name: "kubernetes", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/24")}}); err != nil {
		t.Fatal(err)
	}
	a, err := allocator.New(ctx, r.s)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	owner := svc("lost")
	held := func() []ipaddress.IPAddress {
		all, err := r.other.ListAddresses(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return all
	}
	var rec ipaddress.IPAddress
	err = r.lose(t, ctx, 1, func() bool { return len(held()) > 0 }, func() error {
		var err error
		rec, err = a.AllocateNext(ctx, ipaddress.IPv4, owner)
		return err
	})
	if !errors.Is(err, store.ErrOutcomeUnknown) {
		t.Fatalf("AllocateNext whose create's answer was lost: %+v, %v; want an error matching ErrOutcomeUnknown", rec, err)
	}
	if rec.Addr.IsValid() {
		t.Errorf("AllocateNext failed with %v, yet returned %+v", err, rec)
	}
	if all := held(); len(all) != 1 || all[0].Parent != owner {
		t.Fatalf("after AllocateNext's outcome unknown, the records are %+v, want the one etcd applied, %v's", all, owner)
	}
}

// A create etcd refused (its address taken) whose reason could not be read
// (the answer to that read lost) was not applied: its error does not match
// store.ErrOutcomeUnknown.
func TestARefusedCreateWhoseReasonIsLostIsNotOutcomeUnknown(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	r := newLostRig(t, "/lost-why")
	mustCreate(t, ctx, r.other, v4(1))
	// The create is the first call, answered; the read of why it was
	// refused the second, whose answer is lost.
	err := r.lose(t, ctx, 2, r.px.Holding, func() error {
		_, err := r.s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: v4(1), Parent: svc("late")}})
		return err
	})
	t.Logf("CreateAddresses: %v", err)
	if err == nil || errors.Is(err, store.ErrOutcomeUnknown) || errors.Is(err, store.ErrExists) {
		t.Fatalf("a refused create whose reason was lost: %v, want an error matching neither ErrOutcomeUnknown nor ErrExists", err)
	}
	if got, err := r.other.GetAddress(ctx, v4(1)); err != nil || got.Parent == svc("late") {
		t.Fatalf("after the refused create: %+v, %v", got, err)
	}
}

// Every other write whose answer was lost fails with an error matching
// store.ErrOutcomeUnknown: none is read back. Each was applied.
func TestLostWriteAnswersAreOutcomeUnknown(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	r := newLostRig(t, "/lost-writes")
	cidr := func(name, prefix string) cidrset.CIDR {
		c, err := r.other.CreateCIDR(ctx, cidrset.CIDR{Name: name, Prefixes: []netip.Prefix{netip.MustParsePrefix(prefix)}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	record := func(a netip.Addr) ipaddress.IPAddress {
		recs, err := r.other.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: a, Parent: svc("old")}})
		if err != nil {
			t.Fatal(err)
		}
		return recs[0]
	}
	cidrIs := func(name string, want func(cidrset.CIDR, error) bool) func() bool {
		return func() bool { return want(r.other.GetCIDR(ctx, name)) }
	}
	addrIs := func(a netip.Addr, want func(ipaddress.IPAddress, error) bool) func() bool {
		return func() bool { return want(r.other.GetAddress(ctx, a)) }
	}
	updated, deleted := cidr("updated", "10.2.0.0/24"), cidr("deleted", "10.3.0.0/24")
	updated.Terminating = true
	del, delAt, replaced := record(v4(1)), record(v4(2)), record(v4(3))
	gone := func(_ ipaddress.IPAddress, err error) bool { return errors.Is(err, store.ErrNotFound) }
	for _, tc := range []struct {
		name string
		// call is the rank of the write's transaction among its calls: a
		// write that reads first sends it second.
		call    int
		write   func() error
		applied func() bool
	}{
		{"CreateCIDR", 1, func() error {
			_, err := r.s.CreateCIDR(ctx, cidrset.CIDR{Name: "created", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24")}})
			return err
		}, cidrIs("created", func(_ cidrset.CIDR, err error) bool { return err == nil })},
		{"UpdateCIDR", 2, func() error { _, err := r.s.UpdateCIDR(ctx, updated); return err },
			cidrIs("updated", func(c cidrset.CIDR, err error) bool { return err == nil && c.Terminating })},
		{"DeleteCIDR", 1, func() error { return r.s.DeleteCIDR(ctx, "deleted", deleted.Revision) },
			cidrIs("deleted", func(_ cidrset.CIDR, err error) bool { return errors.Is(err, store.ErrNotFound) })},
		{"DeleteAddress", 2, func() error { _, _, err := r.s.DeleteAddress(ctx, del.Addr); return err }, addrIs(del.Addr, gone)},
		{"DeleteAddressAt", 2, func() error { _, _, err := r.s.DeleteAddressAt(ctx, delAt.Addr, delAt.Revision); return err }, addrIs(delAt.Addr, gone)},
		{"ReplaceAddressAt", 2, func() error {
			_, err := r.s.ReplaceAddressAt(ctx, ipaddress.IPAddress{Addr: replaced.Addr, Parent: svc("heir")}, replaced.Revision)
			return err
		}, addrIs(replaced.Addr, func(rec ipaddress.IPAddress, err error) bool { return err == nil && rec.Parent == svc("heir") })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := r.lose(t, ctx, tc.call, tc.applied, tc.write)
			t.Logf("%s: %v", tc.name, err)
			if !errors.Is(err, store.ErrOutcomeUnknown) {
				t.Fatalf("%s whose answer was lost: %v, want an error matching ErrOutcomeUnknown", tc.name, err)
			}
		})
	}
}

// A write etcd refused in a way that shows it was not applied fails with
// the refusal, typed, and not with store.ErrOutcomeUnknown: a check of
// the request before it is proposed (too many operations, too large), or
// one made as its entry is applied (permission denied).
func TestARefusedWriteIsNotOutcomeUnknown(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	refused := func(t *testing.T, s, other *Store, what string, want error, err error, left ...netip.Addr) {
		t.Helper()
		t.Logf("%s: %v", what, err)
		if !errors.Is(err, want) || errors.Is(err, store.ErrOutcomeUnknown) {
			t.Errorf("%s: %v, want an error matching %v and not ErrOutcomeUnknown", what, err, want)
		}
		for _, a := range left {
			if _, err := other.GetAddress(ctx, a); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("%s was refused, yet %s: %v", what, a, err)
			}
		}
	}

	t.Run("checks before proposing", func(t *testing.T) {
		c := startCluster(t, 1, func(cfg *embed.Config) {
			cfg.MaxTxnOps = 4
			cfg.MaxRequestBytes = 4096
		})
		s, err := New(c.newClient(t), WithPrefix("/refused"))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var recs []ipaddress.IPAddress
		for i := range 5 {
			recs = append(recs, ipaddress.IPAddress{Addr: v4(i + 1), Parent: svc("many")})
		}
		_, err = s.CreateAddresses(ctx, recs)
		refused(t, s, s, "a create of 5 puts, 4 allowed", rpctypes.ErrTooManyOps, err, v4(1))
		batchTooLarge(t, "a create of 5 puts, 4 allowed", err, 5)
		_, err = s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: v4(9), Parent: svc(strings.Repeat("x", 8192))}})
		refused(t, s, s, "a create of 8 KiB, 4 KiB allowed", rpctypes.ErrRequestTooLarge, err, v4(9))
		batchTooLarge(t, "a create of 8 KiB, 4 KiB allowed", err, 1)
		// The same store writes what etcd takes.
		mustCreate(t, ctx, s, v4(10))
	})

	// gRPC refuses a message past its size limit before sending it (the
	// client's) or reading it (the server's): never proposed, so not
	// unknown.
	t.Run("gRPC's size limits", func(t *testing.T) {
		c := startCluster(t, 1)
		cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), MaxCallSendMsgSize: 4096, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cli.Close() })
		s, err := New(cli, WithPrefix("/refused-grpc"))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		_, err = s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: v4(9), Parent: svc(strings.Repeat("x", 8192))}})
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("a create of 8 KiB past a 4 KiB send limit: %v, want gRPC's ResourceExhausted", err)
		}
		refused(t, s, s, "a create of 8 KiB past a 4 KiB send limit", err, err, v4(9))
		batchTooLarge(t, "a create of 8 KiB past a 4 KiB send limit", err, 1)
		mustCreate(t, ctx, s, v4(10))
	})

	t.Run("permission denied", func(t *testing.T) {
		c := startCluster(t, 1)
		root := c.newClient(t)
		const prefix = "/refused-auth"
		for _, step := range []func() error{
			func() error { _, err := root.RoleAdd(ctx, "root"); return err },
			func() error { _, err := root.UserAdd(ctx, "root", "root-pw"); return err },
			func() error { _, err := root.UserGrantRole(ctx, "root", "root"); return err },
			func() error { _, err := root.RoleAdd(ctx, "reader"); return err },
			func() error {
				_, err := root.RoleGrantPermission(ctx, "reader", prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermRead))
				return err
			},
			func() error { _, err := root.UserAdd(ctx, "reader", "reader-pw"); return err },
			func() error { _, err := root.UserGrantRole(ctx, "reader", "reader"); return err },
			func() error { _, err := root.AuthEnable(ctx); return err },
		} {
			if err := step(); err != nil {
				t.Fatalf("enabling auth: %v", err)
			}
		}
		client := func(user, password string) *clientv3.Client {
			cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), Username: user, Password: password, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cli.Close() })
			return cli
		}
		admin, err := New(client("root", "root-pw"), WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close()
		s, err := New(client("reader", "reader-pw"), WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		mustCreate(t, ctx, admin, v4(1))
		_, err = s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: v4(2), Parent: svc("reader")}})
		refused(t, s, admin, "a create by a user who may only read", rpctypes.ErrPermissionDenied, err, v4(2))
		_, _, err = s.DeleteAddress(ctx, v4(1)) // reads the record, then is refused
		refused(t, s, admin, "a delete by a user who may only read", rpctypes.ErrPermissionDenied, err)
		if _, err := admin.GetAddress(ctx, v4(1)); err != nil {
			t.Errorf("a refused delete: the record reads %v", err)
		}
	})
}
