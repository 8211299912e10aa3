package main

import (
	"context"
	"log/slog"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/etcd"
)

// openEtcd connects to the etcd endpoints (host:port or URLs, comma
// separated) and returns the store over them; closing the store closes
// the client.
func openEtcd(ctx context.Context, endpoints, prefix string, log *slog.Logger) (store.Store, error) {
	var eps []string
	for _, ep := range strings.Split(endpoints, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			eps = append(eps, ep)
		}
	}
	if len(eps) == 0 {
		return nil, usageErrorf("--etcd %q: no endpoint", endpoints)
	}
	log.Debug("connecting to etcd", "endpoints", eps)
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   eps,
		DialTimeout: 5 * time.Second,
		Context:     ctx,
		Logger:      zap.NewNop(), // the client logs nothing; -v logs what ipamctl does
	})
	if err != nil {
		return nil, err
	}
	opts := []etcd.Option{etcd.WithCloseClient()}
	if prefix != "" {
		opts = append(opts, etcd.WithPrefix(prefix))
	}
	s, err := etcd.New(cli, opts...)
	if err != nil {
		cli.Close()
		return nil, err
	}
	return s, nil
}
