// Package local gives the suite its backends on this machine: one adapter
// per lock service (Names), the lock libraries people use (Libraries), the
// Kubernetes Lease backends (WhenNamed), replicated clusters (Clusters),
// the crash scenarios' durability settings (Variants) and the Postgres
// locks through PgBouncer (Poolers).
// It starts each server itself (harness/servers), or connects to one the
// user names with the ecosystem's own environment variables, and builds a
// suite.Config for each backend (Env.Config), or for a lock of the
// caller's on one of its services (Env.ConfigFor).
//
//	REDIS_URL          redis://[user:password@]host:port/db (rediss:// for TLS;
//	                   LOCKSUITE_REDIS_CACERT: its CA's PEM file)
//	DATABASE_URL, PG*  a Postgres server (libpq's variables: PGPASSWORD,
//	                   PGSSLMODE, PGSSLROOTCERT, ...); also the counter store
//	CONSUL_HTTP_ADDR   host:port or URL of a Consul agent (CONSUL_HTTP_TOKEN,
//	                   CONSUL_HTTP_SSL, CONSUL_CACERT, ...)
//	ETCDCTL_ENDPOINTS  comma-separated host:port or URLs (ETCDCTL_CACERT,
//	                   ETCDCTL_CERT, ETCDCTL_KEY, ETCDCTL_USER=user:password);
//	                   the counter store without Postgres
//	ZOOKEEPER_ADDRS    comma-separated host:port of a ZooKeeper ensemble
//	                   (LOCKSUITE_ZOOKEEPER_AUTH=user:password, digest;
//	                   LOCKSUITE_ZOOKEEPER_CACERT for TLS,
//	                   LOCKSUITE_ZOOKEEPER_CERT and _KEY for a client certificate)
//	MYSQL_URL          a go-sql-driver DSN or mysql:// URL of a MySQL or MariaDB server
//	NATS_URL           nats://[user:password@]host:port, comma-separated, of a
//	                   NATS server with JetStream
//	MEMCACHE_SERVERS   host:port of a memcached 1.6 or later (the first of a
//	                   comma-separated list; the variable Rails' Dalli reads)
//	LOCKSUITE_PGBOUNCER_ONE_URL, LOCKSUITE_PGBOUNCER_URL, LOCKSUITE_PGBOUNCER_SESSION_URL
//	                   a PgBouncer (or another pooler) in front of Postgres, in
//	                   transaction pooling with one server connection, in
//	                   transaction and in session pooling (see Poolers)
//	KUBECONFIG         a Kubernetes cluster (k8s-lease, leader-election): the suite
//	                   creates a namespace there and deletes it; with
//	                   LOCKSUITE_KUBE_NAMESPACE, it uses that namespace as it is
//	LOCKSUITE_REDIS_NODES  comma-separated host:port or redis:// URLs of
//	                   independent Redis servers (redsync-3; rediss:// and
//	                   LOCKSUITE_REDIS_CACERT for TLS)
//	LOCKSUITE_CONSUL_CLUSTER, LOCKSUITE_ETCD_CLUSTER, LOCKSUITE_REDIS_SENTINEL,
//	LOCKSUITE_ZOOKEEPER_ENSEMBLE, LOCKSUITE_NATS_CLUSTER
//	                   a cluster of the user's (see Clusters)
//	LOCKSUITE_STORE_URL  the counter store's server alone: a postgres:// URL,
//	                   or an etcd host:port or http:// URL (StoreEnv)
//	LOCKSUITE_REDIS_AOF, LOCKSUITE_REDIS_AOF_ALWAYS, LOCKSUITE_NATS_SYNC
//	                   a server of the user's with a variant's durability
//	                   setting (see Variants)
//
// Each service is described once, in its own file (redis.go, postgres.go,
// ...): its backends, how to start a server, the variables that name one,
// how to probe it and diagnose a failed probe, its defaults, its processes
// and its version (ServerVersions). table.go lists the files in report
// order; Services, Names and the other lists are read from that table, once.
//
// A named server is used as it is and never stopped; everything the suite
// makes there is under suite.Config.Prefix. The credentials reach the
// clients, the counter store and (in Config.WorkerEnv) the worker
// processes, and nothing else: error messages mask them.
package local

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/harness/services"
	"github.com/locksuite/locksuite/harness/services/kube/kubecluster"
	"github.com/locksuite/locksuite/harness/worker"
	"github.com/locksuite/locksuite/internal/tempdir"
	"github.com/locksuite/locksuite/suite"
)

// Names are the backends this package can provide, in report order: one
// adapter per lock service (consul, etcd, postgres, redis, zookeeper,
// mysql, nats-kv; memcached's is in WhenNamed). "all" in the CLI.
var Names = namesOf(services.Adapter)

// Libraries are the lock libraries this package can provide, each used as
// the library ships it, on its service's server and with that service's
// credentials and TLS settings, in report order. They are started only
// when named (not by "all"):
//
//	consul-lock  consul/api's Lock (backends/consullock) on the Consul server
//	etcd-mutex   etcd's concurrency.Mutex on a Session (backends/etcdmutex)
//	pg-xact      pg_try_advisory_xact_lock in a transaction (backends/pgxact)
//	redsync      go-redsync/redsync on one Redis server (backends/redsync)
//	redsync-3    redsync's Redlock over three independent Redis servers
//	zk-lock      go-zookeeper's Lock recipe (backends/zklock) on the ZooKeeper server
var Libraries = namesOf(services.Library)

// Clusters are the replicated backends this package can start, for the
// failover scenarios: consul-cluster (three Consul servers), etcd-cluster
// (three etcd members), redis-sentinel (a Redis primary with an
// asynchronous replica and three Sentinels), zookeeper-ensemble (three
// ZooKeeper servers) and nats-cluster (three NATS servers, the lock's
// bucket replicated on all three). They are started only when named (not
// by "all"), and their Configs carry Servers, so that a scenario can find
// and kill the leader.
//
// A worker process of a chaos run reaches its coordinator's cluster through
// LOCKSUITE_CONSUL_CLUSTER, LOCKSUITE_ETCD_CLUSTER (comma-separated
// host:port of the members), LOCKSUITE_REDIS_SENTINEL (comma-separated
// host:port of the sentinels; the primary's name is servers.SentinelMaster),
// LOCKSUITE_ZOOKEEPER_ENSEMBLE and LOCKSUITE_NATS_CLUSTER.
// A cluster named by these variables is used as it is, without Servers: the
// failover scenarios are skipped for it. etcd-cluster and consul-cluster
// take the credentials and TLS settings of the single server's variables
// (ETCDCTL_USER, ETCDCTL_CACERT, ...; CONSUL_HTTP_TOKEN, CONSUL_CACERT, ...),
// zookeeper-ensemble the LOCKSUITE_ZOOKEEPER_* ones, nats-cluster those in
// its URLs (LOCKSUITE_NATS_CLUSTER); redis-sentinel takes none.
var Clusters = namesOf(services.Cluster)

// Variants are the backends of the crash scenarios' durability settings,
// each its service's adapter on a server started with another setting,
// in report order. They are started only when named (not by "all"); a
// server of the user's with that setting is named by the variable given:
//
//	redis-aof         redis-server with appendonly yes, appendfsync everysec
//	                  (LOCKSUITE_REDIS_AOF)
//	redis-aof-always  redis-server with appendonly yes, appendfsync always
//	                  (LOCKSUITE_REDIS_AOF_ALWAYS)
//	nats-kv-sync      nats-server with JetStream's sync_interval: always
//	                  (LOCKSUITE_NATS_SYNC)
//
// The crash scenarios need the servers started WithCrash.
var Variants = namesOf(services.Variant)

// Poolers are the Postgres locks through PgBouncer (Debian's pgbouncer,
// which ci/setup.sh installs; the harness starts it in front of a Postgres
// of its own), started only when named (not by "all" or "libraries"):
//
//	postgres-pgbouncer          the session advisory lock (backends/postgres) through
//	                            transaction pooling with one server connection, which
//	                            every client shares: unsafe by design (its Config's Unsafe)
//	pg-xact-pgbouncer           the transaction advisory lock (backends/pgxact) through
//	                            transaction pooling
//	postgres-pgbouncer-session  the session lock through session pooling
//	pg-xact-pgbouncer-session   the transaction lock through session pooling
//
// LOCKSUITE_PGBOUNCER_ONE_URL, LOCKSUITE_PGBOUNCER_URL and
// LOCKSUITE_PGBOUNCER_SESSION_URL name a pooler of the user's in each mode
// instead. The adapters through a pooler send no cancel request (their
// Config's Pooler).
var Poolers = namesOf(services.Pooler)

// Languages are the lock libraries of other languages, each as it ships,
// in its own runtime, through its worker (backends/foreign/workers, the
// worker protocol of docs/protocol.md), started only when named (or by
// "languages"):
//
//	redis-py         redis-py's Lock (Debian's python3-redis, /usr/bin/python3) on the Redis server;
//	                 its fence an INCR of key:fence after the grant
//	kazoo            kazoo's Lock (python3-kazoo) on the ZooKeeper server; its fence the lock node's sequence
//	redlock-js       npm redlock 5 (using, with its auto-extension and abort signal) on the Redis server
//	redis-semaphore  npm redis-semaphore's Mutex (auto refresh, onLockLost) on the Redis server
//	curator          Apache Curator's InterProcessMutex (Debian's jars, Java 17) on the ZooKeeper server
//
// Start prepares each named one (the first time on a machine: npm ci,
// javac) and asks it its library's version (Env.Libraries); one whose
// runtime or packages are missing is Unavailable, saying which
// (ci/setup.sh NAME installs them).
var Languages = namesOf(services.Language)

// WhenNamed are the backends started only when named (not by "all" or
// "libraries"): those on a Kubernetes API, kube-apiserver, which
// ci/setup.sh builds (about 5 minutes once) and which takes seconds to
// start, or the cluster KUBECONFIG names (in a namespace the suite creates
// and deletes; with LOCKSUITE_KUBE_NAMESPACE, that namespace as it is),
// and the newest service's, kept out of the default run so that its
// verdicts and time stay as documented:
//
//	k8s-lease        a Lease taken and renewed by compare-and-swap (backends/k8slease)
//	leader-election  client-go's leader election on a Lease (backends/leaderelection)
//	memcached        add with an exptime, a compare-and-delete release (backends/memcached)
var WhenNamed = namesWhenNamed()

// Leases are the default leases per backend (of Names, Libraries, Clusters,
// Poolers and WhenNamed): their service's, as Defaults gives it (200 ms where the
// server allows it, 1 s where it grants whole seconds).
var Leases = leases()

// Env is a set of running or named backends. Close stops what it started.
type Env struct {
	servers []servers.Server
	// libraries: what the language backends' workers reported (Libraries).
	libraries [][2]string
	// started: the suite.Servers of each service this Env started itself.
	started map[string]suite.Servers
	// endpoint per service: host:port (redis, consul, etcd), a DSN
	// (postgres), comma-separated for several servers.
	endpoint map[string]string
	// conns: per service named by the environment, its credentials; per
	// service started with a connect hook, what connect gave.
	conns map[string]*services.Conn
	// Unavailable holds, per backend that could not be started or reached,
	// an error naming it and the fix.
	Unavailable map[string]error
	// Store names the counter store in use: one of Stores.
	Store string
	store *services.CounterStore
	// storeAt is the store's server when it is one of its own (StoreEnv
	// names it, or storeSrv); storeSrv, the one Start started for it.
	storeAt  string
	storeSrv servers.Server
	// clusters the harness started, by name: their Configs carry Servers.
	clusters map[string]servers.Cluster
	crash    bool                      // WithCrash
	given    map[string]servers.Server // WithServer
	crashMu  sync.Mutex                // held by a Crash, and by Close
}

// Option changes what Start provides.
type Option func(*options)

type options struct {
	store string
	crash bool
	given map[string]servers.Server
}

// WithServer makes Start use srv, a server the caller started (the pods of
// locksuite run --kubernetes: harness/kuberun), for the service srv.Name()
// names ("etcd", "redis", "nats": a name of Services), instead of starting one or
// connecting to the one its variables name; its workers reach it as a
// server Start started (Environ). When srv implements suite.Servers, the
// service's Configs take it as their Servers (with its own capabilities:
// suite.Crasher and the rest); otherwise they have no member processes and
// the server faults are skipped. Close stops it.
func WithServer(srv servers.Server) Option {
	return func(o *options) {
		if o.given == nil {
			o.given = map[string]servers.Server{}
		}
		o.given[srv.Name()] = srv
	}
}

// WithStore picks the counter store: one of Stores (Start's error names
// the choices). Default: see Start.
func WithStore(name string) Option { return func(o *options) { o.store = name } }

// Start provides each named backend (or service, for ConfigFor), and the
// counter store: the first of Stores on a service among names (the server
// its variables name, if set), else the last of Stores, which is always
// available embedded; WithStore picks one. When that service is under test
// on a server Start starts, the store gets a server of that kind of its
// own, started alongside, so that a fault of the server under test
// touches no run's store (Config.StoreService is then empty); StoreEnv
// names a server for the store instead. A backend that cannot be had is
// recorded in Unavailable, not returned as an error; the error is for the
// store.
//
// Start first removes what killed runs left: the temporary directories of
// servers and workers whose owning process is gone (tempdir.RemoveStale).
func Start(ctx context.Context, names []string, opts ...Option) (*Env, error) {
	tempdir.RemoveStale()
	kubecluster.RemoveStale() // cgroups of a Kubernetes cluster whose process was killed
	var o options
	for _, f := range opts {
		f(&o)
	}
	e := &Env{endpoint: map[string]string{}, conns: map[string]*services.Conn{}, Unavailable: map[string]error{}, clusters: map[string]servers.Cluster{}, started: map[string]suite.Servers{}, crash: o.crash, given: o.given}
	want := map[string]bool{}
	for _, n := range names {
		if s, ok := serviceOf(n); ok {
			want[s.Name] = true
		} else {
			e.Unavailable[n] = unknown(n)
		}
	}
	candidates, err := chooseStore(o.store, want)
	if err != nil {
		return nil, err
	}
	storeAt := strings.TrimSpace(os.Getenv(StoreEnv))
	var own *services.Service // the store's own server's service, if it gets one
	if storeAt == "" {
		own = ownStoreOf(candidates[0], want, e.given)
	}
	// The services asked for start at once, with the store's own server:
	// most of their time is spent waiting for a server to listen. Then
	// the store, on the first of its candidates that is available
	// (provided now if it was not asked for).
	all := allServices()
	made := make([]provided, len(all))
	var (
		wg      sync.WaitGroup
		ownMade provided
	)
	if own != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ownMade = provide(ctx, own, false, nil)
		}()
	}
	for i, s := range all {
		if want[s.Name] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				made[i] = provide(ctx, s, e.crash, e.given[s.Name])
			}()
		}
	}
	wg.Wait()
	for i, s := range all { // in the table's order: Close stops them in reverse
		if want[s.Name] {
			e.add(s, made[i])
		}
	}
	switch {
	case storeAt != "":
		err = e.openStoreAt(ctx, storeAt, o.store)
	case own != nil && e.openOwnStore(ctx, own, ownMade) == nil:
	default:
		err = e.openStore(ctx, candidates, o.store)
	}
	if err != nil {
		e.Close()
		return nil, err
	}
	for _, n := range names {
		if s, ok := serviceOf(n); ok && s.Name != n && e.Unavailable[s.Name] != nil {
			e.Unavailable[n] = e.Unavailable[s.Name]
		}
	}
	e.probeWorkers(ctx, names)
	return e, nil
}

// probeWorkers prepares the workers of the language backends of names and
// asks each what it is (Libraries), once, in the coordinator only: a chaos
// worker process finds them prepared. A worker that cannot start makes
// its backend Unavailable.
func (e *Env) probeWorkers(ctx context.Context, names []string) {
	if _, isWorker, _ := worker.FromEnv(); isWorker {
		return
	}
	for _, n := range names {
		b, ok := lookup(n)
		if !ok || b.Worker == "" || e.Unavailable[n] != nil || !e.Available(b.On.Name) {
			continue
		}
		lib, err := probeWorker(ctx, b, e.conn(b.On.Name))
		if err != nil {
			e.Unavailable[n] = err
			continue
		}
		e.libraries = append(e.libraries, [2]string{n, lib.String()})
	}
}

// Libraries are the libraries the language backends' workers reported at
// Start, one pair (backend, "library version (runtime)") each, in the
// order named.
func (e *Env) Libraries() [][2]string { return e.libraries }

// provided is what provide made of a service: a server started or named,
// the connection to it, or why it could not be had.
type provided struct {
	srv   servers.Server
	named *services.Conn // the environment's connection, if it named the server
	mc    *services.Conn // connect's, for a server started here
	err   error
	// noPower, for a server started crashable, is why it cannot lose
	// power (FUSE is not available), if it cannot.
	noPower string
	given   bool // WithServer's
}

// provide starts service s (crash: crashable, as WithCrash), takes given
// (WithServer's) if not nil, or connects to the one the environment names.
// It touches no Env: add records what it made.
func provide(ctx context.Context, s *services.Service, crash bool, given servers.Server) provided {
	if given != nil {
		return provided{srv: given, given: true}
	}
	timeout := s.Timeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := named(s)
	if err != nil {
		return provided{err: err}
	}
	var p provided
	switch {
	case c != nil:
		p.srv, p.named, p.err = servers.External(s.Name, c.Endpoint), c, check(ctx, s, c)
		return p
	case crash:
		p.srv, p.err = startRetrying(func() (srv servers.Server, err error) {
			srv, p.noPower, err = startCrashable(ctx, s)
			return srv, err
		})
	default:
		p.srv, p.err = startRetrying(func() (servers.Server, error) { return s.Start(ctx, startOptions(s, false, false)...) })
	}
	if p.err != nil {
		return p
	}
	if s.Connect != nil {
		if p.mc, p.err = s.Connect(p.srv); p.err != nil {
			_ = p.srv.Stop()
		}
	}
	return p
}

// startRetrying calls start again, three times in all at most, while it
// fails because a port was taken: the harness picks free ports
// (servers.FreePort), but another process (a test's CLI, its workers) can
// bind one before the server does; each start picks new ones.
func startRetrying(start func() (servers.Server, error)) (servers.Server, error) {
	for tries := 1; ; tries++ {
		srv, err := start()
		if err == nil || tries == 3 || !strings.Contains(strings.ToLower(err.Error()), "address already in use") {
			return srv, err
		}
	}
}

// add records what provide made of s.
func (e *Env) add(s *services.Service, p provided) {
	if p.named != nil {
		e.conns[s.Name] = p.named
	}
	if p.err != nil {
		e.Unavailable[s.Name] = p.err
		return
	}
	if p.mc != nil {
		e.conns[s.Name] = p.mc
	}
	e.servers = append(e.servers, p.srv)
	e.endpoint[s.Name] = p.srv.Endpoint()
	if p.mc != nil {
		e.endpoint[s.Name] = p.mc.Endpoint // kube: the kubeconfig, as KUBECONFIG names one
	}
	if cl, ok := p.srv.(servers.Cluster); ok {
		e.clusters[s.Name] = cl
	}
	if ss, ok := p.srv.(suite.Servers); ok && p.given {
		e.started[s.Name] = ss
	} else if p.named == nil && s.Servers != nil && !p.given {
		ss := s.Servers(s, p.srv)
		if cs, ok := ss.(services.Crashable); ok {
			cs.SetCrashing(e.crashingOf(p.srv, e.crash, p.noPower))
		}
		e.started[s.Name] = ss
	}
}

// named returns the connection the environment names for s, or nil.
func named(s *services.Service) (*services.Conn, error) {
	var c *services.Conn
	if s.FromEnv != nil {
		var err error
		if c, err = s.FromEnv(); c == nil || err != nil {
			return nil, err
		}
	} else if v := os.Getenv(s.Vars[0]); v != "" {
		c = &services.Conn{Endpoint: v}
	} else {
		return nil, nil
	}
	for _, v := range slices.Concat(s.Vars, s.Shared) {
		if val, ok := os.LookupEnv(v); ok {
			c.Env = append(c.Env, v+"="+val)
		}
	}
	return c, nil
}

// check probes a named server within ctx (at most 5 s), so that a wrong
// address or credentials are reported at once with the variable to fix.
func check(ctx context.Context, s *services.Service, c *services.Conn) error {
	if s.Probe == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := s.Probe(ctx, c)
	var u *servers.Unavailable
	if err == nil || errors.As(err, &u) {
		return err
	}
	return services.Diagnose(s, c, err)
}

// conn returns the connection settings of service n: the environment's, or
// the bare endpoint of a server the harness started.
func (e *Env) conn(n string) *services.Conn {
	if c := e.conns[n]; c != nil {
		return c
	}
	return &services.Conn{Endpoint: e.endpoint[n]}
}

// Endpoint is the address of the server backend or service n runs on, as
// its environment variable would name it (a URL, a DSN, or host:port;
// comma-separated for several servers); empty if n is not Available.
func (e *Env) Endpoint(n string) string {
	if s, ok := serviceOf(n); ok {
		return e.endpoint[s.Name]
	}
	return ""
}

// Available reports whether backend or service n is running or reachable.
func (e *Env) Available(n string) bool { return e.Endpoint(n) != "" }

// Config returns the suite configuration for backend n (of Names, Libraries
// or Clusters), which must be Available, with the given fencing mode and
// the default lease and chaos sizes for n. For a server Start started
// itself, Config.Servers is set (the server-fault and failover scenarios may
// stop it, kill it and move its clock); for one the user named, never.
func (e *Env) Config(n string, fenced bool) suite.Config {
	b, ok := lookup(n)
	if !ok {
		cfg := suite.NewConfig()
		cfg.Name, cfg.Fenced = n, fenced
		cfg.NewLocker = func(context.Context, suite.Client) (backends.Locker, error) { return nil, unknown(n) }
		return cfg
	}
	c := e.conn(b.On.Name)
	cfg := e.config(n, b.On, fenced, func(_ context.Context, cl suite.Client) (backends.Locker, error) { return b.NewLocker(c, cl) })
	cfg.Nodes = nodeService(b)
	if b.Tune != nil {
		b.Tune(&cfg)
	}
	return cfg
}

// ConfigFor returns the suite configuration for a lock of the caller's,
// named name, on service: a service of this package (the Name of one of
// Services: "redis", "postgres", "redis-3", a cluster, ...; or a backend's
// name for the service it runs on), which Start must have made Available.
// The Config carries the service's default lease and chaos sizes
// (Defaults(service), not suite.NewConfig's), the counter store, the
// worker environment and (for a server Start started) Servers; its
// NewLocker is newLocker, which reaches the server at Endpoint(service)
// through suite.Client.Dial. The error names a service that is unknown or
// not available, and why.
func (e *Env) ConfigFor(name, service string, fenced bool, newLocker func(ctx context.Context, c suite.Client) (backends.Locker, error)) (suite.Config, error) {
	s, ok := serviceOf(service)
	if !ok {
		return suite.Config{}, unknown(service)
	}
	if !e.Available(s.Name) {
		if err := e.Unavailable[s.Name]; err != nil {
			return suite.Config{}, err
		}
		return suite.Config{}, fmt.Errorf("local: %s is not available: name it (or a backend on it) to Start", s.Name)
	}
	return e.config(name, s, fenced, newLocker), nil
}

// Defaults returns the sizes that Config and ConfigFor give a Config of
// backend or service n: suite.NewConfig's, with the service's own lease
// and chaos sizes (shorter than NewConfig's where the server allows), and
// the backend's own adjustments. Only Name and the sizes are set.
func Defaults(n string) (suite.Config, error) {
	s, ok := serviceOf(n)
	if !ok {
		return suite.Config{}, unknown(n)
	}
	cfg := sized(n, s)
	if b, ok := lookup(n); ok && b.Tune != nil {
		b.Tune(&cfg)
	}
	return cfg, nil
}

// sized is suite.NewConfig with service s's lease and chaos sizes.
func sized(name string, s *services.Service) suite.Config {
	cfg := suite.NewConfig()
	cfg.Name, cfg.Service, cfg.Lease, cfg.Chaos = name, s.Name, s.Lease, s.Chaos()
	return cfg
}

func (e *Env) config(name string, s *services.Service, fenced bool, newLocker func(context.Context, suite.Client) (backends.Locker, error)) suite.Config {
	cfg := sized(name, s)
	cfg.Fenced, cfg.Endpoint = fenced, e.endpointOf(s)
	cfg.NewLocker, cfg.NewStore, cfg.WorkerEnv = newLocker, e.newStore, e.Environ()
	if e.storeAt == "" {
		cfg.StoreService = e.Store
	}
	if ss, ok := e.started[s.Name]; ok {
		cfg.Servers = ss
	}
	return cfg
}

// endpointOf is how to reach service s as the harness does (suite.Endpoint):
// the user's variables, credentials and TLS settings included, or the
// address of the server Start started, as its variable would name it.
func (e *Env) endpointOf(s *services.Service) suite.Endpoint {
	c := e.conn(s.Name)
	ep := suite.Endpoint{URL: strings.TrimSpace(c.Endpoint), Username: c.User, Password: c.Password, Token: c.Token, TLS: c.TLS}
	if e.conns[s.Name] == nil && ep.URL != "" && s.Environ != nil {
		_, ep.URL, _ = strings.Cut(s.Environ(ep.URL), "=") // redis://host:port/0
	}
	for _, a := range c.Addrs() {
		if s.HostPortOf != nil {
			a = s.HostPortOf(a)
		}
		if a != "" {
			ep.Addrs = append(ep.Addrs, a)
		}
	}
	if len(ep.Addrs) == 0 && c.Endpoint != "" && s.HostPortOf != nil {
		ep.Addrs = []string{s.HostPortOf(c.Endpoint)} // libpq's PG* variables
	}
	if u, err := url.Parse(ep.URL); err == nil && u.User != nil && ep.Username == "" && ep.Password == "" {
		ep.Username = u.User.Username()
		ep.Password, _ = u.User.Password()
	}
	return ep
}

func (e *Env) newStore(ctx context.Context, name string, fenced bool) (fencing.Store, error) {
	return e.store.New(ctx, name, fenced)
}

// Environ names every server of e in the ecosystem's variables, so that a
// process started with them (a chaos worker) connects to these servers
// instead of starting its own. For a server the user named, they are the
// user's variables, credentials and TLS settings included: pass them to
// child processes only, never print them.
func (e *Env) Environ() []string {
	var out []string
	// A server the harness started takes no credentials: blank the
	// variables of another service that its fromEnv would read (a cluster
	// reads its single server's), unless a server the user named sets
	// them below.
	for n := range e.endpoint {
		if s, _ := serviceOf(n); e.conns[n] == nil {
			for _, v := range s.Shared {
				out = append(out, v+"=")
			}
		}
	}
	if e.storeAt != "" {
		out = append(out, StoreEnv+"="+e.storeAt)
	}
	for n, ep := range e.endpoint {
		if c := e.conns[n]; c != nil {
			// Named by the user: the same variables, credentials included.
			out = append(out, c.Env...)
			continue
		}
		s, _ := serviceOf(n)
		if s.Environ != nil {
			out = append(out, s.Environ(ep))
		} else if strings.TrimSpace(ep) != "" {
			out = append(out, s.Vars[0]+"="+ep)
		}
	}
	return out
}

// CopyLogs copies the log of every server Start started into dir, as
// <backend>.log (the counter store's own server's as store-<name>.log),
// and returns the paths it wrote. Servers the user named have no log
// here. Call it before Close, which removes the logs.
func (e *Env) CopyLogs(dir string) ([]string, error) {
	var out []string
	for _, s := range append(slices.Clip(e.servers), e.storeSrv) {
		if s == nil {
			continue
		}
		name := s.Name()
		if s == e.storeSrv {
			name = "store-" + name
		}
		l, ok := s.(servers.Logger)
		if !ok {
			continue
		}
		b, err := os.ReadFile(l.Log())
		if err != nil {
			return out, fmt.Errorf("local: %s's log: %w", name, err)
		}
		p := filepath.Join(dir, name+".log")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return out, err
		}
		out = append(out, p)
	}
	return out, nil
}

// Close stops the servers Start started and closes its connections. It
// waits for a crash in progress to end.
func (e *Env) Close() {
	e.crashMu.Lock()
	defer e.crashMu.Unlock()
	if e.store != nil {
		e.store.Close()
	}
	if e.storeSrv != nil {
		_ = e.storeSrv.Stop()
	}
	for i := len(e.servers) - 1; i >= 0; i-- {
		_ = e.servers[i].Stop()
	}
}
