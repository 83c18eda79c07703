// Package mylock shows a lock library's own CI plugging its lock into
// locksuite. The lock here is go-redsync/redsync, a third-party library; the
// adapter is the few lines that map it onto backends.Locker and
// backends.Lease.
package mylock

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/suite"
)

// locker is one client of the lock named c.Key on the Redis server of
// c.Endpoint.
type locker struct {
	client *goredis.Client
	rs     *redsync.Redsync
	key    string
	lease  time.Duration
	closed atomic.Bool
}

// newLocker connects to the server the suite names in c.Endpoint: its URL
// (REDIS_URL's, user and password included, or the harness's server) and
// its TLS settings (rediss://, LOCKSUITE_REDIS_CACERT). Every connection
// is made by c.Dial, so that the suite can stall or cut this client's
// network; c.DialTLS layers TLS on it, as go-redis's Dialer replaces its
// own TLS dial.
func newLocker(c suite.Client) (*locker, error) {
	o, err := goredis.ParseURL(c.Endpoint.URL)
	if err != nil {
		return nil, err
	}
	o.TLSConfig = c.Endpoint.TLS
	o.Dialer = c.DialTLS(o.TLSConfig)
	client := goredis.NewClient(o)
	return &locker{client: client, rs: redsync.New(redsyncgoredis.NewPool(client)), key: c.Key, lease: c.Lease}, nil
}

// Acquire blocks until the lock is held or ctx is done; on a closed locker
// it returns backends.ErrClosed (the suite's contract spec checks it).
func (l *locker) Acquire(ctx context.Context) (backends.Lease, error) {
	for {
		if l.closed.Load() {
			return nil, backends.ErrClosed
		}
		m := l.rs.NewMutex(l.key, redsync.WithExpiry(l.lease))
		if err := m.LockContext(ctx); err == nil {
			return lease{m}, nil
		} else if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}

// Close may be called more than once: only the first closes the client.
func (l *locker) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	return l.client.Close()
}

// TTL lets the suite size its waits (backends.TTLer, optional).
func (l *locker) TTL() time.Duration { return l.lease }

// Expiry is TTL: the service frees the lease on time.
func (l *locker) Expiry() time.Duration { return l.TTL() }

type lease struct{ m *redsync.Mutex }

// Fence is 0: redsync gives no fencing token, so suite.Test registers no
// fenced spec (and prints one line saying why).
func (g lease) Fence() uint64 { return 0 }

// Release deletes the key only if it still holds this grant's value.
func (g lease) Release(ctx context.Context) error {
	_, _ = g.m.UnlockContext(ctx) // not ours any more (expired, taken) is fine
	return nil
}
