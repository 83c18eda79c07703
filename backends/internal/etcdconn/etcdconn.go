// Package etcdconn is what the etcd adapters (etcd, etcdmutex) share: their
// client, and the error of an expired lease.
package etcdconn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"sync/atomic"
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

// Conn is an etcd adapter's Locker's connection and lease: the Config's
// Client, or one made from its endpoints that Close closes, and the TTL in
// whole seconds. It gives the Locker its TTL, Expiry and Close.
type Conn struct {
	// C is the client.
	C *clientv3.Client
	// Seconds is the TTL, rounded up to whole seconds as etcd grants them.
	Seconds int64
	// OnClose, if not nil, runs at the first Close, before the client is
	// closed.
	OnClose func()

	own    bool
	closed atomic.Bool
}

// Open returns the Conn of client c if not nil, else of a client made with
// New (which Close closes), and a TTL of ttl rounded up to whole seconds.
func Open(pkg string, c *clientv3.Client, ttl time.Duration, endpoints []string, t *tls.Config, user, password string, dial func(ctx context.Context, network, address string) (net.Conn, error)) (*Conn, error) {
	conn := &Conn{C: c, Seconds: int64(math.Ceil(ttl.Seconds()))}
	if c == nil {
		c, err := New(pkg, endpoints, t, user, password, dial)
		if err != nil {
			return nil, err
		}
		conn.C, conn.own = c, true
	}
	return conn, nil
}

// TTL is the lease's time to live, in whole seconds.
func (c *Conn) TTL() time.Duration { return time.Duration(c.Seconds) * time.Second }

// Expiry is TTL plus the lessor's 500 ms expiry check.
func (c *Conn) Expiry() time.Duration { return c.TTL() + 500*time.Millisecond }

// Closed reports whether Close was called.
func (c *Conn) Closed() bool { return c.closed.Load() }

// Close runs OnClose and closes the client if Open made it. It is
// idempotent.
func (c *Conn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	if c.OnClose != nil {
		c.OnClose()
	}
	if !c.own {
		return nil
	}
	return c.C.Close()
}
