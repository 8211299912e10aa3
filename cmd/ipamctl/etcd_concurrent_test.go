package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// ip allocate --ensure run by several processes at once for one owner, as
// a setup retried on several hosts: every run prints the same pair, and
// the owner holds that pair only.
func TestConcurrentEnsureOverEtcdGivesAnOwnerOnePair(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	ep := startEtcd(t)
	c := &cli{t: t, store: []string{"--etcd", ep, "--etcd-prefix", "/ensure"}}
	c.ok("cidr", "create", "pods", "10.244.0.0/24", "fd00:244::/120")
	const owners, runs = 3, 4
	var wg sync.WaitGroup
	results := make([][runs]result, owners)
	for o := range owners {
		for i := range runs {
			wg.Go(func() {
				results[o][i] = c.run("ip", "allocate", "--family", "dual", "--ensure", "--parent", fmt.Sprintf("pods/default/p%d", o), "-o", "json", "--timeout", "60s")
			})
		}
	}
	wg.Wait()
	for o := range owners {
		var want []string
		for i, r := range results[o] {
			var pair list[ipObject]
			if r.code != 0 || json.Unmarshal([]byte(r.stdout), &pair) != nil || len(pair.Items) != 2 {
				t.Fatalf("p%d, run %d: exit %d: %s%s", o, i, r.code, r.stdout, r.stderr)
			}
			got := []string{pair.Items[0].Name, pair.Items[1].Name}
			if want == nil {
				want = got
			} else if !slices.Equal(got, want) {
				t.Errorf("p%d: one run printed %v, another %v", o, want, got)
			}
		}
		var held list[ipObject]
		c.json(&held, "ip", "get", "--parent", fmt.Sprintf("pods/default/p%d", o))
		if len(held.Items) != 2 || held.Items[0].Name != want[0] || held.Items[1].Name != want[1] {
			t.Errorf("p%d holds %+v, want %v only", o, held.Items, want)
		}
	}
}

// ipamctl processes allocating at once over one etcd never give one
// address twice: of more requests than the CIDRs hold, exactly as many
// succeed as there are addresses, each a different one, the others are
// told the range is full (exit 5), and the store holds exactly the
// addresses reported. Static requests for one address race too: one wins,
// the others exit 4.
func TestConcurrentIpamctlOverEtcdNeverDoubleAllocate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	ep := startEtcd(t)
	c := &cli{t: t, store: []string{"--etcd", ep, "--etcd-prefix", "/concurrent"}}
	c.ok("cidr", "create", "kubernetes", "10.96.0.0/28")
	c.ok("cidr", "create", "overlap", "10.96.0.0/29") // merged: no address twice across both
	const n = 20                                      // 14 addresses
	var wg sync.WaitGroup
	results := make([]result, n)
	for i := range n {
		wg.Go(func() {
			results[i] = c.run("ip", "allocate", "--family", "4", "--parent", fmt.Sprintf("services/default/svc-%d", i), "-o", "json", "--timeout", "60s")
		})
	}
	wg.Wait()
	got := map[string]int{}
	full := 0
	for i, r := range results {
		switch r.code {
		case 0:
			var o ipObject
			if err := json.Unmarshal([]byte(r.stdout), &o); err != nil {
				t.Fatalf("svc-%d: %v: %s", i, err, r.stdout)
			}
			if prev, dup := got[o.Name]; dup {
				t.Errorf("%s given to svc-%d and svc-%d", o.Name, prev, i)
			}
			got[o.Name] = i
		case exitFull:
			full++
		default:
			t.Errorf("svc-%d: exit %d: %s%s", i, r.code, r.stdout, r.stderr)
		}
	}
	if len(got) != 14 || full != n-14 {
		t.Errorf("%d allocated, %d full; want 14 and %d", len(got), full, n-14)
	}
	var recs list[ipObject]
	c.json(&recs, "ip", "get")
	if len(recs.Items) != len(got) {
		t.Errorf("store holds %d records, %d were reported", len(recs.Items), len(got))
	}
	for _, r := range recs.Items {
		i, ok := got[r.Name]
		if want := fmt.Sprintf("services/default/svc-%d", i); !ok || r.ParentRef.Resource+"/"+r.ParentRef.Namespace+"/"+r.ParentRef.Name != want {
			t.Errorf("record %s of %s, reported to svc-%d (%v)", r.Name, r.ParentRef, i, ok)
		}
	}

	c.ok("cidr", "create", "static", "10.97.0.0/24")
	codes := make([]int, 8)
	for i := range codes {
		wg.Go(func() {
			codes[i] = c.run("ip", "allocate", "10.97.0.7", "--parent", fmt.Sprintf("services/default/st-%d", i)).code
		})
	}
	wg.Wait()
	won := 0
	for _, code := range codes {
		switch code {
		case 0:
			won++
		case exitConflict:
		default:
			t.Errorf("static race: exit %d", code)
		}
	}
	if won != 1 {
		t.Errorf("static race: %d won (codes %v)", won, codes)
	}
}

// The ways of misnaming etcd end with the documented code and a message
// saying what was wrong, within --timeout (plus the dial's 5 s where it
// is shorter), never a hang or a panic.
func TestEtcdMisuseEndsWithItsCodeAndAMessage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	ep := startEtcd(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// A port that accepts connections and says nothing: an etcd hung.
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { conn.Close() })
		}
	}()
	silent := l.Addr().String()
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.txt")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"silent endpoint", []string{"--etcd", silent, "--timeout", "20s", "cidr", "get"}, exitError, silent},
		{"silent endpoint, short timeout", []string{"--etcd", silent, "--timeout", "2s", "ip", "allocate", "--family", "4", "--parent", "services/default/x"}, exitError, "timeout"},
		{"plain to TLS-less with cacert", []string{"--etcd", ep, "--etcd-cacert", notPEM, "cidr", "get"}, exitUsage, "holds no certificate"},
		{"cert without key", []string{"--etcd", ep, "--etcd-cert", notPEM, "cidr", "get"}, exitUsage, "go together"},
		{"missing cacert file", []string{"--etcd", ep, "--etcd-cacert", filepath.Join(dir, "nope.pem"), "cidr", "get"}, exitUsage, "nope.pem"},
		{"https to a plain etcd", []string{"--etcd", "https://" + ep, "--timeout", "20s", "cidr", "get"}, exitError, ep},
		{"empty prefix", []string{"--etcd", ep, "--etcd-prefix", "", "cidr", "get"}, exitUsage, "--etcd-prefix"},
		{"prefix inside records", []string{"--etcd", ep, "--etcd-prefix", "/netipam/v1/ips", "cidr", "get"}, exitUsage, "--etcd-prefix"},
		{"etcd and db", []string{"--etcd", ep, "--db", filepath.Join(dir, "x.db"), "cidr", "get"}, exitUsage, "--db"},
		{"etcd flags without etcd", []string{"--db", filepath.Join(dir, "x.db"), "--etcd-prefix", "/p", "cidr", "get"}, exitUsage, "--etcd"},
		{"user with empty password", []string{"--etcd", ep, "--etcd-user", "root:", "cidr", "get"}, exitUsage, "empty password"},
		{"auth on an etcd without auth", []string{"--etcd", ep, "--etcd-user", "root:pw", "cidr", "get"}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			r := (&cli{t: t}).run(tc.args...)
			took := time.Since(start)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("exit %d, want %d naming %q\nstdout: %s\nstderr: %s", r.code, tc.code, tc.want, r.stdout, r.stderr)
			}
			if strings.Contains(r.stderr, "panic") || strings.Contains(r.stderr, "goroutine ") {
				t.Errorf("panicked: %s", r.stderr)
			}
			if took > 2*time.Minute { // a hang, not a speed target
				t.Errorf("took %v", took)
			}
			t.Logf("exit %d in %v: %s", r.code, took.Round(time.Millisecond), strings.TrimSpace(r.stderr))
		})
	}
}

// startPair starts a two-member etcd cluster on loopback and returns the
// functions that stop each member (Cleanup stops them too) and the
// members' client host:port.
func startPair(t *testing.T) (closers []func(), hosts []string) {
	t.Helper()
	// Every listener stays open until all four ports are picked, so that
	// no two are one.
	var clients, peers []url.URL
	var held []net.Listener
	for range 2 {
		for _, to := range []*[]url.URL{&clients, &peers} {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, l)
			*to = append(*to, url.URL{Scheme: "http", Host: l.Addr().String()})
		}
	}
	for _, l := range held {
		l.Close()
	}
	initial := "m0=" + peers[0].String() + ",m1=" + peers[1].String()
	started := make(chan *embed.Etcd, 2)
	for i := range 2 {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = t.TempDir()
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = clients[i:i+1], clients[i:i+1]
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = peers[i:i+1], peers[i:i+1]
		cfg.InitialCluster = initial
		cfg.InitialClusterToken = "ipamctl-pair"
		cfg.LogLevel = "fatal"
		cfg.UnsafeNoFsync = true
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			t.Fatal(err)
		}
		closeOnce := sync.OnceFunc(e.Close)
		t.Cleanup(closeOnce)
		closers = append(closers, closeOnce)
		hosts = append(hosts, clients[i].Host)
		go func() { <-e.Server.ReadyNotify(); started <- e }()
	}
	for range 2 {
		select {
		case <-started:
		case <-time.After(60 * time.Second):
			t.Fatal("etcd pair not ready after 60s")
		}
	}
	return closers, hosts
}

// An etcd member that answers but has lost its quorum (the other member
// of two stopped) serves no read and no write: every command ends within
// --timeout (an allocation within 5 s more, to learn what became of its
// write), exit 1 or, for a write sent, 7, saying it timed out; none hangs.
func TestAnEtcdWithoutQuorumEndsEveryCommandAtTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	es, hosts := startPair(t)
	c := &cli{t: t, store: []string{"--etcd", hosts[0], "--etcd-prefix", "/quorum"}}
	c.ok("cidr", "create", "kubernetes", "10.96.0.0/28")
	c.ok("ip", "allocate", "10.96.0.1", "--parent", "services/default/kubernetes")
	es[1]()
	for _, args := range [][]string{
		{"cidr", "get"},
		{"usage"},
		{"ip", "get"},
		{"ip", "allocate", "--family", "4", "--parent", "services/default/x"},
		{"ip", "allocate", "10.96.0.5", "--parent", "services/default/y"},
		{"ip", "release", "10.96.0.1"},
		{"cidr", "create", "other", "10.97.0.0/24"},
		{"cidr", "delete", "kubernetes"},
	} {
		start := time.Now()
		r := c.run(append(args, "--timeout", "3s")...)
		took := time.Since(start)
		t.Logf("%s: exit %d in %v: %s", strings.Join(args, " "), r.code, took.Round(time.Millisecond), strings.TrimSpace(r.stderr))
		if r.code != exitError && r.code != exitUnknown {
			t.Errorf("%s: exit %d, want 1 or 7\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
		if !strings.Contains(r.stderr, "timed out") && !strings.Contains(r.stderr, "timeout") {
			t.Errorf("%s: stderr %q does not say it timed out", strings.Join(args, " "), r.stderr)
		}
		// A hang, not a speed target: 20 times --timeout, so that a
		// loaded machine cannot fail it.
		if took > time.Minute {
			t.Errorf("%s: took %v with --timeout 3s", strings.Join(args, " "), took)
		}
	}
}

// ipamctl processes deleting a CIDR and allocating in it at once over one
// etcd never leave an address outside every live CIDR: either the
// allocation is refused and the CIDR goes, or the address is held and the
// CIDR stays, Terminating, until it is released.
func TestConcurrentDeleteAndAllocateOverEtcdOrphanNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	ep := startEtcd(t)
	c := &cli{t: t, store: []string{"--etcd", ep, "--etcd-prefix", "/delete-race"}}
	outcomes := map[string]int{}
	for i := range 12 {
		c.ok("cidr", "create", "x", "10.50.0.0/28")
		var del, alloc result
		var wg sync.WaitGroup
		wg.Go(func() { del = c.run("cidr", "delete", "x") })
		wg.Go(func() {
			alloc = c.run("ip", "allocate", "--family", "4", "--parent", fmt.Sprintf("services/default/r-%d", i), "-o", "json")
		})
		wg.Wait()
		outcomes[fmt.Sprintf("delete %d, allocate %d", del.code, alloc.code)]++
		var recs list[ipObject]
		c.json(&recs, "ip", "get")
		cidr := c.run("cidr", "get", "x", "-o", "json")
		switch {
		case alloc.code == 0 && (del.code != exitPending || len(recs.Items) != 1 || cidr.code != 0 || !strings.Contains(cidr.stdout, `"terminating": true`)):
			t.Fatalf("round %d: allocated, yet delete exit %d, %d records, cidr get exit %d: %s%s", i, del.code, len(recs.Items), cidr.code, cidr.stdout, del.stderr)
		case alloc.code != 0 && (del.code != 0 || len(recs.Items) != 0 || cidr.code != exitNotFound):
			t.Fatalf("round %d: allocate exit %d (%s), delete exit %d, %d records, cidr get exit %d", i, alloc.code, alloc.stderr, del.code, len(recs.Items), cidr.code)
		}
		if alloc.code == 0 {
			c.ok("ip", "release", recs.Items[0].Name)
			c.fail(exitNotFound, "not found", "cidr", "get", "x")
		}
	}
	t.Logf("outcomes: %v", outcomes)
}
