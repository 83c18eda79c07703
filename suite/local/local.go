// Package local gives the suite its four backends on this machine: it starts
// each server itself (harness/servers), or connects to one the user names
// with the ecosystem's own environment variables, and builds a suite.Config
// for each.
//
//	REDIS_URL          redis://[user:password@]host:port/db   a Redis server
//	                   (rediss:// for TLS; LOCKSUITE_REDIS_CACERT: its CA's PEM file)
//	DATABASE_URL, PG*  a Postgres server (libpq's variables:   lock and counter store
//	                   PGPASSWORD, PGSSLMODE, PGSSLROOTCERT, ...)
//	CONSUL_HTTP_ADDR   host:port or URL of a Consul agent      (CONSUL_HTTP_TOKEN,
//	                   CONSUL_HTTP_SSL, CONSUL_CACERT, ...)
//	ETCDCTL_ENDPOINTS  comma-separated host:port or URLs       lock, and counter store without Postgres
//	                   (ETCDCTL_CACERT, ETCDCTL_CERT, ETCDCTL_KEY, ETCDCTL_USER=user:password)
//	LOCKSUITE_REDIS_NODES  comma-separated host:port or redis:// URLs of independent Redis servers (redsync-3)
//
// Besides the four services' own adapters (Names) it provides the lock
// libraries people use, each on its service's server (Libraries).
//
// A named server is used as it is and never stopped; everything the suite
// makes there is under suite.Config.Prefix. The credentials reach the
// clients, the counter store and (in Config.WorkerEnv) the worker
// processes, and nothing else: error messages mask them.
package local

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/consul"
	"github.com/locksuite/locksuite/backends/consullock"
	"github.com/locksuite/locksuite/backends/etcd"
	"github.com/locksuite/locksuite/backends/etcdmutex"
	"github.com/locksuite/locksuite/backends/pgxact"
	"github.com/locksuite/locksuite/backends/postgres"
	"github.com/locksuite/locksuite/backends/redis"
	"github.com/locksuite/locksuite/backends/redsync"
	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/internal/redact"
	"github.com/locksuite/locksuite/internal/tempdir"
	"github.com/locksuite/locksuite/suite"
)

// Names are the backends this package can provide, in report order: one
// adapter per lock service.
var Names = []string{"consul", "etcd", "postgres", "redis"}

// Libraries are the lock libraries this package can provide, each used as
// the library ships it, in report order. They are started only when named
// (not by "all"):
//
//	consul-lock  consul/api's Lock (backends/consullock) on the Consul server
//	etcd-mutex   etcd's concurrency.Mutex on a Session (backends/etcdmutex)
//	pg-xact      pg_try_advisory_xact_lock in a transaction (backends/pgxact)
//	redsync      go-redsync/redsync on one Redis server (backends/redsync)
//	redsync-3    redsync's Redlock over three independent Redis servers
//
// The library adapters take no TLS settings: against servers named with
// TLS variables, use the four adapters.
var Libraries = []string{"consul-lock", "etcd-mutex", "pg-xact", "redsync", "redsync-3"}

// service names the server a backend runs on: itself for Names and
// Clusters; for Libraries, the service's name ("redis-3" for three
// independent Redis servers).
func service(n string) string {
	switch n {
	case "consul-lock":
		return "consul"
	case "etcd-mutex":
		return "etcd"
	case "pg-xact":
		return "postgres"
	case "redsync":
		return "redis"
	case "redsync-3":
		return "redis-3"
	}
	return n
}

// Leases are the default leases per backend: short, so that the pause
// scenarios take well under a second where the server allows it. etcd grants
// whole seconds and its harness server's floor is 1s.
var Leases = map[string]time.Duration{
	"redis":    200 * time.Millisecond,
	"postgres": 200 * time.Millisecond,
	"consul":   200 * time.Millisecond,
	"etcd":     time.Second,

	"consul-lock": 200 * time.Millisecond,
	"etcd-mutex":  time.Second,
	"pg-xact":     200 * time.Millisecond,
	"redsync":     200 * time.Millisecond,
	"redsync-3":   200 * time.Millisecond,
}

// consulLockDelay is consul-lock's LockDelay: equal to its session TTL, the
// proportion of the library's defaults (SessionTTL 15s, LockDelay 15s)
// scaled to the suite's short lease.
const consulLockDelay = 200 * time.Millisecond

// Chaos are the default chaos sizes per backend: each pause longer than the
// backend's expiry with its default lease (Redis, Postgres 200 ms; Consul
// about 400 ms; etcd 1.5 s), so that a pause inside a critical section lets a
// second holder in; and few enough pauses that a scenario takes seconds.
func Chaos(n string) suite.Chaos {
	c := suite.NewConfig().Chaos
	c.Interval, c.Pauses, c.StallEvery = 500*time.Millisecond, 4, 10
	switch service(n) {
	case "etcd":
		c.Pause, c.Pauses, c.Duration = 2*time.Second, 3, 8*time.Second
	case "consul":
		c.Pause, c.Duration = 800*time.Millisecond, 6*time.Second
	default:
		c.Pause, c.Duration = 500*time.Millisecond, 5*time.Second
	}
	return c
}

// Env is a set of running or named backends. Close stops what it started.
type Env struct {
	servers []servers.Server
	// started: the suite.Servers of each backend this Env started itself.
	started map[string]suite.Servers
	// endpoint per backend: host:port (redis, consul, etcd) or DSN (postgres).
	endpoint map[string]string
	// conns: per backend named by the environment, its credentials.
	conns map[string]*conn
	// Unavailable holds, per backend that could not be started or reached,
	// an error naming it and the fix.
	Unavailable map[string]error
	// Store names the counter store in use: "postgres" or "etcd".
	Store string
	pool  *pgxpool.Pool
	etcd  *clientv3.Client
	// clusters the harness started, by name: their Configs carry Servers.
	clusters map[string]servers.Cluster
}

// Option changes what Start provides.
type Option func(*options)

type options struct{ store string }

// WithStore picks the counter store: "postgres" (the reference guide's) or
// "etcd". Default: Postgres when it is among the backends, else etcd.
func WithStore(name string) Option { return func(o *options) { o.store = name } }

// Start provides each named backend, and the counter store: Postgres if it
// is among names (or named by DATABASE_URL/PG*) or asked for with WithStore,
// else etcd, which is always available embedded. A backend that cannot be
// had is recorded in Unavailable, not returned as an error; the error is for
// the store.
//
// Start first removes what killed runs left: the temporary directories of
// servers and workers whose owning process is gone (tempdir.RemoveStale).
func Start(ctx context.Context, names []string, opts ...Option) (*Env, error) {
	tempdir.RemoveStale()
	var o options
	for _, f := range opts {
		f(&o)
	}
	if o.store != "" && o.store != "postgres" && o.store != "etcd" {
		return nil, fmt.Errorf("local: unknown store %q: choose postgres or etcd", o.store)
	}
	e := &Env{endpoint: map[string]string{}, conns: map[string]*conn{}, Unavailable: map[string]error{}, clusters: map[string]servers.Cluster{}, started: map[string]suite.Servers{}}
	want := map[string]bool{}
	for _, n := range names {
		want[service(n)] = true
	}
	if want["postgres"] || o.store == "postgres" {
		e.provide(ctx, "postgres")
	}
	if o.store == "postgres" && e.endpoint["postgres"] == "" {
		err := e.Unavailable["postgres"]
		e.Close()
		return nil, fmt.Errorf("local: counter store: %v", err)
	}
	if o.store == "etcd" {
		want["etcd"] = true
	}
	if !want["etcd"] && e.endpoint["postgres"] == "" {
		want["etcd"] = true // the store without Postgres
	}
	for _, n := range Names {
		if want[n] && n != "postgres" {
			e.provide(ctx, n)
		}
	}
	for _, n := range append(slices.Clone(Clusters), "redis-3") {
		if want[n] {
			e.provide(ctx, n)
		}
	}
	for _, n := range names {
		if err := e.Unavailable[service(n)]; err != nil && service(n) != n {
			e.Unavailable[n] = err
		}
	}
	if dsn := e.endpoint["postgres"]; dsn != "" && o.store != "etcd" {
		pool, err := pgxpool.New(ctx, strings.TrimSpace(dsn))
		if err != nil {
			e.Close()
			return nil, fmt.Errorf("local: counter store on postgres: %w", redact.Error(err, e.conn("postgres").secrets...))
		}
		e.pool, e.Store = pool, "postgres"
	} else if ep := e.endpoint["etcd"]; ep != "" {
		c, err := e.conn("etcd").etcdClient()
		if err != nil {
			e.Close()
			return nil, fmt.Errorf("local: counter store on etcd: %w", redact.Error(err, e.conn("etcd").secrets...))
		}
		e.etcd, e.Store = c, "etcd"
	} else {
		err := e.Unavailable["etcd"]
		e.Close()
		return nil, fmt.Errorf("local: no counter store: %v", err)
	}
	return e, nil
}

// provide starts backend n or connects to the one the environment names.
func (e *Env) provide(ctx context.Context, n string) {
	timeout := 30 * time.Second
	if isCluster(n) {
		timeout = 60 * time.Second // three processes, and an election
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var (
		s   servers.Server
		c   *conn
		err error
	)
	if n == "redis-3" {
		if ext := os.Getenv("LOCKSUITE_REDIS_NODES"); ext != "" {
			s = servers.External(n, ext)
			err = probeNodes(ctx, ext)
		} else {
			s, err = startRedisNodes(ctx, 3)
		}
	} else if isCluster(n) {
		if ext := clusterFromEnv(n); ext != "" {
			s = servers.External(n, ext)
		} else {
			var cl servers.Cluster
			if cl, err = startCluster(ctx, n); err == nil {
				s, e.clusters[n] = cl, cl
			}
		}
	} else if c, err = fromEnv(n); err != nil {
		e.Unavailable[n] = err
		return
	} else if c != nil {
		s = servers.External(n, c.endpoint)
		e.conns[n] = c
		err = probe(ctx, n, c)
	} else {
		switch n {
		case "redis":
			s, err = servers.StartRedis(ctx)
		case "postgres":
			s, err = servers.StartPostgres(ctx)
		case "consul":
			s, err = servers.StartConsul(ctx)
		case "etcd":
			s, err = servers.StartEtcd(ctx)
		default:
			err = fmt.Errorf("unknown backend %q: choose from %s, %s or %s", n, strings.Join(Names, ", "), strings.Join(Libraries, ", "), strings.Join(Clusters, ", "))
		}
	}
	if err != nil {
		e.Unavailable[n] = err
		return
	}
	e.servers = append(e.servers, s)
	e.endpoint[n] = s.Endpoint()
	if ss := serversFor(s); ss != nil {
		e.started[n] = ss
	}
}

// conn returns the connection settings of backend n: the environment's, or
// the bare endpoint of a server the harness started.
func (e *Env) conn(n string) *conn {
	if c := e.conns[n]; c != nil {
		return c
	}
	return &conn{endpoint: e.endpoint[n]}
}

// etcdClient connects to c's endpoints with its credentials.
func (c *conn) etcdClient() (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: strings.Split(c.endpoint, ","), DialTimeout: 3 * time.Second, Logger: zap.NewNop(),
		TLS: c.tls, Username: c.user, Password: c.password})
}

// probe checks within ctx that a named server answers, and lets this
// client in, so that a wrong address or credentials are reported at once
// with the variable to fix.
func probe(ctx context.Context, n string, c *conn) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var err error
	switch n {
	case "redis":
		var o *goredis.Options
		if o, err = goredis.ParseURL(c.endpoint); err == nil {
			o.TLSConfig, o.DialTimeout, o.MaxRetries = c.tls, 3*time.Second, -1
			rc := goredis.NewClient(o)
			err = rc.Ping(ctx).Err()
			rc.Close()
		}
	case "postgres":
		var p *pgxpool.Pool
		if p, err = pgxpool.New(ctx, strings.TrimSpace(c.endpoint)); err == nil {
			err = p.Ping(ctx)
			p.Close()
		}
	case "consul":
		var cc *consulapi.Client
		if cc, err = consulClient(c); err == nil {
			if _, err = cc.Status().LeaderWithQueryOptions((&consulapi.QueryOptions{}).WithContext(ctx)); err == nil {
				// The leader is public; a key read needs the token.
				_, _, err = cc.KV().Get("locksuite/probe", (&consulapi.QueryOptions{}).WithContext(ctx))
			}
		}
	case "etcd":
		var ec *clientv3.Client
		if ec, err = c.etcdClient(); err == nil {
			if _, err = ec.Status(ctx, strings.Split(c.endpoint, ",")[0]); err == nil {
				// Status is public; a read needs the user.
				_, err = ec.Get(ctx, "locksuite/probe")
			}
			ec.Close()
		}
	}
	if err != nil {
		return unavailable(n, c, err)
	}
	return nil
}

// consulClient is an API client for c.
func consulClient(c *conn) (*consulapi.Client, error) {
	ac := consulapi.DefaultConfig()
	ac.Address, ac.Token = c.endpoint, c.token
	if c.tls != nil {
		ac.Scheme = "https"
		ac.Transport.TLSClientConfig = c.tls.Clone() // the transport adds h2 to its config
	}
	return consulapi.NewClient(ac)
}

// Endpoint is the address of the server backend n runs on, as its
// environment variable would name it (a URL, a DSN, or host:port; comma-
// separated for several servers); empty if n is not Available. An adapter
// that is not among this package's dials it through suite.Client.Dial.
func (e *Env) Endpoint(n string) string { return e.endpoint[service(n)] }

// Available reports whether backend n (of Names, Libraries or Clusters) is
// running or reachable.
func (e *Env) Available(n string) bool { return e.endpoint[service(n)] != "" }

// Config returns the suite configuration for backend n, which must be
// Available, with the given fencing mode and the default lease for n. For a
// server Start started itself, Config.Servers is set (the server-fault
// scenarios may stop it and move its clock); for one the user named, never.
//
// A cluster's client talks to several members, each connection through
// suite.Client.Dial. Its Config has Servers when the harness started the
// cluster.
func (e *Env) Config(n string, fenced bool) suite.Config {
	if isCluster(n) {
		return e.clusterConfig(n, fenced)
	}
	cfg := suite.NewConfig()
	cfg.Name, cfg.Fenced, cfg.Lease = n, fenced, Leases[n]
	svc := service(n)
	ep := e.endpoint[svc]
	cn := e.conn(svc)
	cfg.NewStore = e.newStore
	cfg.Chaos = Chaos(n)
	cfg.WorkerEnv = e.Environ()
	if ss, ok := e.started[svc]; ok {
		cfg.Servers = ss
	}
	eps := clusterAddrs(ep)
	cfg.NewLocker = func(ctx context.Context, c suite.Client) (backends.Locker, error) {
		switch n {
		case "redis":
			if strings.Contains(ep, "://") {
				return redis.New(redis.Config{URL: ep, TLS: cn.tls, Dial: c.Dial, Key: c.Key, Lease: c.Lease})
			}
			return redis.New(redis.Config{Addr: ep, Dial: c.Dial, Key: c.Key, Lease: c.Lease})
		case "postgres":
			return postgres.New(postgres.Config{ConnString: strings.TrimSpace(ep), Dial: c.Dial, Key: c.Key, Lease: c.Lease})
		case "consul":
			return consul.New(consul.Config{Address: ep, Token: cn.token, TLS: cn.tls, Dial: c.Dial, Key: c.Key, TTL: c.Lease})
		case "etcd":
			return etcd.New(etcd.Config{Endpoints: eps, TLS: cn.tls, Username: cn.user, Password: cn.password, Dial: c.Dial, Key: c.Key, TTL: c.Lease})
		case "consul-lock":
			// LockWaitTime 1s: an abandoned Acquire's Lock ends within 1s
			// (Close waits for it), not the library's 15s.
			return consullock.New(consullock.Config{Address: ep, Token: cn.token, Dial: c.Dial, Key: c.Key, TTL: c.Lease, LockDelay: consulLockDelay, LockWaitTime: time.Second})
		case "etcd-mutex":
			// Not c.Key itself: the counter store's keys are under c.Key+"/",
			// and the mutex would wait for them as for older waiters.
			return etcdmutex.New(etcdmutex.Config{Endpoints: eps, Dial: c.Dial, Key: c.Key + "/mutex", TTL: c.Lease})
		case "pg-xact":
			return pgxact.New(pgxact.Config{ConnString: strings.TrimSpace(ep), Dial: c.Dial, Key: c.Key, Lease: c.Lease})
		case "redsync", "redsync-3":
			return redsync.New(redsync.Config{Addrs: eps, Dial: c.Dial, Key: c.Key, Lease: c.Lease})
		}
		return nil, fmt.Errorf("local: unknown backend %q", n)
	}
	if n == "consul-lock" {
		// A waiter that meets the lock-delay waits consul/api's fixed 5 s
		// (DefaultLockRetryTime) before it tries again: give the second
		// holder that long to get in, so that the pause scenarios measure
		// the lock rather than the default bound (3 × expiry + 2 s).
		cfg.StallTimeout = 3*(2*cfg.Lease+consulLockDelay) + 2*time.Second + 5*time.Second
	}
	return cfg
}

func (e *Env) clusterConfig(n string, fenced bool) suite.Config {
	cfg := suite.NewConfig()
	cfg.Name, cfg.Fenced, cfg.Lease = n, fenced, Leases[base(n)]
	cfg.NewStore = e.newStore
	cfg.Chaos = Chaos(base(n))
	cfg.WorkerEnv = e.Environ()
	if c := e.clusters[n]; c != nil {
		cfg.Servers = newServers(c)
	}
	addrs := clusterAddrs(e.endpoint[n])
	cfg.NewLocker = func(ctx context.Context, c suite.Client) (backends.Locker, error) {
		return newClusterLocker(n, addrs, c)
	}
	return cfg
}

func (e *Env) newStore(ctx context.Context, name string, fenced bool) (fencing.Store, error) {
	if e.pool != nil {
		return fencing.NewPostgres(ctx, e.pool, "", name, fenced)
	}
	return fencing.NewEtcd(ctx, e.etcd, name, fenced)
}

// hostPort extracts the host:port a fault proxy forwards to.
func hostPort(n, ep string) string {
	ep = strings.TrimSpace(ep)
	switch n {
	case "etcd":
		ep = strings.Split(ep, ",")[0]
		ep = strings.TrimPrefix(strings.TrimPrefix(ep, "http://"), "https://")
	case "consul":
		ep = strings.TrimPrefix(strings.TrimPrefix(ep, "http://"), "https://")
	case "redis":
		if strings.Contains(ep, "://") {
			if u, err := url.Parse(ep); err == nil {
				ep = u.Host
			}
		}
	case "redis-3":
		// Several servers: the Locker freezes its own proxies (newRedlock).
		ep = ""
	case "postgres":
		// A URL, a key=value DSN or libpq's variables: pgx knows where.
		if pc, err := pgconn.ParseConfig(ep); err == nil {
			ep = net.JoinHostPort(pc.Host, strconv.Itoa(int(pc.Port)))
		}
	}
	return ep
}

// Environ names every server of e in the ecosystem's variables, so that a
// process started with them (a chaos worker) connects to these servers
// instead of starting its own. For a server the user named, they are the
// user's variables, credentials and TLS settings included: pass them to
// child processes only, never print them.
func (e *Env) Environ() []string {
	var out []string
	for n, ep := range e.endpoint {
		if c := e.conns[n]; c != nil {
			// Named by the user: the same variables, credentials included.
			out = append(out, c.env...)
			continue
		}
		switch n {
		case "redis":
			if !strings.Contains(ep, "://") {
				ep = "redis://" + ep + "/0"
			}
			out = append(out, "REDIS_URL="+ep)
		case "postgres":
			if strings.TrimSpace(ep) != "" {
				out = append(out, "DATABASE_URL="+ep)
			}
		case "consul":
			out = append(out, "CONSUL_HTTP_ADDR="+ep)
		case "etcd":
			out = append(out, "ETCDCTL_ENDPOINTS="+ep)
		case "redis-3":
			out = append(out, "LOCKSUITE_REDIS_NODES="+ep)
		default:
			if v := clusterEnv[n]; v != "" {
				out = append(out, v+"="+ep)
			}
		}
	}
	return out
}

// CopyLogs copies the log of every server Start started into dir, as
// <backend>.log, and returns the paths it wrote. Servers the user named have
// no log here. Call it before Close, which removes the logs.
func (e *Env) CopyLogs(dir string) ([]string, error) {
	var out []string
	for _, s := range e.servers {
		l, ok := s.(servers.Logger)
		if !ok {
			continue
		}
		b, err := os.ReadFile(l.Log())
		if err != nil {
			return out, fmt.Errorf("local: %s's log: %w", s.Name(), err)
		}
		p := filepath.Join(dir, s.Name()+".log")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return out, err
		}
		out = append(out, p)
	}
	return out, nil
}

// Close stops the servers Start started and closes its connections.
func (e *Env) Close() {
	if e.pool != nil {
		e.pool.Close()
	}
	if e.etcd != nil {
		e.etcd.Close()
	}
	for i := len(e.servers) - 1; i >= 0; i-- {
		_ = e.servers[i].Stop()
	}
}
