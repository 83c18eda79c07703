// Package etcdconn is what the etcd adapters (etcd, etcdmutex) share: their
// client, and the error of an expired lease.
package etcdconn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/locksuite/locksuite/internal/redact"
)

// New returns package pkg's client of endpoints (host:port or URLs) with
// TLS t and user (if not nil and not empty), every connection made by dial
// (if not nil), a 2 s dial timeout, and no logging. It connects lazily.
func New(pkg string, endpoints []string, t *tls.Config, user, password string, dial func(ctx context.Context, network, address string) (net.Conn, error)) (*clientv3.Client, error) {
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("%s: no server: set Config.Client or Config.Endpoints", pkg)
	}
	cc := clientv3.Config{Endpoints: endpoints, DialTimeout: 2 * time.Second, Logger: zap.NewNop(), TLS: t, Username: user, Password: password}
	if dial != nil {
		cc.DialOptions = []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return dial(ctx, "tcp", addr)
		})}
	}
	c, err := clientv3.New(cc)
	if err != nil {
		return nil, fmt.Errorf("%s: connect %v: %w", pkg, endpoints, redact.Error(err, password))
	}
	return c, nil
}

// LeaseNotFound reports whether err is etcd's "requested lease not found":
// the lease expired (a client stalled while it waited) or was revoked.
func LeaseNotFound(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound) || rpctypes.ErrorDesc(err) == rpctypes.ErrLeaseNotFound.Error()
}
