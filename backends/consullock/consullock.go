// Package consullock is the locksuite adapter for consul/api's Lock, used as
// the library ships it: Client.LockOpts with a SessionTTL and a LockDelay,
// Lock.Lock (it creates the session, renews it with Session.RenewPeriodic
// every TTL/2, waits on a blocking query and acquires the key), the channel
// Lock returns (closed by the library's monitor when the lock is lost), and
// Lock.Unlock (a KV release with this session, then the session is
// destroyed).
//
// Lock takes no context: each Acquire runs it on a fresh api.Lock in a
// goroutine with a stop channel that Acquire closes when ctx is done, and
// returns at once. The library checks the stop channel between its blocking
// queries (LockWaitTime); an attempt that acquires after it was abandoned
// unlocks at once.
//
// Two properties of the library decide its verdicts:
//   - LockDelay: after a session is invalidated (a holder that stopped
//     renewing), Consul refuses to grant the key for LockDelay. It protects a
//     holder whose stall is shorter than the session's expiry (about 2 × TTL)
//     plus LockDelay. The api omits a zero LockDelay, and the server then
//     applies its default, 15 s.
//   - A waiter that hits the lock-delay waits a fixed api.DefaultLockRetryTime
//     (5 s) before it tries again, whatever LockDelay is.
//
// The library exposes no fencing token (Lock gives only the lost channel;
// the key's index is not returned), so Lease.Fence is 0 and the suite's
// fenced specs are skipped.
package consullock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/internal/adapt"
	"github.com/locksuite/locksuite/backends/internal/consulconn"
)

// Config describes one client of one Consul lock.
type Config struct {
	// Client is the connection to use. If nil, one is made from Address
	// (falling back to CONSUL_HTTP_ADDR and the other CONSUL_* variables
	// that api.DefaultConfig reads).
	Client *api.Client
	// Address is host:port or an http(s):// URL of a Consul agent.
	Address string
	// Token is an ACL token; empty uses CONSUL_HTTP_TOKEN if set.
	Token string
	// TLS, if not nil, makes the client speak HTTPS with this
	// configuration (a copy), as consul.Config.TLS does: RootCAs for the
	// agent's CA, Certificates for a client certificate; used when Client
	// is nil. Default nil: what the CONSUL_* variables say (CONSUL_HTTP_SSL,
	// CONSUL_CACERT, ...), else plain HTTP.
	TLS *tls.Config
	// Dial, if not nil, makes every connection to the agent, as
	// consul.Config.Dial does. Default: TCP.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// Key is the lock's KV key. Required.
	Key string
	// TTL is the session TTL (LockOptions.SessionTTL). Consul refuses TTLs
	// below the server's session_ttl_min (10s by default; the harness's
	// server allows 100ms). Default 15s, the library's.
	TTL time.Duration
	// LockDelay is the session's lock-delay (LockOptions.LockDelay), sent
	// in whole milliseconds (at least 1ms). Default 0: not sent, so the
	// server applies its default of 15s, as the library does.
	LockDelay time.Duration
	// LockWaitTime bounds each blocking query of Lock
	// (LockOptions.LockWaitTime), and so how long an abandoned attempt
	// lingers and Close waits for it. It does not change what Lock grants.
	// Default 15s, the library's.
	LockWaitTime time.Duration
	_            struct{}
}

type locker struct {
	c         *api.Client
	closeIdle func() // the idle connections of a client New made
	opts      api.LockOptions
	ttl       time.Duration
	delay     time.Duration
	closed    atomic.Bool

	mu      sync.Mutex
	pending map[chan struct{}]bool // stop channels of running Lock calls
	running sync.WaitGroup         // running Lock calls
	wait    time.Duration          // LockWaitTime in effect
}

// New returns a Locker for cfg. It does not contact the agent.
func New(cfg Config) (backends.Locker, error) {
	if err := adapt.Check("consullock", cfg.Key, "the lock key", &cfg.TTL, 15*time.Second, 0, ""); err != nil {
		return nil, err
	}
	if strings.HasPrefix(cfg.Key, "/") {
		return nil, fmt.Errorf("consullock: key %q must not start with /", cfg.Key)
	}
	if cfg.LockDelay < 0 || cfg.LockWaitTime < 0 {
		return nil, fmt.Errorf("consullock: LockDelay %v and LockWaitTime %v must not be negative", cfg.LockDelay, cfg.LockWaitTime)
	}
	c, closeIdle := cfg.Client, func() {}
	if c == nil {
		var err error
		if c, closeIdle, err = consulconn.New("consullock", consulconn.Config{Address: cfg.Address, Token: cfg.Token, TLS: cfg.TLS, Dial: cfg.Dial}); err != nil {
			return nil, err
		}
	}
	l := &locker{c: c, closeIdle: closeIdle, ttl: cfg.TTL, delay: cfg.LockDelay, pending: map[chan struct{}]bool{}, wait: cfg.LockWaitTime}
	if l.wait == 0 {
		l.wait = api.DefaultLockWaitTime
	}
	l.opts = api.LockOptions{
		Key:          cfg.Key,
		SessionName:  "locksuite " + cfg.Key,
		SessionTTL:   cfg.TTL.String(),
		LockDelay:    cfg.LockDelay,
		LockWaitTime: cfg.LockWaitTime,
	}
	return l, nil
}

var _ backends.TTLer = (*locker)(nil)

func (l *locker) TTL() time.Duration { return l.ttl }

// Expiry is twice the TTL (Consul's session timer allows that much slack)
// plus the lock-delay, during which nobody is granted the key.
func (l *locker) Expiry() time.Duration {
	d := l.delay
	if d == 0 {
		d = 15 * time.Second
	}
	return 2*l.ttl + d
}

type result struct {
	lost <-chan struct{}
	err  error
}

// Acquire runs Lock on a fresh api.Lock until it holds the lock, or ctx is
// done. Lock fails with "invalid session" when the session it made for the
// attempt was invalidated before its acquire (this client stalled while it
// waited): as an application would, Acquire calls Lock again, with a new
// session.
func (l *locker) Acquire(ctx context.Context) (backends.Lease, error) {
	return adapt.Retry(ctx, l.attempt, func(err error) bool { return strings.Contains(err.Error(), "invalid session") })
}

func (l *locker) attempt(ctx context.Context) (backends.Lease, error) {
	if l.closed.Load() {
		return nil, backends.ErrClosed
	}
	opts := l.opts
	lk, err := l.c.LockOpts(&opts)
	if err != nil {
		return nil, fmt.Errorf("consullock: %w", err)
	}
	stop := make(chan struct{})
	l.mu.Lock()
	l.pending[stop] = true
	l.mu.Unlock()
	done := make(chan result, 1)
	var abandoned atomic.Bool
	l.running.Add(1)
	go func() {
		defer l.running.Done()
		lost, err := lk.Lock(stop)
		if lost != nil && abandoned.Load() {
			_ = lk.Unlock()
		}
		l.mu.Lock()
		delete(l.pending, stop)
		l.mu.Unlock()
		done <- result{lost, err}
	}()
	select {
	case r := <-done:
		switch {
		case r.err != nil:
			return nil, fmt.Errorf("consullock: acquire %s: %w", l.opts.Key, r.err)
		case r.lost == nil: // stopped: only by Close
			return nil, backends.ErrClosed
		}
		return &lease{l: l, lk: lk, lost: r.lost}, nil
	case <-ctx.Done():
		abandoned.Store(true)
		l.stop(stop)
		// The attempt may have acquired just now: if so, give it back.
		select {
		case r := <-done:
			if r.lost != nil {
				_ = lk.Unlock()
			}
		default:
		}
		return nil, fmt.Errorf("consullock: acquire %s: %w", l.opts.Key, ctx.Err())
	}
}

// stop closes a pending Lock call's stop channel, once.
func (l *locker) stop(stop chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending[stop] {
		delete(l.pending, stop)
		close(stop)
	}
}

// Close stops the Lock calls still waiting (abandoned Acquires) and waits
// for them to end, which they do after their current blocking query: at most
// LockWaitTime and a request, bounded at LockWaitTime + 5s. Their sessions
// are destroyed by the library as they end. Then it closes the client's idle
// connections. It is idempotent.
func (l *locker) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	l.mu.Lock()
	for stop := range l.pending {
		close(stop)
		delete(l.pending, stop)
	}
	l.mu.Unlock()
	done := make(chan struct{})
	go func() { l.running.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(l.wait + 5*time.Second):
	}
	l.closeIdle()
	return nil
}

var _ backends.Cleaner = (*locker)(nil)

// Cleanup removes the lock's KV key with the library's Lock.Destroy (a
// check-and-set delete), once no session holds it.
func (l *locker) Cleanup(ctx context.Context) error {
	opts := l.opts
	lk, err := l.c.LockOpts(&opts)
	if err != nil {
		return err
	}
	// Destroy refuses while a session still holds the key: a closed
	// client's session that the server has not yet invalidated (at most
	// its TTL, doubled by Consul) or a release still in flight. Cleanup runs
	// once every other client is closed, so that session is stale: wait for
	// it to go, until ctx is done.
	for {
		done := make(chan error, 1)
		go func() { done <- lk.Destroy() }()
		select {
		case err := <-done:
			if !errors.Is(err, api.ErrLockInUse) {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("consul-lock: cleanup: %w (a session still holds the key when the context ended)", api.ErrLockInUse)
		}
	}
}

type lease struct {
	l    *locker
	lk   *api.Lock
	lost <-chan struct{}
	once sync.Once
	err  error
}

// Fence is 0: consul/api's Lock gives no fencing token.
func (g *lease) Fence() uint64 { return 0 }

var _ backends.LossNotifier = (*lease)(nil)

// Lost is the channel Lock returned: the library's monitor closes it when the
// key is no longer held by this session.
func (g *lease) Lost() <-chan struct{} { return g.lost }

// Release calls Unlock: Consul releases the key only if this session holds
// it. An invalidated session (the lease expired) releases nothing and
// Release returns nil. Unlock takes no context; if ctx ends first, Release
// returns its error and Unlock finishes in the background.
func (g *lease) Release(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		g.once.Do(func() {
			err := g.lk.Unlock()
			if err != nil && !errors.Is(err, api.ErrLockNotHeld) && !strings.Contains(err.Error(), "invalid session") {
				g.err = fmt.Errorf("consullock: release %s: %w", g.l.opts.Key, err)
			}
		})
		close(done)
	}()
	select {
	case <-done:
		return g.err
	case <-ctx.Done():
		return fmt.Errorf("consullock: release %s: %w", g.l.opts.Key, ctx.Err())
	}
}
