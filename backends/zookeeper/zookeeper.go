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
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/internal/zksession"
	"github.com/locksuite/locksuite/internal/wait"
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

type locker struct{ *zksession.Lock }

var (
	_ backends.Locker       = (*locker)(nil)
	_ backends.Cleaner      = (*locker)(nil)
	_ backends.LossNotifier = (*lease)(nil)
	_ backends.Terminator   = (*lease)(nil)
)

// New returns a Locker for cfg. It connects at the first Acquire.
func New(cfg Config) (backends.Locker, error) {
	l, err := zksession.NewLock(zksession.Options{Servers: cfg.Servers, Timeout: cfg.Lease, Dial: cfg.Dial, TLS: cfg.TLS, Auth: cfg.Auth, Name: "zookeeper"}, cfg.Key)
	if err != nil {
		return nil, err
	}
	return &locker{l}, nil
}

// TTL, Expiry (the lease and half of it again: the server expires a
// session on the first tick after its timeout), Close (ends the session:
// the server deletes its znodes at once) and Cleanup (deletes the lock's
// znode and its empty parents) are zksession.Lock's.

// Acquire follows the recipe until this client holds the lock or ctx is
// done, and returns when ctx is done whatever the client library is doing
// (its requests take no context: one waits in its queue while it
// reconnects; see zksession.Call). Its sequence znode is protected, as in
// the recipe: a GUID of this Acquire's own in its name, so that the
// client finds it among the lock's children after a create whose answer
// was lost (a reconnection, or ctx done while the create waited) and
// neither leaves it behind to block the queue nor takes another's for its
// own. If the session expires while it waits, its znode is gone: it
// creates a new one, at the back of the queue. When Acquire fails, its
// znode (one it made, or one a create it abandoned may still make) is
// deleted in the background, while the session lives (see
// zksession.Protected.Remove): until then it keeps its place in the
// queue, and the lock goes to no one while it is first.
func (l *locker) Acquire(ctx context.Context) (backends.Lease, error) {
	s, err := l.Open(ctx)
	if err != nil {
		return nil, err
	}
	wrap := func(err error) error {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fmt.Errorf("zookeeper: acquire %s: %w", l.Path, zksession.Explain(err))
	}
	// retry is nil after a short pause when a request failed with the
	// connection or the session (go-zookeeper re-establishes it), and the
	// error to return otherwise.
	retry := func(err error) error {
		if !zksession.Retryable(err) {
			return wrap(err)
		}
		if werr := wait.For(ctx, 10*time.Millisecond); werr != nil {
			return wrap(werr)
		}
		return nil
	}
	node, err := s.NewProtected(l.Path, prefix, l.ACL)
	if err != nil {
		return nil, wrap(err)
	}
	granted := false
	// On failure, the znode goes: a waiter that gave up must not hold the
	// lock later.
	defer func() {
		if !granted {
			node.Remove()
		}
	}()
	created := false // a create may have made the znode
	for {
		if l.Closed() {
			return nil, backends.ErrClosed
		}
		if ctx.Err() != nil {
			return nil, wrap(ctx.Err())
		}
		if !created {
			created = true
			if err := l.create(ctx, s, node); err != nil {
				if err := retry(err); err != nil {
					return nil, err
				}
				continue
			}
		}
		// After a failed request the znode is looked for again: the
		// Children that follows tells whether it exists (forgetting it
		// while the session lives would leave it in the queue, ahead of
		// its own client).
		children, err := zksession.Call(ctx, func() ([]string, error) {
			c, _, err := s.Conn.Children(l.Path)
			return c, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			created = false // the lock's znode is not there yet
			continue
		}
		if err != nil {
			if err := retry(err); err != nil {
				return nil, err
			}
			continue
		}
		mine := node.Find(children)
		if mine == "" {
			// Our create did not happen, or the session expired while we
			// waited and took the znode with it.
			created = false
			continue
		}
		sort.Slice(children, func(i, j int) bool { return seq(children[i]) < seq(children[j]) })
		me := -1
		for i, c := range children {
			if l.Path+"/"+c == mine {
				me = i
			}
		}
		if me == 0 {
			st, err := zksession.Call(ctx, func() (*zk.Stat, error) {
				ok, st, err := s.Conn.Exists(mine)
				if err == nil && !ok {
					st = nil
				}
				return st, err
			})
			switch {
			case err != nil:
				if err := retry(err); err != nil {
					return nil, err
				}
				continue
			case st == nil:
				created = false // the session expired since Children
				continue
			}
			// Release deletes this grant's znode with its version
			// (compare-and-delete: a sequence znode's path is never
			// reused, so no other grant's znode can be deleted).
			version := st.Version
			del := func() error { return s.Conn.Delete(mine, version) }
			granted = true
			return &lease{l.NewGrant(s, st.EphemeralOwner, mine, del), st.Czxid}, nil
		}
		prev := l.Path + "/" + children[me-1]
		type watch struct {
			ok bool
			ch <-chan zk.Event
		}
		w, err := zksession.Call(ctx, func() (watch, error) {
			ok, _, ch, err := s.Conn.ExistsW(prev)
			return watch{ok, ch}, err
		})
		if err != nil {
			if err := retry(err); err != nil {
				return nil, err
			}
			continue
		}
		if !w.ok {
			continue
		}
		select {
		case <-ctx.Done():
			return nil, wrap(ctx.Err())
		case <-w.ch:
			// Deleted, or the watch ended with the connection: look again.
		}
	}
}

// create makes this client's sequence znode, creating the lock's znode
// and its parents (persistent, empty) if missing. A parent that another
// lock's Cleanup removed between two of these creates (it was empty then)
// makes it start over. Each request returns when ctx is done
// (zksession.Call).
func (l *locker) create(ctx context.Context, s *zksession.Session, node *zksession.Protected) error {
	for {
		_, err := node.Create(ctx)
		if !errors.Is(err, zk.ErrNoNode) {
			return err
		}
		parent := ""
		for _, c := range strings.Split(l.Path[1:], "/") {
			parent += "/" + c
			p := parent
			_, err := zksession.Call(ctx, func() (string, error) { return s.Conn.Create(p, nil, 0, l.ACL) })
			if errors.Is(err, zk.ErrNoNode) {
				break // removed meanwhile: start over
			}
			if err != nil && !errors.Is(err, zk.ErrNodeExists) {
				return err
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

// lease's Lost, Release and Terminate are zksession.Grant's: Release
// deletes the znode (see Acquire), and a znode already gone or a session
// that ended (an ephemeral znode goes with its session) is no error;
// Terminate ends the holder's session from a connection of its own.
type lease struct {
	*zksession.Grant
	czxid int64
}

func (ls *lease) Fence() uint64 { return uint64(ls.czxid) }
