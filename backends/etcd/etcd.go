// Package etcd is the locksuite adapter for an etcd lease lock: a lease with
// keep-alive, and the lock key put with that lease only if it does not exist
// (a transaction on CreateRevision == 0).
//
// The fencing token is the key's create revision, which etcd's single
// revision counter makes strictly increasing across grants. The lease is
// renewed in the background by the client's keep-alive stream, so a slow
// holder keeps the lock; a holder whose process or network stalls stops
// renewing, and etcd frees the key once the TTL has passed and its lessor
// notices (it checks every 500 ms).
package etcd

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/internal/adapt"
	"github.com/locksuite/locksuite/backends/internal/etcdconn"
)

// Config describes one client of one etcd lock.
type Config struct {
	// Client is the connection to use. If nil, one is made from Endpoints
	// and closed by Locker.Close.
	Client *clientv3.Client
	// Endpoints are host:port addresses or http(s):// URLs (as in
	// ETCDCTL_ENDPOINTS); used when Client is nil.
	Endpoints []string
	// TLS, if not nil, makes the client connect with TLS using this
	// configuration: RootCAs for the server's CA (etcdctl's --cacert),
	// Certificates for a client certificate (--cert, --key). When its
	// ServerName is empty, each endpoint's host is verified; used when
	// Client is nil. Default nil: plain connections, except to https://
	// endpoints (TLS with the system's roots, as clientv3 does).
	TLS *tls.Config
	// Username and Password, if Username is set, authenticate the client
	// (etcdctl's --user user:password); the client takes a token at
	// connect time and renews it; used when Client is nil. Default none.
	Username, Password string
	// Dial, if not nil, makes every connection to the servers (TLS, if any,
	// is layered on top): pass suite.Client.Dial, so that the suite can
	// fault this client's network; used when Client is nil. Default: TCP.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// Key names the lock. Required.
	Key string
	// TTL is the lease's time to live. etcd grants whole seconds: it is
	// rounded up, and the server refuses TTLs below its minimum (1.5 ×
	// election timeout). Default 1s.
	TTL time.Duration
	_   struct{}
}

type locker struct {
	*etcdconn.Conn
	key string
}

// New returns a Locker for cfg. It connects lazily.
func New(cfg Config) (backends.Locker, error) {
	if err := adapt.Check("etcd", cfg.Key, "the lock key", &cfg.TTL, time.Second, 0, ""); err != nil {
		return nil, err
	}
	c, err := etcdconn.Open("etcd", cfg.Client, cfg.TTL, cfg.Endpoints, cfg.TLS, cfg.Username, cfg.Password, cfg.Dial)
	if err != nil {
		return nil, err
	}
	return &locker{Conn: c, key: cfg.Key}, nil
}

// TTL, Expiry (TTL plus the lessor's 500 ms expiry check) and Close are
// etcdconn.Conn's.
var _ backends.TTLer = (*locker)(nil)

// Acquire tries until it holds the lock or ctx is done. A client stalled while
// it waited can find its lease expired ("requested lease not found"): it
// starts over with a new lease.
func (l *locker) Acquire(ctx context.Context) (backends.Lease, error) {
	return adapt.Retry(ctx, l.attempt, etcdconn.LeaseNotFound)
}

func (l *locker) attempt(ctx context.Context) (backends.Lease, error) {
	if l.Closed() {
		return nil, backends.ErrClosed
	}
	wrap := func(err error) error { return adapt.Wrap(ctx, "etcd", "acquire", l.key, err) }
	g, err := l.C.Grant(ctx, l.Seconds)
	if err != nil {
		return nil, wrap(err)
	}
	// The keep-alive outlives Acquire's ctx: it stops at Release or Close.
	kctx, stop := context.WithCancel(context.Background())
	revoke := func() {
		stop()
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, _ = l.C.Revoke(rctx, g.ID)
	}
	ka, err := l.C.KeepAlive(kctx, g.ID)
	if err != nil {
		revoke()
		return nil, wrap(err)
	}
	s := &lease{l: l, id: g.ID, stop: stop}
	go func() {
		for range ka {
		}
		s.lost.Mark()
	}()
	for {
		resp, err := l.C.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(l.key), "=", 0)).
			Then(clientv3.OpPut(l.key, fmt.Sprint(g.ID), clientv3.WithLease(g.ID))).
			Else(clientv3.OpGet(l.key)).
			Commit()
		if err != nil {
			revoke()
			return nil, wrap(err)
		}
		if resp.Succeeded {
			s.rev = resp.Header.Revision
			return s, nil
		}
		// Taken: wait until the holder's key is deleted (release or expiry).
		held := resp.Responses[0].GetResponseRange().Kvs
		if len(held) == 0 {
			continue
		}
		wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := l.C.Watch(wctx, l.key, clientv3.WithRev(held[0].ModRevision+1), clientv3.WithFilterPut())
	wait:
		for {
			select {
			case <-ctx.Done():
				wcancel()
				revoke()
				return nil, wrap(ctx.Err())
			case w, ok := <-wch:
				if !ok || w.Err() != nil || len(w.Events) > 0 {
					break wait
				}
			}
		}
		wcancel()
	}
}

type lease struct {
	l    *locker
	id   clientv3.LeaseID
	rev  int64
	stop context.CancelFunc
	lost adapt.Lost
}

var _ backends.LossNotifier = (*lease)(nil)

func (s *lease) Fence() uint64 { return uint64(s.rev) }

func (s *lease) Lost() <-chan struct{} { return s.lost.C() }

// Release deletes the key only if it is still this grant's (same create
// revision), then revokes the lease.
func (s *lease) Release(ctx context.Context) error {
	s.stop()
	_, err := s.l.C.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(s.l.key), "=", s.rev)).
		Then(clientv3.OpDelete(s.l.key)).
		Commit()
	if err != nil {
		return fmt.Errorf("etcd: release %s: %w", s.l.key, err)
	}
	if _, err := s.l.C.Revoke(ctx, s.id); err != nil && !etcdconn.LeaseNotFound(err) {
		return fmt.Errorf("etcd: revoke lease of %s: %w", s.l.key, err)
	}
	return nil
}
