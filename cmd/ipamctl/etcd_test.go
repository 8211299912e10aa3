package main

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// startEtcd starts one embedded etcd member on loopback for the test and
// returns its client endpoint as host:port.
func startEtcd(t *testing.T) string {
	t.Helper()
	var ports [2]int
	var ls []net.Listener
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	for _, l := range ls { // hold both until both are chosen, then free them for etcd
		l.Close()
	}
	client := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[0])}
	peer := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[1])}
	cfg := embed.NewConfig()
	cfg.Name = "ipamctl-test"
	cfg.Dir = t.TempDir()
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	cfg.LogLevel = "fatal"
	cfg.UnsafeNoFsync = true
	return startEmbedded(t, cfg, client.Host)
}

func startEmbedded(t *testing.T, cfg *embed.Config, host string) string {
	t.Helper()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("starting etcd: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatalf("etcd: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("etcd not ready after 60s")
	}
	return host
}

// The same walkthrough against etcd: two ipamctl processes' worth of
// commands share the cluster, and a second key prefix shares nothing.
func TestWalkthroughAgainstEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	ep := startEtcd(t)
	c := &cli{t: t, store: []string{"--etcd", ep + ",", "--etcd-prefix", "/ipamctl-test"}}
	c.ok("cidr", "create", "kubernetes", "10.96.0.0/28")
	c.ok("ip", "allocate", "10.96.0.1", "--parent", "services/default/kubernetes")
	for i := range 13 {
		c.allocateNext(fmt.Sprintf("services/default/svc-%d", i))
	}
	c.fail(exitFull, "range is full", "ip", "allocate", "--family", "4", "--parent", "services/default/svc-14")
	c.ok("cidr", "create", "newcidr1", "192.96.0.0/24")
	a := c.allocateNext("services/default/new")
	if !strings.HasPrefix(a.String(), "192.96.0.") {
		t.Fatalf("allocation after newcidr1: %s", a)
	}
	r := c.run("cidr", "delete", "newcidr1")
	if r.code != exitPending || !strings.Contains(r.stdout, "Terminating") {
		t.Fatalf("cidr delete: %+v", r)
	}
	c.ok("ip", "release", a.String())
	c.fail(exitNotFound, "not found", "cidr", "get", "newcidr1")

	other := &cli{t: t, store: []string{"--etcd", ep, "--etcd-prefix", "/elsewhere"}}
	var cidrs list[cidrObject]
	other.json(&cidrs, "cidr", "get")
	if len(cidrs.Items) != 0 {
		t.Errorf("another prefix sees %v", cidrs.Items)
	}
}

// An endpoint nobody answers on is said to be so, naming it, within the
// 5 s ipamctl gives etcd to answer, not at --timeout as a read timing out.
func TestAnEtcdNobodyAnswersOnIsNamed(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // a free port nothing listens on
	c := &cli{t: t, store: []string{"--etcd", addr}}
	start := time.Now()
	r := c.fail(exitError, "does not answer", "cidr", "get")
	if !strings.Contains(r.stderr, addr) || strings.Contains(r.stderr, "see --timeout") {
		t.Errorf("stderr %q: want the endpoint named, not a --timeout", r.stderr)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("took %v to say etcd does not answer", took)
	}
	c.fail(exitUsage, "inside another store's records", "cidr", "get", "--etcd-prefix", "/netipam/v1/cidrs/x")

	// A member down among the endpoints costs nothing: the others answer.
	live := startEtcd(t)
	start = time.Now()
	(&cli{t: t, store: []string{"--etcd", addr + "," + live}}).ok("cidr", "get")
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("with the first endpoint down, took %v", took)
	}
}
