// Package zookeeper is the locksuite adapter for the lock recipe of
// ZooKeeper's documentation ("Recipes and Solutions: Locks"): each client
// creates an ephemeral sequential znode under the lock's znode; the client
// whose znode has the lowest sequence number holds the lock; every other
// client watches only the znode just before its own (no herd), and looks
// again when that one goes.
//
// The lease is the ZooKeeper session: the client library pings the server
// every third of the session timeout while the holder's process runs, so a
// slow holder keeps its lock; a holder whose process or network stalls
// sends nothing, the server expires its session on the first tick after the
// timeout and deletes its znode, and the next client's watch fires. The
// client learns that its session expired only when it reaches the server
// again; Lost fires earlier, when the client drops its connection (two
// thirds of the session without an answer), since from then on the holder
// cannot know that its znode still exists.
//
// The fencing token is the holder's znode's Czxid, the transaction id that
// created it: zxids are one counter for the whole ensemble, and a later
// grant's znode was created later (the lowest sequence number holds), so
// tokens strictly increase across grants.
package zookeeper

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/internal/zksession"
)

// Config describes one client of one ZooKeeper lock.
type Config struct {
	// Servers are the ensemble's host:port addresses (a connect string
	// split at commas, without a chroot). Required.
	Servers []string
	// Dial, if not nil, makes every connection to the servers (the suite
	// routes them through a fault proxy). Default: a plain TCP dial.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// TLS, if not nil, wraps every connection in TLS with this
	// configuration (a server's secureClientPort). When its ServerName is
	// empty, each server's host is verified. Default nil: plain.
	TLS *tls.Config
	// Auth, if not empty, is "user:password": the session authenticates
	// with the digest scheme, and the znodes it creates (the lock's znode,
	// its parents and the sequence znodes) get all rights for that user
	// only. Default: none, and znodes open to anyone (world:anyone).
	Auth string
	// Key names the lock: its znode is "/" + Key (a leading "/" is kept).
	// Components are separated by "/", none empty. Required.
	Key string
	// Lease is the session timeout. The server must grant exactly this:
	// it clamps timeouts to [minSessionTimeout, maxSessionTimeout]
	// (default 2 and 20 × tickTime), and Acquire fails when the lease is
	// outside (a server with the default tickTime of 2 s refuses leases
	// below 4 s). Default 1s.
	Lease time.Duration
	_     struct{}
}

// prefix names the sequence znodes: "lock-" and ZooKeeper's ten-digit
// counter.
const prefix = "lock-"

type locker struct {
	c    *zksession.Client
	path string
	acl  []zk.ACL
}

var (
	_ backends.Locker       = (*locker)(nil)
	_ backends.Cleaner      = (*locker)(nil)
	_ backends.LossNotifier = (*lease)(nil)
	_ backends.Terminator   = (*lease)(nil)
)

// New returns a Locker for cfg. It connects at the first Acquire.
func New(cfg Config) (backends.Locker, error) {
	path, err := zksession.LockPath("zookeeper", cfg.Key)
	if err != nil {
		return nil, err
	}
	if cfg.Lease == 0 {
		cfg.Lease = time.Second
	}
	o := zksession.Options{Servers: cfg.Servers, Timeout: cfg.Lease, Dial: cfg.Dial, TLS: cfg.TLS, Auth: cfg.Auth, Name: "zookeeper"}
	c, err := zksession.NewClient(o)
	if err != nil {
		return nil, err
	}
	return &locker{c: c, path: path, acl: o.ACL()}, nil
}

func (l *locker) TTL() time.Duration { return l.c.Options().Timeout }

// Expiry is the lease and half of it again: the server expires a session
// on the first tick boundary after its timeout, and the timeout is at
// least 2 ticks (minSessionTimeout's default, and the harness's server's),
// so a tick is at most half of it.
func (l *locker) Expiry() time.Duration { return l.c.Options().Timeout * 3 / 2 }

// Acquire follows the recipe until this client holds the lock or ctx is
// done. It creates its sequence znode with go-zookeeper's
// CreateProtectedEphemeralSequential (a GUID in the name, so that a create
// whose answer was lost in a reconnection is found again, not left behind
// to block the queue). If the session expires while it waits, its znode is
// gone: it creates a new one, at the back of the queue.
func (l *locker) Acquire(ctx context.Context) (backends.Lease, error) {
	s, err := l.c.Session(ctx)
	if err != nil {
		if errors.Is(err, backends.ErrClosed) {
			return nil, err
		}
		return nil, fmt.Errorf("zookeeper: acquire %s: %w", l.path, err)
	}
	wrap := func(err error) error {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fmt.Errorf("zookeeper: acquire %s: %w", l.path, zksession.Explain(err))
	}
	mine := ""
	// On failure, the znode goes: a waiter that gave up must not hold the
	// lock later.
	defer func() {
		if mine != "" {
			_ = s.Conn.Delete(mine, -1)
		}
	}()
	for {
		if l.c.Closed() {
			return nil, backends.ErrClosed
		}
		if ctx.Err() != nil {
			return nil, wrap(ctx.Err())
		}
		if mine == "" {
			mine, err = l.create(s)
			if err != nil {
				if zksession.Retryable(err) {
					if werr := zksession.Pause(ctx, 10*time.Millisecond); werr != nil {
						return nil, wrap(werr)
					}
					continue
				}
				return nil, wrap(err)
			}
		}
		// After a failed request the znode is kept: the next Children
		// tells whether it still exists (forgetting it while the session
		// lives would leave it in the queue, ahead of its own client).
		children, _, err := s.Conn.Children(l.path)
		if err != nil {
			if zksession.Retryable(err) {
				if werr := zksession.Pause(ctx, 10*time.Millisecond); werr != nil {
					return nil, wrap(werr)
				}
				continue
			}
			return nil, wrap(err)
		}
		sort.Slice(children, func(i, j int) bool { return seq(children[i]) < seq(children[j]) })
		me := -1
		for i, c := range children {
			if l.path+"/"+c == mine {
				me = i
			}
		}
		if me < 0 {
			// Our znode is gone: the session expired while we waited.
			mine = ""
			continue
		}
		if me == 0 {
			ok, st, err := s.Conn.Exists(mine)
			switch {
			case err != nil && !zksession.Retryable(err):
				return nil, wrap(err)
			case err != nil:
				if werr := zksession.Pause(ctx, 10*time.Millisecond); werr != nil {
					return nil, wrap(werr)
				}
				continue
			case !ok:
				mine = "" // the session expired since Children
				continue
			}
			ls := &lease{l: l, s: s, path: mine, version: st.Version, czxid: st.Czxid, session: st.EphemeralOwner}
			ls.lost = s.Watch(st.EphemeralOwner)
			mine = ""
			return ls, nil
		}
		prev := l.path + "/" + children[me-1]
		ok, _, ch, err := s.Conn.ExistsW(prev)
		if err != nil {
			if zksession.Retryable(err) {
				if werr := zksession.Pause(ctx, 10*time.Millisecond); werr != nil {
					return nil, wrap(werr)
				}
				continue
			}
			return nil, wrap(err)
		}
		if !ok {
			continue
		}
		select {
		case <-ctx.Done():
			return nil, wrap(ctx.Err())
		case <-ch:
			// Deleted, or the watch ended with the connection: look again.
		}
	}
}

// create makes this client's sequence znode, creating the lock's znode
// and its parents (persistent, empty) if missing.
func (l *locker) create(s *zksession.Session) (string, error) {
	for {
		p, err := s.Conn.CreateProtectedEphemeralSequential(l.path+"/"+prefix, nil, l.acl)
		if !errors.Is(err, zk.ErrNoNode) {
			return p, err
		}
		parent := ""
		for _, c := range strings.Split(l.path[1:], "/") {
			parent += "/" + c
			if _, err := s.Conn.Create(parent, nil, 0, l.acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
				return "", err
			}
		}
	}
}

// seq is a sequence znode's counter: its last ten digits ("_c_<guid>-lock-"
// comes before them).
func seq(name string) string {
	if len(name) < 10 {
		return name
	}
	return name[len(name)-10:]
}

// Close ends the Locker's session: the server deletes its znodes at once.
func (l *locker) Close() error { return l.c.Close() }

// Cleanup deletes the lock's znode and then each parent up to the root,
// stopping at the first that is not empty (another lock's, or a waiter's
// still) or not there: it removes what Acquire created and nothing else.
func (l *locker) Cleanup(ctx context.Context) error {
	s, err := l.c.Session(ctx)
	if err == nil {
		err = s.RemoveEmpty(l.path)
	}
	if err != nil {
		return fmt.Errorf("zookeeper: cleanup %s: %w", l.path, err)
	}
	return nil
}

type lease struct {
	l       *locker
	s       *zksession.Session
	path    string
	version int32
	czxid   int64
	session int64
	lost    <-chan struct{}

	mu       sync.Mutex
	released bool
}

func (ls *lease) Fence() uint64         { return uint64(ls.czxid) }
func (ls *lease) Lost() <-chan struct{} { return ls.lost }

// Release deletes this grant's znode with its version (compare-and-delete:
// a sequence znode's path is never reused, so no other grant's znode can be
// deleted). A znode already gone is no error, nor is a session that ended
// (the client has another one now): an ephemeral znode goes with its
// session. While the client reconnects, Release tries again until ctx is
// done.
func (ls *lease) Release(ctx context.Context) error {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.released {
		return nil
	}
	if err := ls.s.Release(ctx, ls.session, func() error { return ls.s.Conn.Delete(ls.path, ls.version) }); err != nil {
		return fmt.Errorf("zookeeper: release %s: %w", ls.path, err)
	}
	ls.released = true
	ls.s.Forget(ls.lost)
	return nil
}

// Terminate ends the holder's session from a connection of its own (see
// zksession.Session.Terminate): the server deletes the znode before it
// answers, and the holder finds out at its next request or ping (Lost).
func (ls *lease) Terminate(ctx context.Context) error {
	if err := ls.s.End(ctx, ls.session); err != nil {
		return fmt.Errorf("zookeeper: %w", err)
	}
	return nil
}
