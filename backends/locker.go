// Package backends defines the contract every lock under test implements,
// and holds one sub-package per adapter: the lock services' own locks
// (consul, etcd, postgres, redis, zookeeper, mysql, natskv, memcached,
// k8slease) and lock libraries as they ship (consullock, etcdmutex,
// pgxact, redsync, zklock, leaderelection), and foreign: a lock library of
// any language, run by a worker process that speaks the worker protocol
// (docs/protocol.md). suite/local's table puts each on its service.
//
// The contract is deliberately small: a Locker grants Leases, a Lease carries
// a fencing token and can be released. Everything else a lock may offer (a
// known time to live, notice of a lost lease, a session that can be ended
// from outside) is an
// optional capability, discovered by type assertion. A suite spec that needs a
// capability the Locker lacks is skipped, never failed.
//
// A Locker is one client of one lock: the suite creates one Locker per
// simulated process, all naming the same lock. Two Lockers of the same lock
// must never both hold an unexpired lease; the suite exists to find out what
// happens when a holder stalls past its lease anyway.
package backends

import (
	"context"
	"errors"
	"time"
)

// Locker is one client's handle on one named lock.
//
// Acquire blocks until this client holds the lock, or until ctx is done, in
// which case it returns an error wrapping ctx.Err() and holds nothing. A
// Locker holds at most one Lease at a time: calling Acquire again before the
// previous Lease is released is a caller error, and its result is undefined.
//
// Close frees the Locker's connections and background work (renewal stops).
// A lease still held is released where that is cheap, otherwise left to
// expire. It is safe to call Close more than once (a second Close returns
// nil); Acquire after Close returns an error wrapping ErrClosed, at once. The
// suite's contract spec checks these promises, Acquire's context and
// Release's (below).
type Locker interface {
	Acquire(ctx context.Context) (Lease, error)
	Close() error
}

// Lease is one grant of the lock to one client.
//
// Fence returns the grant's fencing token. Tokens strictly increase with every
// grant of the same lock to any client: if grant g2 began after grant g1, then
// g2.Fence() > g1.Fence(). A backend that gives no token returns 0: suite.Test
// then registers no fenced spec for it, and says why (elsewhere, its fenced
// runs are skipped with that reason). The token is fixed at grant time; it
// does not change when the lease is renewed.
//
// Release gives the lock up if, and only if, it is still held by this lease.
// It never removes a lock held by another grant, even when this lease has
// already expired and the lock was granted again (compare-and-delete). It
// returns nil when the lock was released or was no longer this lease's, and an
// error only when the lock service could not be asked. Release is idempotent.
type Lease interface {
	Fence() uint64
	Release(ctx context.Context) error
}

// ErrClosed is returned by Acquire on a closed Locker.
var ErrClosed = errors.New("locksuite: locker is closed")

// TTLer is an optional capability of a Locker whose leases run out by
// themselves.
//
// TTL is the time to live the Locker asks the service for: a lease that is
// neither renewed nor released is freed by the service no earlier than TTL
// after its last renewal. It is the floor below which no stalled holder can
// lose its lock: a stall shorter than TTL is harmless, a longer one may let a
// second holder in.
//
// Expiry is the longest time, from the holder's last renewal, before the
// service actually frees a stalled lease: TTL where the service is exact,
// more where it checks expiry periodically (etcd: TTL + 500 ms) or waits
// longer than asked (Consul: about twice the session TTL). Expiry >= TTL. The
// suite sizes its waits with it.
type TTLer interface {
	TTL() time.Duration
	Expiry() time.Duration
}

// TTLOf returns l's TTL and Expiry, and whether l declares them (a TTLer
// with a positive TTL). An Expiry below TTL is taken as TTL.
func TTLOf(l Locker) (ttl, expiry time.Duration, ok bool) {
	t, isTTLer := l.(TTLer)
	if !isTTLer || t.TTL() <= 0 {
		return 0, 0, false
	}
	return t.TTL(), max(t.Expiry(), t.TTL()), true
}

// LossNotifier is an optional capability of a Lease: Lost returns a channel
// that is closed when the backend reports the lease lost (keep-alive failed,
// session invalidated, connection ended). A holder that checks it before
// writing narrows the unsafe window, but cannot close it: the notice arrives
// only once the stalled holder runs again.
type LossNotifier interface {
	Lost() <-chan struct{}
}

// Freezer is an optional capability for a Locker whose connections do not
// go through the dialer the suite gives it (suite.Client.Dial), or that can
// stall itself more faithfully than its connections can be stalled (a
// foreign worker's process, stopped with SIGSTOP: backends/foreign). Freeze
// stops all of this Locker's traffic to the lock service, renewals included,
// as a stalled process or a cut network would, until thaw is called; it must
// lose nothing that was sent meanwhile. The freeze faults use it in
// preference to the Locker's dial path. The pause scenarios are skipped for a
// Locker that neither dials through suite.Client.Dial nor implements Freezer.
type Freezer interface {
	Freeze() (thaw func())
}

// Cleaner is an optional capability of a Locker that leaves state on the
// server after its leases are released (a fence counter, a key, a sequence).
// Cleanup removes that state, and only that: the suite calls it once per
// lock, on one client, after every other client of the lock was closed and
// before this one is, so that a run leaves a shared server as it found it.
type Cleaner interface {
	Cleanup(ctx context.Context) error
}

// Terminator is an optional capability of a Lease whose grant lives in a
// session on the server (a Postgres session holding an advisory lock).
// Terminate ends that session from outside, over a connection of its own, as
// an administrator (pg_terminate_backend) or a failover would: the server
// frees the lock at once. The lease's holder is not told; it finds out when
// it next uses the session (LossNotifier, if the Lease has it, then fires).
// Terminate returns once the server has ended the session, or with an error.
// The suite's session-kill scenario is skipped for a Lease without it.
type Terminator interface {
	Terminate(ctx context.Context) error
}

// Sessioner is an optional capability of a Lease whose grant is held by one
// server-side session (a Postgres backend process): Session names that
// session as the server knows it ("pid 4242"), read at grant time from the
// server itself, not from the client's connection (through a pooler, the
// two differ). A report then says which session held each grant: through
// a transaction pooler, two clients' grants on the same backend.
type Sessioner interface {
	Session() string
}
