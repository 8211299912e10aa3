package etcd

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/netipam/netipam/store"
)

// testCluster is an etcd cluster of embedded members on loopback, each with
// its own temporary data directory, for one test.
type testCluster struct {
	t       testing.TB
	token   string
	initial string // the initial-cluster string
	members []*testMember
	opts    []func(*embed.Config)
}

type testMember struct {
	name   string
	dir    string
	client url.URL
	peer   url.URL
	mu     sync.Mutex
	etcd   *embed.Etcd // nil while stopped
}

// freePorts returns n distinct free loopback ports: it holds a listener on
// each until it has them all, then closes them. Where the kernel says which
// ports it hands out itself (Linux), they are taken below that range: no
// outgoing connection's local port and no listener on port 0 lands there,
// so a member stopped and started again (Restart) finds its ports free,
// however many clients the other tests open meanwhile.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	low := ephemeralLow()
	for tries := 0; len(ports) < n; tries++ {
		addr := "127.0.0.1:0"
		if low > minTestPort {
			addr = fmt.Sprintf("127.0.0.1:%d", minTestPort+rand.IntN(low-minTestPort))
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if addr != "127.0.0.1:0" && tries < 1000 {
				continue // taken: draw another
			}
			t.Fatalf("free port: %v", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// minTestPort is the lowest port freePorts takes below the ephemeral range:
// clear of the well-known and most registered services' ports.
const minTestPort = 20000

// ephemeralLow returns the first port of the range the kernel hands out to
// outgoing connections and port-0 listeners, 0 where it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	low, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return low
}

// startCluster starts n members concurrently (each waits for a quorum) and
// stops them when the test ends. Members fsync (etcd's default); opts may
// change each member's configuration.
func startCluster(t testing.TB, n int, opts ...func(*embed.Config)) *testCluster {
	t.Helper()
	c := &testCluster{t: t, token: fmt.Sprintf("netipam-%d", time.Now().UnixNano()), opts: opts}
	ports := freePorts(t, 2*n)
	var initial []string
	for i := range n {
		m := &testMember{
			name:   fmt.Sprintf("m%d", i),
			dir:    t.TempDir(),
			client: url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i])},
			peer:   url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])},
		}
		c.members = append(c.members, m)
		initial = append(initial, m.name+"="+m.peer.String())
	}
	c.initial = strings.Join(initial, ",")
	t.Cleanup(c.stopAll)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = c.start(i) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("starting member %d: %v", i, err)
		}
	}
	return c
}

func (c *testCluster) config(m *testMember) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	// bcrypt's least cost (bcrypt.MinCost): each authentication hashes
	// the password, which at the default cost takes seconds of a loaded
	// machine's CPU under -race, past the tests' dial timeouts.
	cfg.BcryptCost = 4
	cfg.ListenClientUrls = []url.URL{m.client}
	cfg.AdvertiseClientUrls = []url.URL{m.client}
	cfg.ListenPeerUrls = []url.URL{m.peer}
	cfg.AdvertisePeerUrls = []url.URL{m.peer}
	cfg.InitialCluster = c.initial
	cfg.InitialClusterToken = c.token
	cfg.ClusterState = embed.ClusterStateFlagNew
	cfg.LogLevel = "fatal"
	cfg.EnableGRPCGateway = false
	for _, o := range c.opts {
		o(cfg)
	}
	return cfg
}

// start starts member i (again) with its data directory and ports, and
// waits until it is ready.
func (c *testCluster) start(i int) error {
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.etcd != nil {
		return nil
	}
	e, err := embed.StartEtcd(c.config(m))
	if err != nil {
		return err
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return err
	case <-time.After(60 * time.Second):
		e.Close()
		return fmt.Errorf("member %s not ready after 60s", m.name)
	}
	m.etcd = e
	return nil
}

// Endpoints returns every member's client URL.
func (c *testCluster) Endpoints() []string {
	out := make([]string, len(c.members))
	for i, m := range c.members {
		out[i] = m.client.String()
	}
	return out
}

// Stop stops member i; it keeps its data directory for Restart.
func (c *testCluster) Stop(i int) {
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.etcd != nil {
		m.etcd.Close()
		m.etcd = nil
	}
}

// Restart starts a stopped member i again.
func (c *testCluster) Restart(i int) {
	c.t.Helper()
	if err := c.start(i); err != nil {
		c.t.Fatalf("restarting member %d: %v", i, err)
	}
}

// Member returns the running embedded member i, nil while stopped.
func (c *testCluster) Member(i int) *embed.Etcd {
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.etcd
}

func (c *testCluster) stopAll() {
	for i := range c.members {
		c.Stop(i)
	}
}

// newClient returns a client of endpoints (every member's when none are
// given), closed when the test ends.
func (c *testCluster) newClient(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	if len(endpoints) == 0 {
		endpoints = c.Endpoints()
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// twoStores returns two stores under prefix, each over a client of its
// own, as two processes sharing c, and what closes both.
func (c *testCluster) twoStores(t *testing.T, prefix string) (store.Store, store.Store, func()) {
	t.Helper()
	st1, err := New(c.newClient(t), WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	st2, err := New(c.newClient(t), WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	return st1, st2, func() { st1.Close(); st2.Close() }
}
