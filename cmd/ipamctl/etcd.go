package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/etcd"
)

// openEtcd connects to the etcd endpoints (host:port or URLs) and returns
// the store over them; closing the store closes the client.
func openEtcd(ctx context.Context, eps []string, prefix string, log *slog.Logger) (store.Store, error) {
	log.Debug("connecting to etcd", "endpoints", eps)
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: eps,
		Context:   ctx,
		Logger:    zap.NewNop(), // the client logs nothing; -v logs what ipamctl does
	})
	if err != nil {
		return nil, err
	}
	opts := []etcd.Option{etcd.WithCloseClient()}
	if prefix != "" {
		opts = append(opts, etcd.WithPrefix(prefix))
	}
	s, err := etcd.New(cli, opts...)
	if err != nil { // the prefix: New reads nothing from etcd
		cli.Close()
		return nil, usageErrorf("--etcd-prefix %q: %v", prefix, err)
	}
	// The client connects lazily: without this, an endpoint nobody
	// answers on would show only as the first read timing out at
	// --timeout, naming neither etcd nor the endpoint.
	if err := reachable(ctx, cli, eps); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// etcdDialTimeout bounds how long ipamctl waits for some endpoint to
// answer before it says none does.
const etcdDialTimeout = 5 * time.Second

// reachable returns nil once one of the endpoints answers, or an error
// naming them all after etcdDialTimeout (or when ctx ends).
func reachable(ctx context.Context, cli *clientv3.Client, eps []string) error {
	pctx, cancel := context.WithTimeout(ctx, etcdDialTimeout)
	defer cancel()
	// All at once: the client waits for a connection rather than fail
	// fast, so one endpoint that does not answer would use up the time of
	// the others.
	answers := make(chan error, len(eps))
	for _, ep := range eps {
		go func() {
			_, err := cli.Status(pctx, ep)
			answers <- err
		}()
	}
	var last error
	for range eps {
		if last = <-answers; last == nil {
			return nil
		}
	}
	if ctx.Err() != nil {
		return fmt.Errorf("connecting to etcd at %s: %w", strings.Join(eps, ", "), ctx.Err())
	}
	// %v: the probe's own deadline is not --timeout's.
	return fmt.Errorf("etcd at %s does not answer within %v: %v", strings.Join(eps, ", "), etcdDialTimeout, last)
}
