// Package redis is the locksuite adapter for the single-instance Redis lock:
// SET key token NX PX lease, released by a compare-and-delete script.
//
// The fencing token is taken by INCR on a companion key inside the same Lua
// script as the SET, so no pause can fall between the grant and its token:
// a later grant always carries a larger token. The lease is not renewed: a
// holder that runs past it has lost the lock, and only a fenced store can stop
// its late write.
package redis

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/internal/adapt"
	"github.com/locksuite/locksuite/backends/internal/dialer"
	"github.com/locksuite/locksuite/internal/redact"
	"github.com/locksuite/locksuite/internal/tlsdial"
)

// urlPassword is the password in a URL that may not parse.
func urlPassword(s string) string {
	if u, err := url.Parse(s); err == nil {
		p, _ := u.User.Password()
		return p
	}
	return ""
}

// Config describes one client of one Redis lock.
type Config struct {
	// Client is the connection to use. If nil, one is made from URL or Addr
	// and closed by Locker.Close.
	Client *goredis.Client
	// URL is a redis:// or rediss:// URL (as in REDIS_URL, parsed by
	// go-redis's ParseURL: redis://[user:password@]host:port/db; rediss://
	// means TLS, verifying the server's certificate against the system's
	// roots for the URL's host); used when Client is nil.
	URL string
	// Addr is host:port; used when Client and URL are empty, and replacing
	// the URL's host and port when both are set (the suite points it at a
	// fault proxy). The URL's user, password and TLS settings are kept, and
	// TLS still verifies the URL's host name.
	Addr string
	// Username and Password authenticate the connection (an ACL user, or
	// only Password for requirepass). When set they replace the URL's.
	// Default: the URL's, else none.
	Username, Password string
	// TLS, if not nil, makes the connection use TLS with this configuration
	// (a copy), replacing what a rediss:// URL implies; set RootCAs for a
	// private CA. When its ServerName is empty it is the URL's host, or
	// Addr's host without a URL. Default: TLS only for rediss://.
	TLS *tls.Config
	// SentinelAddrs, with MasterName, makes the client ask these Redis
	// Sentinels (host:port) for the primary of MasterName, and follow it
	// when the sentinels fail it over (go-redis's NewFailoverClient). They
	// take precedence over URL and Addr; a URL's password and database
	// still apply. Default none.
	SentinelAddrs []string
	// MasterName is the name the sentinels monitor the primary under.
	// Required with SentinelAddrs.
	MasterName string
	// Dial, if not nil, makes every connection (to sentinels and to the
	// primary; TLS, if any, is layered on top): pass suite.Client.Dial, so
	// that the suite can fault this client's network. Default: TCP.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Key names the lock. The fencing counter lives at Key+":fence".
	// Required.
	Key string
	// Lease is the PX of the SET. Default 500ms; at least 1ms.
	Lease time.Duration
	// Poll is the wait between attempts while the lock is taken. Default
	// 5ms.
	Poll time.Duration
	_    struct{}
}

// acquireScript sets the lock and takes its fence in one atomic step.
var acquireScript = goredis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0`)

// releaseScript deletes the lock only if it still holds this lease's token.
var releaseScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)

type locker struct {
	c      *goredis.Client
	own    bool
	key    string
	lease  time.Duration
	poll   time.Duration
	closed atomic.Bool
}

// New returns a Locker for cfg. It does not contact the server.
func New(cfg Config) (backends.Locker, error) {
	if err := adapt.Check("redis", cfg.Key, "the lock key", &cfg.Lease, 500*time.Millisecond, time.Millisecond, "Redis's 1ms PX resolution"); err != nil {
		return nil, err
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 5 * time.Millisecond
	}
	l := &locker{c: cfg.Client, key: cfg.Key, lease: cfg.Lease, poll: cfg.Poll}
	if l.c == nil && len(cfg.SentinelAddrs) > 0 {
		if cfg.MasterName == "" {
			return nil, errors.New("redis: Config.SentinelAddrs without MasterName: name the primary the sentinels monitor")
		}
		fo := &goredis.FailoverOptions{MasterName: cfg.MasterName, SentinelAddrs: cfg.SentinelAddrs,
			DialTimeout: 2 * time.Second, PoolSize: 2}
		if cfg.URL != "" {
			o, err := goredis.ParseURL(cfg.URL)
			if err != nil {
				return nil, fmt.Errorf("redis: bad URL %s: %v (expected redis://[user:password@]host:port/db)",
					redact.URL(cfg.URL), redact.Error(err, urlPassword(cfg.URL)))
			}
			fo.Username, fo.Password, fo.DB, fo.TLSConfig = o.Username, o.Password, o.DB, o.TLSConfig
		}
		if cfg.Username != "" {
			fo.Username = cfg.Username
		}
		if cfg.Password != "" {
			fo.Password = cfg.Password
		}
		if cfg.TLS != nil {
			fo.TLSConfig = cfg.TLS.Clone()
		}
		if cfg.Dial != nil {
			fo.Dialer = tlsdial.Wrap(cfg.Dial, fo.TLSConfig)
		}
		l.c, l.own = goredis.NewFailoverClient(fo), true
	}
	if l.c == nil {
		var opts *goredis.Options
		switch {
		case cfg.URL != "":
			o, err := goredis.ParseURL(cfg.URL)
			if err != nil {
				return nil, fmt.Errorf("redis: bad URL %s: %v (expected redis://[user:password@]host:port/db)",
					redact.URL(cfg.URL), redact.Error(err, urlPassword(cfg.URL)))
			}
			opts = o
			if cfg.Addr != "" {
				opts.Addr = cfg.Addr
			}
		case cfg.Addr != "":
			opts = &goredis.Options{Addr: cfg.Addr}
		default:
			return nil, errors.New("redis: no server: set Config.Client, Config.URL or Config.Addr")
		}
		if cfg.Username != "" {
			opts.Username = cfg.Username
		}
		if cfg.Password != "" {
			opts.Password = cfg.Password
		}
		if cfg.TLS != nil {
			serverName := ""
			if opts.TLSConfig != nil {
				serverName = opts.TLSConfig.ServerName
			}
			opts.TLSConfig = cfg.TLS.Clone()
			if opts.TLSConfig.ServerName == "" {
				if serverName == "" {
					serverName, _, _ = net.SplitHostPort(opts.Addr)
				}
				opts.TLSConfig.ServerName = serverName
			}
		}
		l.c, l.own = dialer.Redis(opts, cfg.Dial), true
	}
	return l, nil
}

var _ backends.TTLer = (*locker)(nil)

func (l *locker) TTL() time.Duration { return l.lease }

// Expiry is TTL: the service frees the lease on time.
func (l *locker) Expiry() time.Duration { return l.TTL() }

func (l *locker) Acquire(ctx context.Context) (backends.Lease, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	g, err := adapt.Poll(ctx, &l.closed, l.poll, func(ctx context.Context) (backends.Lease, error) {
		fence, err := acquireScript.Run(ctx, l.c, []string{l.key, l.key + ":fence"}, token, l.lease.Milliseconds()).Int64()
		if err != nil || fence == 0 {
			return nil, err
		}
		return &lease{l: l, token: token, fence: uint64(fence)}, nil
	})
	if err != nil && !errors.Is(err, backends.ErrClosed) {
		return nil, adapt.Wrap(ctx, "redis", "acquire", l.key, err)
	}
	return g, err
}

func (l *locker) Close() error {
	if l.closed.Swap(true) || !l.own {
		return nil
	}
	return l.c.Close()
}

type lease struct {
	l     *locker
	token string
	fence uint64
}

func (s *lease) Fence() uint64 { return s.fence }

func (s *lease) Release(ctx context.Context) error {
	if err := releaseScript.Run(ctx, s.l.c, []string{s.l.key}, s.token).Err(); err != nil {
		return fmt.Errorf("redis: release %s: %w", s.l.key, err)
	}
	return nil
}

var _ backends.Cleaner = (*locker)(nil)

// Cleanup deletes the lock's fence counter. The lock key needs nothing: a
// released lease deleted it, an expired one is gone.
func (l *locker) Cleanup(ctx context.Context) error {
	if err := l.c.Del(ctx, l.key+":fence").Err(); err != nil {
		return fmt.Errorf("redis: cleanup %s: %w", l.key, err)
	}
	return nil
}
