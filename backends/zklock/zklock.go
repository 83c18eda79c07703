// Package zklock is the locksuite adapter for go-zookeeper/zk's own lock,
// used as the library ships it: zk.NewLock on the client's connection,
// Lock.Lock (the documented recipe: a protected ephemeral sequential znode
// "lock-N" under the lock's path, the lowest holds, each waiter watches its
// predecessor) and Lock.Unlock (deletes that znode). The lease is the
// connection's session timeout, renewed by the library's pings while the
// holder runs.
//
// What the library offers as a fence: nothing. Lock keeps its znode's path
// and sequence number in unexported fields and returns only an error, so a
// holder cannot learn which grant it holds; Lease.Fence is 0 and the
// suite's fenced specs are skipped. (Had it exposed the sequence number, it
// would do: a parent's sequence counter only grows, so a later grant's
// znode has a higher one.)
//
// Lock takes no context and returns only when it holds the lock or a
// request fails. Each Acquire runs it in a goroutine and returns when ctx is
// done; an abandoned Lock that succeeds later is unlocked at once. The
// library leaves its znode behind when Lock fails after creating it (a
// connection lost while it waits): that znode stays in the queue, ahead of
// the client's next try, for as long as the session lives. So after a
// failed Lock, abandoned or not, this adapter ends the session (the server
// deletes the znode) and opens a new one for the next attempt, as a careful
// user would. (A lease granted in that session meanwhile is lost with it:
// its Lost fires.) Release returns when its ctx is done, even while Unlock
// waits for the library (zksession.Call).
package zklock

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/internal/zksession"
	"github.com/locksuite/locksuite/backends/zookeeper"
)

// Config describes one client of one zk.Lock: the zookeeper adapter's
// Config, with the same meaning (Key is the path zk.NewLock takes; Auth's
// user gets all rights to the lock's znodes, the acl argument of
// zk.NewLock).
type Config = zookeeper.Config

type locker struct{ *zksession.Lock }

var (
	_ backends.Locker       = (*locker)(nil)
	_ backends.Cleaner      = (*locker)(nil)
	_ backends.LossNotifier = (*lease)(nil)
	_ backends.Terminator   = (*lease)(nil)
)

// New returns a Locker for cfg. It connects at the first Acquire.
func New(cfg Config) (backends.Locker, error) {
	l, err := zksession.NewLock(zksession.Options{Servers: cfg.Servers, Timeout: cfg.Lease, Dial: cfg.Dial, TLS: cfg.TLS, Auth: cfg.Auth, Name: "zk-lock"}, cfg.Key)
	if err != nil {
		return nil, err
	}
	return &locker{l}, nil
}

// Acquire runs Lock on a new zk.Lock until it holds the lock or ctx is
// done. A Lock that fails ends the session (its znode goes with it) and is
// tried again on a new one.
func (l *locker) Acquire(ctx context.Context) (backends.Lease, error) {
	for {
		s, err := l.Open(ctx)
		if err != nil {
			return nil, err
		}
		lk := zk.NewLock(s.Conn, l.Path, l.ACL)
		done := make(chan error, 1)
		go func() { done <- lk.Lock() }()
		select {
		case err = <-done:
		case <-ctx.Done():
			go func() {
				if <-done == nil {
					_ = lk.Unlock()
				} else if !l.Closed() {
					// The failed Lock may have left its znode (see the
					// package doc).
					l.Drop(s)
				}
			}()
			return nil, fmt.Errorf("zk-lock: acquire %s: %w", l.Path, ctx.Err())
		}
		if err == nil {
			// Release is Lock.Unlock: it deletes the lock's znode by its
			// path (version -1, but a sequence znode's path is never
			// reused, so it cannot delete another grant's). One at a
			// time: a Release that returned with its ctx leaves its
			// Unlock running, and zk.Lock is not safe for concurrent use.
			var mu sync.Mutex
			unlock := func() error {
				mu.Lock()
				defer mu.Unlock()
				if err := lk.Unlock(); !errors.Is(err, zk.ErrNotLocked) {
					return err
				}
				return nil
			}
			return &lease{l.NewGrant(s, s.Current(), l.Path, unlock)}, nil
		}
		if l.Closed() {
			return nil, backends.ErrClosed
		}
		l.Drop(s)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("zk-lock: acquire %s: %w (Lock: %v)", l.Path, ctx.Err(), err)
		}
		if !retryable(err) {
			return nil, fmt.Errorf("zk-lock: acquire %s: %w", l.Path, zksession.Explain(err))
		}
	}
}

// retryable: Lock failed with the connection or the session, or with
// "node does not exist": a parent of the lock's znode that another lock's
// Cleanup removed (it was empty then) while Lock created the parents
// again, which Lock does not retry (zookeeper's create starts over the
// same way).
func retryable(err error) bool {
	return zksession.Retryable(err) || errors.Is(err, zk.ErrClosing) || errors.Is(err, zk.ErrNoNode)
}

// lease's Release is Lock.Unlock (see Acquire); Lost and Terminate are
// zksession.Grant's.
type lease struct{ *zksession.Grant }

// Fence is 0: zk.Lock does not tell its holder which znode it holds.
func (ls *lease) Fence() uint64 { return 0 }
