package entry

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/redis"
	"github.com/locksuite/locksuite/backends/redsync"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/harness/services"
	"github.com/locksuite/locksuite/internal/redact"
	"github.com/locksuite/locksuite/suite"
)

// CACertEnv names a PEM file of the CA that signed a rediss:// server's
// certificate. Redis has no variable of its own for it; without it, the
// system's roots are used.
const CACertEnv = "LOCKSUITE_REDIS_CACERT"

// Service is one redis-server.
var Service = &services.Service{
	Pod:  "redis",
	Name: "redis", Title: "Redis", Server: "redis-server",
	Lease: 200 * time.Millisecond, Pause: 500 * time.Millisecond, Duration: 5 * time.Second,
	Vars:       []string{"REDIS_URL", CACertEnv},
	FromEnv:    redisFromEnv("redis", "REDIS_URL"),
	Start:      services.StartOf(servers.StartRedis),
	Probe:      probeRedis,
	Diagnose:   diagnoseRedis,
	HostPortOf: urlHost,
	Environ: func(ep string) string {
		if !strings.Contains(ep, "://") {
			ep = "redis://" + ep + "/0"
		}
		return "REDIS_URL=" + ep
	},
	Servers: redisServers,
	Version: func() string { return services.BinVersion(nil, "redis-server") },
}

// redis3Service is three independent redis-servers, for Redlock.
var redis3Service = &services.Service{
	Name: "redis-3", Title: "three Redis servers", Server: "three redis-servers",
	Lease: Service.Lease, Pause: Service.Pause, Duration: Service.Duration,
	Vars:    []string{"LOCKSUITE_REDIS_NODES"},
	Shared:  []string{CACertEnv},
	FromEnv: redisNodesFromEnv,
	Start:   func(ctx context.Context, _ ...servers.Option) (servers.Server, error) { return startRedisNodes(ctx, 3) },
	Probe:   probeNodes,
	Version: Service.Version,
	NoCompose: "three independent servers: run three redis services of the compose file's kind and name them in " +
		"LOCKSUITE_REDIS_NODES",
}

// redisSentinel is a Redis primary with an asynchronous replica and three
// Sentinels; named by its variable, it takes no credentials or TLS
// settings. On nodes, it takes five: the primary, the replica, and a
// Sentinel on each of the others.
var redisSentinel = func() *services.Service {
	s := services.ClusterOf("redis-sentinel", "Redis with Sentinel", "redis-server and redis-sentinel (a primary, a replica, three Sentinels)", "LOCKSUITE_REDIS_SENTINEL", Service, servers.StartRedisSentinel)
	s.Nodes = &services.OnNodes{N: 5, Members: 2, Direct: redisDirect,
		Start: func(ctx context.Context, h *servers.Hosts, o suite.NodeOptions) (servers.Cluster, error) {
			var so servers.SentinelOptions
			if o.MinReplicas {
				so.MinReplicasToWrite, so.MinReplicasMaxLag = 1, 1
			}
			return servers.StartRedisSentinelOn(ctx, h, so)
		}}
	return s
}()

const goRedisModule = "github.com/redis/go-redis/v9"

// redisAOF and redisAOFAlways are redis-server with an append-only file,
// fsynced every second or at every write (Redis's answer to a restart
// that forgets a lock), for the crash scenarios.
var (
	redisAOF = services.VariantOf(Service, "redis-aof", "Redis with appendfsync everysec", "redis-server with appendonly yes, appendfsync everysec",
		"LOCKSUITE_REDIS_AOF", servers.DurabilityAppendFsyncEverysec, redisFromEnv("redis-aof", "LOCKSUITE_REDIS_AOF"))
	redisAOFAlways = services.VariantOf(Service, "redis-aof-always", "Redis with appendfsync always", "redis-server with appendonly yes, appendfsync always",
		"LOCKSUITE_REDIS_AOF_ALWAYS", servers.DurabilityAppendFsyncAlways, redisFromEnv("redis-aof-always", "LOCKSUITE_REDIS_AOF_ALWAYS"))
)

var Backends = []services.Backend{
	{Name: "redis", Kind: services.Adapter, On: Service, Modules: []string{goRedisModule}, NewLocker: newRedis},
	{Name: "redsync", Kind: services.Library, On: Service, NewLocker: newRedsync, Modules: []string{"github.com/go-redsync/redsync/v4", goRedisModule}},
	{Name: "redsync-3", Kind: services.Library, On: redis3Service, NewLocker: newRedsync, Modules: []string{"github.com/go-redsync/redsync/v4", goRedisModule}},
	{Name: "redis-sentinel", Kind: services.Cluster, On: redisSentinel, Modules: []string{goRedisModule}, NewLocker: func(c *services.Conn, cl suite.Client) (backends.Locker, error) {
		// go-redis dials the sentinels and whatever primary they name.
		return redis.New(redis.Config{SentinelAddrs: c.Addrs(), MasterName: servers.SentinelMaster, Dial: cl.Dial, Key: cl.Key, Lease: cl.Lease})
	}},
	{Name: "redis-aof", Kind: services.Variant, On: redisAOF, Modules: []string{goRedisModule}, NewLocker: newRedis},
	{Name: "redis-aof-always", Kind: services.Variant, On: redisAOFAlways, Modules: []string{goRedisModule}, NewLocker: newRedis},
}

// newRedis is the redis adapter's Locker on the server at c (an address,
// or a redis:// or rediss:// URL).
func newRedis(c *services.Conn, cl suite.Client) (backends.Locker, error) {
	if strings.Contains(c.Endpoint, "://") {
		return redis.New(redis.Config{URL: c.Endpoint, TLS: c.TLS, Dial: cl.Dial, Key: cl.Key, Lease: cl.Lease})
	}
	return redis.New(redis.Config{Addr: c.Endpoint, Dial: cl.Dial, Key: cl.Key, Lease: cl.Lease})
}

func newRedsync(c *services.Conn, cl suite.Client) (backends.Locker, error) {
	return redsync.New(redsync.Config{Addrs: c.Addrs(), TLS: c.TLS, Dial: cl.Dial, Key: cl.Key, Lease: cl.Lease})
}

// redisDirect is a Redis client of one server, for a client that keeps
// talking to the primary it knows.
func redisDirect(addr string, cl suite.Client) (backends.Locker, error) {
	return redis.New(redis.Config{Addr: addr, Dial: cl.Dial, Key: cl.Key, Lease: cl.Lease})
}

// redisFromEnv returns the fromEnv of the Redis service n named by
// variable v (REDIS_URL, a variant's): it reads v and
// LOCKSUITE_REDIS_CACERT.
func redisFromEnv(n, v string) func() (*services.Conn, error) {
	return func() (*services.Conn, error) {
		c := &services.Conn{Endpoint: os.Getenv(v)}
		if c.Endpoint == "" {
			return nil, nil
		}
		o, err := goredis.ParseURL(c.Endpoint)
		if err != nil {
			return nil, &servers.Unavailable{Backend: n, Err: redact.Error(fmt.Errorf("%s %s: %w", v, redact.URL(c.Endpoint), err)),
				Fix: "set " + v + " to redis://[user:password@]host:port/db, or rediss:// for TLS"}
		}
		c.Secrets = append(c.Secrets, o.Password)
		c.TLS = o.TLSConfig
		if f := os.Getenv(CACertEnv); f != "" {
			pool, err := services.LoadCA(f)
			if err != nil {
				return nil, &servers.Unavailable{Backend: n, Err: fmt.Errorf("%s: %w", CACertEnv, err), Fix: "set " + CACertEnv + " to a PEM file of the server's CA"}
			}
			if c.TLS == nil {
				return nil, &servers.Unavailable{Backend: n, Err: fmt.Errorf("%s is set but %s is not rediss://", CACertEnv, v),
					Fix: "use a rediss:// URL for TLS, or unset " + CACertEnv}
			}
			c.TLS.RootCAs = pool
		}
		return c, nil
	}
}

// redisNodesFromEnv reads LOCKSUITE_REDIS_NODES, and LOCKSUITE_REDIS_CACERT
// for its rediss:// URLs.
func redisNodesFromEnv() (*services.Conn, error) {
	c := &services.Conn{Endpoint: os.Getenv("LOCKSUITE_REDIS_NODES")}
	if c.Endpoint == "" {
		return nil, nil
	}
	for _, a := range c.Addrs() {
		if o, err := goredis.ParseURL(a); err == nil {
			c.Secrets = append(c.Secrets, o.Password)
		}
	}
	if f := os.Getenv(CACertEnv); f != "" && strings.Contains(c.Endpoint, "rediss://") {
		pool, err := services.LoadCA(f)
		if err != nil {
			return nil, &servers.Unavailable{Backend: "redis-3", Err: fmt.Errorf("%s: %w", CACertEnv, err), Fix: "set " + CACertEnv + " to a PEM file of the servers' CA"}
		}
		c.TLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return c, nil
}

// probeRedis: PING, over TLS and with the URL's credentials if any.
func probeRedis(ctx context.Context, c *services.Conn) error {
	o := &goredis.Options{Addr: c.Endpoint}
	if strings.Contains(c.Endpoint, "://") {
		var err error
		if o, err = goredis.ParseURL(c.Endpoint); err != nil {
			return err
		}
	}
	if c.TLS != nil {
		o.TLSConfig = c.TLS
	}
	o.DialTimeout, o.MaxRetries = 3*time.Second, -1
	rc := goredis.NewClient(o)
	defer rc.Close()
	return rc.Ping(ctx).Err()
}

func diagnoseRedis(s services.Symptoms) (problem, fix string) {
	switch {
	case s.Has("WRONGPASS"):
		return "authentication failed: wrong user name or password", "put the right ACL user and password in REDIS_URL: redis://user:password@host:port/0 (rediss:// for TLS)"
	case s.Has("NOAUTH", "NOPERM"):
		return "authentication failed: the server requires a password", "put the ACL user and password in REDIS_URL: redis://user:password@host:port/0 (rediss:// for TLS)"
	case s.Untrusted():
		return "the server's TLS certificate is not trusted", "set " + CACertEnv + " to a PEM file of the CA that signed it"
	case s.PlainToTLS():
		return "server requires TLS", "use a rediss:// URL in REDIS_URL (and " + CACertEnv + " for a private CA)"
	case s.C.TLS != nil && s.Has("first record does not look like a TLS handshake"):
		return "the server does not speak TLS", "use a redis:// URL in REDIS_URL"
	}
	return "", "check REDIS_URL (redis://[user:password@]host:port/db, rediss:// for TLS), or unset it to let the harness start redis-server"
}

// urlHost is the host:port of a redis:// URL, or the endpoint itself.
func urlHost(ep string) string {
	ep = strings.TrimSpace(ep)
	if strings.Contains(ep, "://") {
		if u, err := url.Parse(ep); err == nil {
			return u.Host
		}
	}
	return ep
}

// noFaketime is why the harness's redis-server's clock does not move.
const noFaketime = "libfaketime is not installed (apt-get install faketime, or run ci/setup.sh): the harness cannot move redis-server's clock"

// redisServers: the redis-server process, whose clock moves when
// libfaketime is installed.
func redisServers(sv *services.Service, s servers.Server) suite.Servers {
	v := s.(*servers.Redis)
	jump := services.Unsupported(noFaketime)
	if c := v.Clock(); c != nil {
		jump = func(ctx context.Context, d time.Duration) error { return jumpRedis(ctx, v.Endpoint(), c, d) }
	}
	return &services.ServerMembers{Service: sv, Server: s, MemberList: services.MembersOf(s, "redis-server", jump)}
}

// jumpRedis moves the clock of the redis-server at addr and waits until its
// TIME shows the jump.
func jumpRedis(ctx context.Context, addr string, c *servers.FakeClock, d time.Duration) error {
	if err := c.Jump(d); err != nil {
		return err
	}
	want := c.Offset()
	rc := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
	defer rc.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		t, err := rc.Time(ctx).Result()
		if err == nil && t.Sub(time.Now()) > want-time.Second {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("redis-server's TIME did not show the %v jump within 5s (last: %v, %v)", d, t, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

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

// probeNodes checks that every Redis server LOCKSUITE_REDIS_NODES names
// answers, with its URL's credentials, and over TLS (with
// LOCKSUITE_REDIS_CACERT's CA, if set) for a rediss:// URL.
func probeNodes(ctx context.Context, c *services.Conn) error {
	const fix = "check LOCKSUITE_REDIS_NODES (comma-separated host:port or redis:// URLs of independent servers), or unset it to let the harness start three redis-servers"
	if len(c.Addrs()) == 0 {
		return &servers.Unavailable{Backend: "redis-3", Err: errors.New("no server in LOCKSUITE_REDIS_NODES"), Fix: fix}
	}
	for _, a := range c.Addrs() {
		nc := &services.Conn{Endpoint: a}
		if strings.HasPrefix(a, "rediss://") {
			nc.TLS = services.WithServerName(c.TLS, services.HostOnly(urlHost(a)))
		}
		if err := probeRedis(ctx, nc); err != nil {
			// The problem as REDIS_URL's would be named; the fix is this
			// variable's.
			if problem, _ := diagnoseRedis(services.Symptoms{Err: err, Msg: err.Error(), C: nc, Addr: urlHost(a)}); problem != "" {
				err = fmt.Errorf("%s (%w)", problem, err)
			}
			return &servers.Unavailable{Backend: "redis-3", Err: fmt.Errorf("%s: %w", redact.URL(a), redact.Error(err, c.Secrets...)),
				Fix: fix + "; credentials and TLS as in REDIS_URL (rediss://user:password@host:port/0, and " + CACertEnv + " for a private CA)"}
		}
	}
	return nil
}
