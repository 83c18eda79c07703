// Package mylock shows a lock library's own CI plugging its lock into
// locksuite. The lock here is go-redsync/redsync, a third-party library; the
// adapter is the few lines that map it onto backends.Locker and
// backends.Lease.
package mylock

import (
	"context"
	"net"
	"sync/atomic"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"

	"github.com/locksuite/locksuite/backends"
)

// locker is one client of the lock named key on the Redis server at addr.
type locker struct {
	client *goredis.Client
	rs     *redsync.Redsync
	key    string
	lease  time.Duration
	closed atomic.Bool
}

// Every connection is made by dial (the suite's suite.Client.Dial), so
// that the suite can stall or cut this client's network.
func newLocker(addr string, dial func(ctx context.Context, network, addr string) (net.Conn, error), key string, lease time.Duration) *locker {
	c := goredis.NewClient(&goredis.Options{Addr: addr, Dialer: dial})
	return &locker{client: c, rs: redsync.New(redsyncgoredis.NewPool(c)), key: key, lease: lease}
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
