// Command etcd-ha shows two allocators, as two control-plane instances would
// run them, sharing one etcd: it starts an embedded etcd member on loopback
// in a temporary directory, gives each allocator its own etcd client and
// store, creates the CIDR 10.96.0.0/28, and lets both allocate from it at
// once until it is full. Every address goes to exactly one instance.
//
// In production give each client every endpoint of the cluster, so it
// survives the loss of a member; here there is one member.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	etcdstore "github.com/netipam/netipam/store/etcd"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "etcd-ha:", err)
		os.Exit(1)
	}
}

// freePorts returns n distinct loopback ports that were free a moment
// ago: each listener stays open until all are picked, so no two are one.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// startEtcd starts one etcd member on loopback with its data in dir.
func startEtcd(dir string) (*embed.Etcd, string, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, "", err
	}
	cport, pport := ports[0], ports[1]
	curl := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", cport)}
	purl := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", pport)}
	cfg := embed.NewConfig()
	cfg.Name = "ha-example"
	cfg.Dir = dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{curl}, []url.URL{curl}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{purl}, []url.URL{purl}
	cfg.InitialCluster = cfg.Name + "=" + purl.String()
	cfg.LogLevel = "fatal"
	cfg.EnableGRPCGateway = false
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", err
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, curl.String(), nil
	case err := <-e.Err():
		e.Close()
		return nil, "", err
	case <-time.After(time.Minute):
		e.Close()
		return nil, "", errors.New("etcd member not ready after a minute")
	}
}

// instance is one allocator with its own client and store.
type instance struct {
	name  string
	cli   *clientv3.Client
	store *etcdstore.Store
	alloc *allocator.Allocator
}

func newInstance(ctx context.Context, name string, endpoints []string) (*instance, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	st, err := etcdstore.New(cli, etcdstore.WithCloseClient())
	if err != nil {
		cli.Close()
		return nil, err
	}
	a, err := allocator.New(ctx, st)
	if err != nil {
		st.Close()
		return nil, err
	}
	return &instance{name: name, cli: cli, store: st, alloc: a}, nil
}

func (in *instance) close() {
	in.alloc.Close()
	in.store.Close()
}

// grant is one address an instance was given.
type grant struct {
	instance string
	addr     netip.Addr
	owner    ipaddress.ParentRef
}

// run is the example; it writes its report to w.
func run(ctx context.Context, w io.Writer) error {
	dir, err := os.MkdirTemp("", "netipam-etcd-ha-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	e, endpoint, err := startEtcd(dir)
	if err != nil {
		return fmt.Errorf("starting etcd: %w", err)
	}
	defer e.Close()
	fmt.Fprintf(w, "etcd member ready at %s\n", endpoint)

	var instances []*instance
	defer func() {
		for _, in := range instances {
			in.close()
		}
	}()
	for _, name := range []string{"apiserver-a", "apiserver-b"} {
		in, err := newInstance(ctx, name, []string{endpoint})
		if err != nil {
			return fmt.Errorf("instance %s: %w", name, err)
		}
		instances = append(instances, in)
	}

	prefix := netip.MustParsePrefix("10.96.0.0/28")
	c, err := instances[0].alloc.CreateCIDR(ctx, "kubernetes", prefix)
	if err != nil {
		return fmt.Errorf("creating CIDR: %w", err)
	}
	// The other instance learns of the CIDR through its watch.
	if err := instances[1].alloc.WaitRevision(ctx, c.Revision); err != nil {
		return err
	}
	fmt.Fprintf(w, "CIDR %s %s created by %s\n", c.Name, prefix, instances[0].name)
	size, _ := cidrset.Size(prefix).Uint64()
	usable := int(size)

	var mu sync.Mutex
	var grants []grant
	var fullErrs []string
	var wg sync.WaitGroup
	errs := make([]error, len(instances))
	for i, in := range instances {
		wg.Go(func() {
			for n := 0; ; n++ {
				owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: fmt.Sprintf("%s-svc-%d", in.name, n)}
				rec, err := in.alloc.AllocateNext(ctx, ipaddress.IPv4, owner)
				if errors.Is(err, allocator.ErrFull) {
					// Nothing is released here: "full" must mean every
					// usable address is held in etcd, not a lost race.
					held, lerr := in.store.ListAddresses(ctx)
					if lerr != nil {
						errs[i] = fmt.Errorf("%s: %w", in.name, lerr)
						return
					}
					if len(held) < usable {
						errs[i] = fmt.Errorf("%s told %q with %d of %d addresses allocated", in.name, err, len(held), usable)
						return
					}
					mu.Lock()
					fullErrs = append(fullErrs, fmt.Sprintf("%s: %v", in.name, err))
					mu.Unlock()
					return
				}
				if err != nil {
					errs[i] = fmt.Errorf("%s: %w", in.name, err)
					return
				}
				mu.Lock()
				grants = append(grants, grant{instance: in.name, addr: rec.Addr, owner: owner})
				fmt.Fprintf(w, "%s got %s for %s\n", in.name, rec.Addr, owner)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	slices.Sort(fullErrs)
	for _, s := range fullErrs {
		fmt.Fprintln(w, s)
	}

	perInstance := map[string]int{}
	owners := map[netip.Addr]grant{}
	collisions := 0
	for _, g := range grants {
		perInstance[g.instance]++
		if prev, ok := owners[g.addr]; ok {
			collisions++
			fmt.Fprintf(w, "COLLISION: %s given to %s and %s\n", g.addr, prev.instance, g.instance)
		}
		owners[g.addr] = g
	}
	// What etcd holds must be what the instances were told: every record
	// an address granted, to the owner it was granted to.
	stored, err := instances[0].store.ListAddresses(ctx)
	if err != nil {
		return err
	}
	mismatches := 0
	for _, r := range stored {
		if g, ok := owners[r.Addr]; !ok || g.owner != r.Parent {
			mismatches++
			fmt.Fprintf(w, "MISMATCH: etcd holds %s for %s, which no instance was told\n", r.Addr, r.Parent)
		}
	}
	for _, in := range instances {
		fmt.Fprintf(w, "%s: %d addresses\n", in.name, perInstance[in.name])
	}
	fmt.Fprintf(w, "total: %d addresses granted, %d distinct, %d records in etcd, %d collisions\n", len(grants), len(owners), len(stored), collisions)
	if collisions > 0 || mismatches > 0 || len(stored) != len(owners) {
		return fmt.Errorf("%d collisions, %d records for %d addresses, %d not as granted", collisions, len(stored), len(owners), mismatches)
	}
	return nil
}
