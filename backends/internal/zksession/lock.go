package zksession

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/internal/wait"
)

// LockPath makes a lock's key a znode path: "/" + key, a leading "/" kept.
func LockPath(name, key string) (string, error) {
	if key == "" {
		return "", fmt.Errorf("%s: Config.Key is empty: name the lock", name)
	}
	p := key
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	for _, c := range strings.Split(p[1:], "/") {
		if c == "" || c == "." || c == ".." {
			return "", fmt.Errorf("%s: Config.Key %q is not a znode path: a component is empty, \".\" or \"..\"", name, key)
		}
	}
	return p, nil
}

// Retryable reports whether a request failed with the connection or the
// session, which go-zookeeper re-establishes (a new session if the old one
// expired).
func Retryable(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrSessionExpired) ||
		errors.Is(err, zk.ErrSessionMoved) || errors.Is(err, zk.ErrNoServer)
}

// Moved reports whether the client now has a session other than id: id
// ended, and its ephemeral znodes with it.
func (s *Session) Moved(id int64) bool {
	cur := s.Current()
	return cur != 0 && cur != id
}

// Release calls del until it succeeds, the znode is gone (zk.ErrNoNode),
// session id has ended (Moved), or ctx is done; it retries while the
// client reconnects. It returns when ctx is done, even with del still
// waiting for go-zookeeper (see Call): that del may still delete the
// znode later. It is a Lease's release of its ephemeral znode.
func (s *Session) Release(ctx context.Context, id int64, del func() error) error {
	for !s.Moved(id) {
		err := Do(ctx, del)
		if err == nil || errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if !Retryable(err) {
			return err
		}
		if werr := wait.For(ctx, 10*time.Millisecond); werr != nil {
			return fmt.Errorf("%w (last: %v)", werr, err)
		}
	}
	return nil
}

// RemoveEmpty deletes path and then each parent up to the root, stopping
// at the first that is not empty or not there: it removes a lock's znodes
// once no client uses them, and nothing else. It returns ctx's error when
// ctx is done first (see Call).
func (s *Session) RemoveEmpty(ctx context.Context, path string) error {
	for p := path; p != "/" && p != ""; p = p[:strings.LastIndex(p, "/")] {
		err := Do(ctx, func() error { return s.Conn.Delete(p, -1) })
		if errors.Is(err, zk.ErrNotEmpty) || errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("delete %s: %w", p, err)
		}
	}
	return nil
}

// Client is a Locker's session, opened at first use and replaced after
// Drop, until Close.
type Client struct {
	opts   Options
	closed atomic.Bool
	mu     sync.Mutex
	sess   *Session
}

// NewClient returns a Client for o (checked with Check). It does not
// connect.
func NewClient(o Options) (*Client, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	return &Client{opts: o}, nil
}

// Options are the client's options.
func (c *Client) Options() Options { return c.opts }

// Closed reports whether Close was called.
func (c *Client) Closed() bool { return c.closed.Load() }

// Session returns the open session, opening one if there is none; after
// Close it returns backends.ErrClosed.
func (c *Client) Session(ctx context.Context) (*Session, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return nil, backends.ErrClosed
	}
	if c.sess == nil {
		s, err := Open(ctx, c.opts)
		if err != nil {
			return nil, err
		}
		c.sess = s
	}
	return c.sess, nil
}

// Drop ends s if it is still the client's session; the next Session
// opens a new one.
func (c *Client) Drop(s *Session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess == s {
		c.sess = nil
		s.Close()
	}
}

// Close ends the session (the server deletes its ephemeral znodes at
// once). It is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Swap(true) {
		return nil
	}
	if c.sess != nil {
		c.sess.Close()
	}
	return nil
}

// Lock is the half of a Locker that both adapters share: the client, the
// lock's znode and the ACL of the znodes the client creates. It gives the
// Locker its TTL, Expiry, Close and Cleanup.
type Lock struct {
	*Client
	// Path is the lock's znode ("/" + Config.Key).
	Path string
	// ACL is Options.ACL.
	ACL []zk.ACL
}

// NewLock checks key (LockPath) and o (Check), with a Timeout of 0 made
// 1 s, the adapters' default lease. It does not connect.
func NewLock(o Options, key string) (*Lock, error) {
	path, err := LockPath(o.Name, key)
	if err != nil {
		return nil, err
	}
	if o.Timeout == 0 {
		o.Timeout = time.Second
	}
	c, err := NewClient(o)
	if err != nil {
		return nil, err
	}
	return &Lock{Client: c, Path: path, ACL: o.ACL()}, nil
}

// TTL is the session timeout: the lease.
func (l *Lock) TTL() time.Duration { return l.opts.Timeout }

// Expiry is the lease and half of it again: the server expires a session
// on the first tick boundary after its timeout, and the timeout is at
// least 2 ticks (minSessionTimeout's default, and the harness's server's),
// so a tick is at most half of it.
func (l *Lock) Expiry() time.Duration { return l.opts.Timeout * 3 / 2 }

// Open is Session for an Acquire: its error names the adapter and the
// lock, except backends.ErrClosed, returned as it is.
func (l *Lock) Open(ctx context.Context) (*Session, error) {
	s, err := l.Session(ctx)
	if err != nil && !errors.Is(err, backends.ErrClosed) {
		return nil, fmt.Errorf("%s: acquire %s: %w", l.opts.Name, l.Path, err)
	}
	return s, err
}

// Cleanup deletes the lock's znode and then each parent up to the root,
// stopping at the first that is not empty (another lock's, or a waiter's
// still) or not there: it removes what Acquire created and nothing else.
func (l *Lock) Cleanup(ctx context.Context) error {
	s, err := l.Session(ctx)
	if err == nil {
		err = s.RemoveEmpty(ctx, l.Path)
	}
	if err != nil {
		return fmt.Errorf("%s: cleanup %s: %w", l.opts.Name, l.Path, err)
	}
	return nil
}

// Grant is the half of a Lease that both adapters share: the session the
// holder's znode lives in, and that session's id. It gives the Lease its
// Lost, Release and Terminate.
type Grant struct {
	name string
	path string // the znode, for errors
	s    *Session
	id   int64
	lost <-chan struct{}
	del  func() error

	mu       sync.Mutex
	released bool
}

// NewGrant is the grant of znode path, held in session id of s, that del
// deletes (see Session.Release). Its loss channel is s.Watch(id).
func (l *Lock) NewGrant(s *Session, id int64, path string, del func() error) *Grant {
	return &Grant{name: l.opts.Name, path: path, s: s, id: id, lost: s.Watch(id), del: del}
}

// Lost is closed when the client loses its connection or the session
// expires (see Session.Watch).
func (g *Grant) Lost() <-chan struct{} { return g.lost }

// Release deletes the znode with del, once: a znode already gone is no
// error, nor is a session that ended (an ephemeral znode goes with its
// session). While the client reconnects, it tries again until ctx is done.
func (g *Grant) Release(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.released {
		return nil
	}
	if err := g.s.Release(ctx, g.id, g.del); err != nil {
		return fmt.Errorf("%s: release %s: %w", g.name, g.path, err)
	}
	g.released = true
	g.s.Forget(g.lost)
	return nil
}

// Terminate ends the holder's session from a connection of its own (see
// Session.Terminate): the server deletes the znode before it answers, and
// the holder finds out at its next request or ping (Lost).
func (g *Grant) Terminate(ctx context.Context) error {
	if err := g.s.End(ctx, g.id); err != nil {
		return fmt.Errorf("%s: %w", g.name, err)
	}
	return nil
}
