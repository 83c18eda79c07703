package local

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/redsync"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/internal/redact"
	"github.com/locksuite/locksuite/suite"
)

// redisNodes is n independent redis-servers, for Redlock.
type redisNodes []*servers.Redis

func (r redisNodes) Name() string { return "redis-3" }

// Endpoint is the servers' host:port, comma-separated.
func (r redisNodes) Endpoint() string {
	eps := make([]string, len(r))
	for i, s := range r {
		eps[i] = s.Endpoint()
	}
	return strings.Join(eps, ",")
}

func (r redisNodes) Stop() error {
	for _, s := range r {
		_ = s.Stop()
	}
	return nil
}

func startRedisNodes(ctx context.Context, n int) (servers.Server, error) {
	var out redisNodes
	for range n {
		s, err := servers.StartRedis(ctx)
		if err != nil {
			out.Stop()
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func pingRedis(ctx context.Context, ep string) error {
	o := &goredis.Options{Addr: ep}
	if strings.Contains(ep, "://") {
		var err error
		if o, err = goredis.ParseURL(ep); err != nil {
			return err
		}
	}
	c := goredis.NewClient(o)
	defer c.Close()
	return c.Ping(ctx).Err()
}

// redisAddr is what a redsync client dials: the server ep (host:port or a
// redis:// URL) with its host and port replaced by addr, the client's proxy,
// when addr is set.
func redisAddr(ep, addr string) string {
	ep = strings.TrimSpace(ep)
	if addr == "" {
		return ep
	}
	if !strings.Contains(ep, "://") {
		return addr
	}
	u, err := url.Parse(ep)
	if err != nil {
		return addr
	}
	u.Host = addr
	return u.String()
}

// newRedlock makes a redsync-3 client: redsync over the servers eps, each
// dialed through a fault proxy of this client's own, which Freeze stops all
// at once (the suite's own proxy fronts one server only).
func newRedlock(eps []string, c suite.Client) (backends.Locker, error) {
	f := &freezable{}
	var addrs []string
	for _, ep := range eps {
		target := ep
		if strings.Contains(ep, "://") {
			u, err := url.Parse(ep)
			if err != nil {
				return nil, err
			}
			target = u.Host
		}
		p, err := faults.NewProxy(target)
		if err != nil {
			f.closeProxies()
			return nil, err
		}
		f.proxies = append(f.proxies, p)
		addrs = append(addrs, redisAddr(ep, p.Addr()))
	}
	l, err := redsync.New(redsync.Config{Addrs: addrs, Key: c.Key, Lease: c.Lease})
	if err != nil {
		f.closeProxies()
		return nil, err
	}
	f.Locker = l
	return f, nil
}

// freezable is a Locker whose every connection goes through proxies it
// owns: backends.Freezer freezes them together.
type freezable struct {
	backends.Locker
	proxies []*faults.Proxy
}

var (
	_ backends.Freezer = (*freezable)(nil)
	_ backends.TTLer   = (*freezable)(nil)
	_ backends.Info    = (*freezable)(nil)
)

func (f *freezable) Freeze() (thaw func()) {
	for _, p := range f.proxies {
		p.Freeze()
	}
	return func() {
		for _, p := range f.proxies {
			p.Thaw()
		}
	}
}

// TTL is the wrapped Locker's, or 0 if it declares none.
func (f *freezable) TTL() time.Duration {
	t, _ := backends.TTLOf(f.Locker)
	return t
}

func (f *freezable) Describe() string {
	if i, ok := f.Locker.(backends.Info); ok {
		return i.Describe()
	}
	return ""
}

func (f *freezable) closeProxies() {
	for _, p := range f.proxies {
		p.Thaw()
		_ = p.Close()
	}
}

func (f *freezable) Close() error {
	err := f.Locker.Close()
	f.closeProxies()
	return err
}

// probeNodes checks that every Redis server LOCKSUITE_REDIS_NODES names
// answers.
func probeNodes(ctx context.Context, ep string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, a := range strings.Split(ep, ",") {
		if err := pingRedis(ctx, a); err != nil {
			return &servers.Unavailable{Backend: "redis-3", Err: fmt.Errorf("%s: %w", redact.URL(a), redact.Error(err)),
				Fix: "check LOCKSUITE_REDIS_NODES (comma-separated host:port or redis:// URLs of independent servers), or unset it to let the harness start three redis-servers"}
		}
	}
	return nil
}
