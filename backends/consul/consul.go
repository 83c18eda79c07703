// Package consul is the locksuite adapter for a Consul session lock: a
// session with a TTL (LockDelay 0, behavior release) renewed in the
// background, and a KV acquire of the lock key with that session.
//
// The fencing token is the key's ModifyIndex as read right after the acquire:
// every acquire is a new Raft write, so a later grant carries a larger index.
// Consul invalidates a session that is not renewed after about twice its TTL;
// with behavior "release" the key is then free for the next holder.
package consul

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/internal/adapt"
	"github.com/locksuite/locksuite/backends/internal/consulconn"
)

// Config describes one client of one Consul lock.
type Config struct {
	// Client is the connection to use. If nil, one is made from Address,
	// Token and TLS, falling back to CONSUL_HTTP_ADDR and the other
	// CONSUL_* variables that api.DefaultConfig reads (CONSUL_HTTP_TOKEN,
	// CONSUL_HTTP_SSL, CONSUL_CACERT, CONSUL_CLIENT_CERT, CONSUL_CLIENT_KEY,
	// CONSUL_TLS_SERVER_NAME, ...).
	Client *api.Client
	// Address is host:port or an http(s):// URL of a Consul agent;
	// https:// means TLS.
	Address string
	// Addresses, if not empty, are several agents or servers (host:port) of
	// one cluster, used instead of Address: requests go to one of them, and
	// after a request fails (the server died, a connection broke) the next
	// ones go to the next address, so that renewals outlive the loss of a
	// server. Default none.
	Addresses []string
	// Token is an ACL token, sent in the X-Consul-Token header; empty uses
	// CONSUL_HTTP_TOKEN if set. The lock needs session:write on the agent's
	// node and key:write on Key.
	Token string
	// TLS, if not nil, makes the client talk HTTPS with this configuration
	// (a copy): RootCAs for the agent's CA, Certificates for a client
	// certificate, ServerName when the certificate's name is not Address's
	// host. Default nil: https:// addresses and CONSUL_HTTP_SSL use TLS as
	// api.DefaultConfig sets it up from the environment.
	TLS *tls.Config
	// Dial, if not nil, makes every connection to the agent (TLS, if any,
	// is layered on top): pass suite.Client.Dial, so that the suite can
	// fault this client's network. Default: TCP.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// Key names the lock in the KV store. Required.
	Key string
	// TTL is the session TTL. Consul refuses TTLs below the server's
	// session_ttl_min (10s by default; the harness's server allows 100ms).
	// Default 10s.
	TTL time.Duration
	_   struct{}
}

type locker struct {
	c         *api.Client
	closeIdle func() // the idle connections of a client New made
	key       string
	ttl       time.Duration
	closed    atomic.Bool
}

// New returns a Locker for cfg. It does not contact the agent.
func New(cfg Config) (backends.Locker, error) {
	if err := adapt.Check("consul", cfg.Key, "the lock key", &cfg.TTL, 10*time.Second, 0, ""); err != nil {
		return nil, err
	}
	if strings.HasPrefix(cfg.Key, "/") {
		return nil, fmt.Errorf("consul: key %q must not start with /", cfg.Key)
	}
	c, closeIdle := cfg.Client, func() {}
	if c == nil {
		var err error
		if c, closeIdle, err = consulconn.New("consul", consulconn.Config{Address: cfg.Address, Addresses: cfg.Addresses, Token: cfg.Token, TLS: cfg.TLS, Dial: cfg.Dial}); err != nil {
			return nil, err
		}
	}
	return &locker{c: c, closeIdle: closeIdle, key: cfg.Key, ttl: cfg.TTL}, nil
}

var _ backends.TTLer = (*locker)(nil)

func (l *locker) TTL() time.Duration { return l.ttl }

// Expiry is twice the TTL: Consul's session timer allows that much slack.
func (l *locker) Expiry() time.Duration { return 2 * l.ttl }

// Acquire tries until it holds the lock or ctx is done. A client stalled while
// it waited can find its session invalidated ("invalid session"): it starts
// over with a new session.
func (l *locker) Acquire(ctx context.Context) (backends.Lease, error) {
	return adapt.Retry(ctx, l.attempt, retryable)
}

// retryable: the attempt's own session was invalidated before the grant.
func retryable(err error) bool { return strings.Contains(err.Error(), "invalid session") }

func (l *locker) attempt(ctx context.Context) (backends.Lease, error) {
	if l.closed.Load() {
		return nil, backends.ErrClosed
	}
	wrap := func(err error) error { return adapt.Wrap(ctx, "consul", "acquire", l.key, err) }
	// api.Session().Create omits a zero LockDelay, and the server then applies
	// its 15 s default: the next holder would wait 15 s after an expiry. Send
	// "0s" explicitly.
	var out struct{ ID string }
	_, err := l.c.Raw().Write("/v1/session/create", map[string]any{
		"Name":       "locksuite " + l.key,
		"TTL":        l.ttl.String(),
		"LockDelay":  "0s",
		"Behavior":   api.SessionBehaviorRelease,
		"NodeChecks": []string{},
	}, &out, (&api.WriteOptions{}).WithContext(ctx))
	id := out.ID
	if err != nil {
		return nil, wrap(err)
	}
	rctx, stop := context.WithCancel(context.Background())
	s := &lease{l: l, session: id, stop: stop}
	// Renew every TTL/2; Consul says when the session is gone.
	go adapt.Renew(rctx, l.ttl/2, &s.lost, s.renew)
	var index uint64
	for {
		ok, _, err := l.c.KV().Acquire(&api.KVPair{Key: l.key, Value: []byte(id), Session: id}, (&api.WriteOptions{}).WithContext(ctx))
		if err != nil {
			s.destroy()
			return nil, wrap(err)
		}
		if ok {
			p, _, err := l.c.KV().Get(l.key, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
			if err != nil {
				s.destroy()
				return nil, wrap(err)
			}
			if p != nil && p.Session == id {
				s.fence = p.ModifyIndex
				return s, nil
			}
			// Lost between the acquire and the read: try again.
			continue
		}
		// Held by another session: block until the key changes.
		p, meta, err := l.c.KV().Get(l.key, (&api.QueryOptions{WaitIndex: index, WaitTime: 5 * time.Second}).WithContext(ctx))
		if err != nil {
			s.destroy()
			return nil, wrap(err)
		}
		index = meta.LastIndex
		if p == nil || p.Session == "" {
			index = 0
		}
	}
}

// Close makes Acquire fail with backends.ErrClosed and closes the idle
// connections of the client New made (a Config.Client is left as it is).
func (l *locker) Close() error {
	l.closed.Store(true)
	l.closeIdle()
	return nil
}

type lease struct {
	l       *locker
	session string
	fence   uint64
	stop    context.CancelFunc
	lost    adapt.Lost
}

var _ backends.LossNotifier = (*lease)(nil)

func (s *lease) Fence() uint64 { return s.fence }

func (s *lease) Lost() <-chan struct{} { return s.lost.C() }

// renew renews the session once, within a TTL: false when Consul says the
// session is gone.
func (s *lease) renew(ctx context.Context) bool {
	rctx, cancel := context.WithTimeout(ctx, s.l.ttl)
	defer cancel()
	e, _, err := s.l.c.Session().Renew(s.session, (&api.WriteOptions{}).WithContext(rctx))
	return !(err == nil && e == nil || err != nil && strings.Contains(err.Error(), "not found"))
}

func (s *lease) destroy() {
	s.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = s.l.c.Session().Destroy(s.session, (&api.WriteOptions{}).WithContext(ctx))
}

// Release releases the key only if this session still holds it (Consul's
// release checks the session), then destroys the session.
func (s *lease) Release(ctx context.Context) error {
	s.stop()
	_, _, err := s.l.c.KV().Release(&api.KVPair{Key: s.l.key, Session: s.session}, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil && !strings.Contains(err.Error(), "invalid session") {
		return fmt.Errorf("consul: release %s: %w", s.l.key, err)
	}
	if _, err := s.l.c.Session().Destroy(s.session, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		return fmt.Errorf("consul: destroy session of %s: %w", s.l.key, err)
	}
	return nil
}

var _ backends.Cleaner = (*locker)(nil)

// Cleanup deletes the lock's KV key if no session holds it (a check-and-set
// on its current ModifyIndex, so a holder's key is never removed).
func (l *locker) Cleanup(ctx context.Context) error {
	p, _, err := l.c.KV().Get(l.key, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil || p == nil || p.Session != "" {
		return err
	}
	_, _, err = l.c.KV().DeleteCAS(p, (&api.WriteOptions{}).WithContext(ctx))
	return err
}
