// Package etcdmutex is the locksuite adapter for etcd's own lock,
// go.etcd.io/etcd/client/v3/concurrency, used as the library ships it: a
// Session (a lease kept alive by the client's keep-alive stream) and a Mutex
// on that session, acquired with Mutex.Lock and released with Mutex.Unlock.
//
// Mutex.Lock puts a waiter key Key/<lease id> with the session's lease and
// waits until every waiter key created before it is deleted: the oldest
// waiter holds the lock. Unlock deletes the waiter key without comparing
// anything, which is safe because the key's name is unique to the session's
// lease: once a stalled holder's lease expired, its key is gone, and its late
// Unlock deletes nothing of the next holder's.
//
// The fencing token is Mutex.Header().Revision, the revision of the response
// that granted the lock, which is what the library exposes: the next grant
// happens only after this holder's key was deleted (a later revision), so
// its header revision is larger.
//
// A session whose lease expired stays dead (Session.Done is closed); the next
// Acquire starts a new one, as an application would.
package etcdmutex

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/etcd"
	"github.com/locksuite/locksuite/backends/internal/adapt"
	"github.com/locksuite/locksuite/backends/internal/etcdconn"
)

// Config describes one client of one etcd mutex: the etcd adapter's Config,
// with the same meaning but for Key and TTL. Key is the mutex's prefix
// (concurrency.NewMutex's pfx); required. Mutex.Lock takes every key under
// Key+"/" for a waiter's: a key there that is not one (data stored under
// the same name) blocks the lock until it is deleted. TTL is the session's
// lease TTL (concurrency.WithTTL), rounded up to whole seconds; default
// 60s, the library's default.
type Config = etcd.Config

type locker struct {
	*etcdconn.Conn
	key string
	s   adapt.Session[*concurrency.Session] // the live session, started on demand
}

// New returns a Locker for cfg. It connects lazily.
func New(cfg Config) (backends.Locker, error) {
	if err := adapt.Check("etcdmutex", cfg.Key, "the mutex prefix", &cfg.TTL, 60*time.Second, 0, ""); err != nil {
		return nil, err
	}
	c, err := etcdconn.Open("etcdmutex", cfg.Client, cfg.TTL, cfg.Endpoints, cfg.TLS, cfg.Username, cfg.Password, cfg.Dial)
	if err != nil {
		return nil, err
	}
	l := &locker{Conn: c, key: cfg.Key}
	l.s = adapt.Session[*concurrency.Session]{Open: l.newSession, Ended: ended, Forget: (*concurrency.Session).Orphan}
	l.OnClose = l.closeSession
	return l, nil
}

// TTL, Expiry (TTL plus the lessor's 500 ms expiry check) and Close (see
// closeSession) are etcdconn.Conn's.
var _ backends.TTLer = (*locker)(nil)

// newSession starts a session (l.s keeps it, and asks for a new one when
// there is none or its lease is gone). Its lease is granted with ctx
// (and passed with concurrency.WithLease), so that an unreachable server
// does not block Acquire past ctx; NewSession would grant it with the
// client's context.
func (l *locker) newSession(ctx context.Context) (*concurrency.Session, error) {
	g, err := l.C.Grant(ctx, l.Seconds)
	if err != nil {
		return nil, err
	}
	s, err := concurrency.NewSession(l.C, concurrency.WithTTL(int(l.Seconds)), concurrency.WithLease(g.ID))
	if err != nil {
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, _ = l.C.Revoke(rctx, g.ID)
		cancel()
		return nil, err
	}
	return s, nil
}

// ended tells whether s's lease is gone.
func ended(s *concurrency.Session) bool {
	select {
	case <-s.Done():
		return true
	default:
		return false
	}
}

// Acquire locks a new Mutex on the session until it holds the lock or ctx is
// done. A session whose lease expired while this client waited or stalled
// (ErrSessionExpired, "requested lease not found") is replaced and the lock
// asked for again.
func (l *locker) Acquire(ctx context.Context) (backends.Lease, error) {
	for {
		if l.Closed() {
			return nil, backends.ErrClosed
		}
		wrap := func(err error) error { return adapt.Wrap(ctx, "etcdmutex", "acquire", l.key, err) }
		s, err := l.s.Get(ctx)
		if err != nil {
			if ctx.Err() == nil && etcdconn.LeaseNotFound(err) {
				continue
			}
			return nil, wrap(err)
		}
		m := concurrency.NewMutex(s, l.key)
		err = m.Lock(ctx)
		if err == nil {
			return &lease{l: l, s: s, m: m, fence: uint64(m.Header().Revision)}, nil
		}
		if ctx.Err() != nil {
			return nil, wrap(err)
		}
		if errors.Is(err, concurrency.ErrSessionExpired) || etcdconn.LeaseNotFound(err) {
			l.s.Drop(s)
			if err := adapt.Sleep(ctx, 10*time.Millisecond); err != nil {
				return nil, wrap(err)
			}
			continue
		}
		return nil, wrap(err)
	}
}

// closeSession, at the first Close, ends the live session (revoking its
// lease: the server frees the mutex at once).
func (l *locker) closeSession() {
	if s := l.s.Take(); s != nil {
		_ = s.Close()
	}
}

type lease struct {
	l     *locker
	s     *concurrency.Session
	m     *concurrency.Mutex
	fence uint64
}

func (g *lease) Fence() uint64 { return g.fence }

var _ backends.LossNotifier = (*lease)(nil)

// Lost is the session's Done channel: closed when its keep-alive ends.
func (g *lease) Lost() <-chan struct{} { return g.s.Done() }

// Release calls Mutex.Unlock. A second Release, or one after the session's
// lease expired (its key went with it), removes nothing and returns nil.
func (g *lease) Release(ctx context.Context) error {
	err := g.m.Unlock(ctx)
	if err == nil || errors.Is(err, concurrency.ErrLockReleased) {
		return nil
	}
	return fmt.Errorf("etcdmutex: release %s: %w", g.l.key, err)
}
