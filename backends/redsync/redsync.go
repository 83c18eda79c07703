// Package redsync is the locksuite adapter for github.com/go-redsync/redsync/v4,
// used exactly as the library ships it: a Redsync over one go-redis v9 pool
// per Redis server (its goredis/v9 pool), a Mutex with WithExpiry(Lease), its
// own LockContext (SET NX PX on every server, granted on a quorum within the
// validity time), and its own UnlockContext (a compare-and-delete script).
//
// With one server it is the single-instance Redis lock; with three or more
// independent servers it is Redlock (quorum len/2+1).
//
// The library does not renew: Mutex.Extend exists but nothing calls it in
// the background, so a holder that runs past the lease has lost the lock.
// Nor does it give a fencing token: a Mutex exposes its random value and its
// validity time (Until), neither of which orders grants. Lease.Fence is 0,
// and the suite's fenced specs are skipped for it.
package redsync

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	rs "github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	rsgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/internal/adapt"
	"github.com/locksuite/locksuite/backends/internal/dialer"
)

// Config describes one client of one redsync lock.
type Config struct {
	// Clients are the connections to use, one per independent Redis server.
	// If empty, one client per Addrs entry is made and closed by Close.
	Clients []goredis.UniversalClient
	// Addrs are the servers, each host:port or a redis:// URL; used when
	// Clients is empty. One entry is the single-instance lock; three or
	// more independent servers make it Redlock.
	Addrs []string
	// TLS, if not nil, is the TLS configuration (a copy) of every Addrs
	// entry that is a rediss:// URL, instead of the system's roots that
	// the URL implies: RootCAs for a private CA, Certificates for a client
	// certificate. An empty ServerName becomes the entry's host. Entries
	// given as host:port or redis:// stay plain. Default nil.
	TLS *tls.Config
	// Dial, if not nil, makes every connection to the servers, as
	// redis.Config.Dial does. Default: TCP.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// Key is the lock's name (the Redis key on every server). Required.
	Key string
	// Lease is the mutex's expiry (redsync.WithExpiry). Default 8s,
	// redsync's own default.
	Lease time.Duration
	// Options are further redsync mutex options, applied after
	// WithExpiry(Lease). Default none: the library's defaults (32 tries per
	// LockContext, 50-250 ms apart; drift factor 0.01; each attempt bounded
	// by 5 % of the expiry).
	Options []rs.Option
	_       struct{}
}

type locker struct {
	rs     *rs.Redsync
	own    []goredis.UniversalClient
	key    string
	lease  time.Duration
	nodes  int
	opts   []rs.Option
	closed atomic.Bool
}

// New returns a Locker for cfg. It does not contact the servers.
func New(cfg Config) (backends.Locker, error) {
	if err := adapt.Check("redsync", cfg.Key, "the lock key", &cfg.Lease, 8*time.Second, time.Millisecond, "Redis's 1ms PX resolution"); err != nil {
		return nil, err
	}
	l := &locker{key: cfg.Key, lease: cfg.Lease}
	clients := cfg.Clients
	if len(clients) == 0 {
		if len(cfg.Addrs) == 0 {
			return nil, errors.New("redsync: no server: set Config.Clients or Config.Addrs")
		}
		for _, a := range cfg.Addrs {
			var opts *goredis.Options
			if strings.Contains(a, "://") {
				o, err := goredis.ParseURL(a)
				if err != nil {
					l.closeOwn()
					return nil, fmt.Errorf("redsync: bad URL %q: %w (expected redis://[user:password@]host:port/db)", a, err)
				}
				opts = o
				if cfg.TLS != nil && o.TLSConfig != nil {
					opts.TLSConfig = cfg.TLS.Clone()
					if opts.TLSConfig.ServerName == "" {
						opts.TLSConfig.ServerName = o.TLSConfig.ServerName // the URL's host
					}
				}
			} else {
				opts = &goredis.Options{Addr: a}
			}
			c := dialer.Redis(opts, cfg.Dial)
			l.own = append(l.own, c)
			clients = append(clients, c)
		}
	}
	pools := make([]rsredis.Pool, len(clients))
	for i, c := range clients {
		pools[i] = rsgoredis.NewPool(c)
	}
	l.rs, l.nodes = rs.New(pools...), len(pools)
	l.opts = append([]rs.Option{rs.WithExpiry(cfg.Lease)}, cfg.Options...)
	return l, nil
}

var _ backends.TTLer = (*locker)(nil)

func (l *locker) TTL() time.Duration { return l.lease }

// Expiry is TTL: the service frees the lease on time.
func (l *locker) Expiry() time.Duration { return l.TTL() }

// Acquire calls the mutex's LockContext until it succeeds or ctx is done
// (LockContext itself gives up after its tries, with ErrFailed or the lock
// taken on a quorum: the lock is held, so Acquire tries again). It returns
// an error at once when no server could be asked for a reason other than a
// timeout (a refused connection, a bad password).
func (l *locker) Acquire(ctx context.Context) (backends.Lease, error) {
	for {
		if l.closed.Load() {
			return nil, backends.ErrClosed
		}
		m := l.rs.NewMutex(l.key, l.opts...)
		err := m.LockContext(ctx)
		if err == nil {
			return &lease{l: l, m: m}, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("redsync: acquire %s: %w", l.key, ctx.Err())
		}
		if fatal(err) {
			return nil, fmt.Errorf("redsync: acquire %s: %w", l.key, err)
		}
	}
}

// fatal reports whether err from LockContext says the servers cannot be
// asked: some node failed with an error that is not a timeout, and no node
// said the lock was taken.
func fatal(err error) bool {
	var taken *rs.ErrTaken
	var nodeTaken *rs.ErrNodeTaken
	if errors.Is(err, rs.ErrFailed) || errors.As(err, &taken) || errors.As(err, &nodeTaken) {
		return false
	}
	bad := false
	walk(err, func(e error) {
		var re *rs.RedisError
		if errors.As(e, &re) && !isTimeout(re.Err) {
			bad = true
		}
	})
	return bad
}

func walk(err error, f func(error)) {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			walk(e, f)
		}
		return
	}
	f(err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.As(err, &ne) && ne.Timeout()
}

func (l *locker) closeOwn() {
	for _, c := range l.own {
		_ = c.Close()
	}
}

func (l *locker) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	l.closeOwn()
	return nil
}

type lease struct {
	l *locker
	m *rs.Mutex
}

// Fence is 0: redsync gives no fencing token.
func (s *lease) Fence() uint64 { return 0 }

// Release calls the mutex's UnlockContext, which deletes the key on each
// server only if it still holds this grant's value. A lock that expired or
// was taken by another grant is not this lease's: Release returns nil. It
// returns an error only when too few servers could be asked.
func (s *lease) Release(ctx context.Context) error {
	ok, err := s.m.UnlockContext(ctx)
	if ok || err == nil {
		return nil
	}
	failed := false
	walk(err, func(e error) {
		var re *rs.RedisError
		if errors.As(e, &re) {
			failed = true
		}
	})
	if failed {
		return fmt.Errorf("redsync: release %s: %w", s.l.key, err)
	}
	return nil
}
