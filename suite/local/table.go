package local

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/consul"
	"github.com/locksuite/locksuite/backends/consullock"
	"github.com/locksuite/locksuite/backends/etcd"
	"github.com/locksuite/locksuite/backends/etcdmutex"
	"github.com/locksuite/locksuite/backends/mysql"
	"github.com/locksuite/locksuite/backends/natskv"
	"github.com/locksuite/locksuite/backends/pgxact"
	"github.com/locksuite/locksuite/backends/postgres"
	"github.com/locksuite/locksuite/backends/redis"
	"github.com/locksuite/locksuite/backends/redsync"
	"github.com/locksuite/locksuite/backends/zklock"
	"github.com/locksuite/locksuite/backends/zookeeper"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/internal/tlsdial"
	"github.com/locksuite/locksuite/suite"
)

// kind is how a backend is listed and selected.
type kind int

const (
	adapter kind = iota // Names: one adapter per lock service; "all"
	library             // Libraries: a lock library as it ships; "libraries"
	cluster             // Clusters: a replicated service, for failover
)

// service is the server, or set of servers, that backends run on: how the
// harness starts one, how the environment names one, how to check it, and
// the defaults of the backends on it.
type service struct {
	name string
	// lease is the default lease: short, so that the pause scenarios take
	// well under a second where the server allows it.
	lease time.Duration
	// pause and duration size the chaos scenarios: each pause longer than
	// the service's expiry with the default lease, so that a pause inside
	// a critical section lets a second holder in. pauses 0 means 4.
	pause, duration time.Duration
	pauses          int
	// vars are the environment variables that name and configure a server
	// the user runs; those set are passed on to worker processes. The
	// first one names the server (see environ).
	vars []string
	// shared are variables of another service (its credentials and TLS
	// settings) that fromEnv reads too: passed on to worker processes as
	// vars are, and listed under that service.
	shared []string
	// fromEnv reads vars: the named server's connection, or nil when the
	// environment names none. Nil fromEnv: the first of vars is the
	// server's address, as is.
	fromEnv func() (*conn, error)
	// start starts a throwaway server (or several) on loopback.
	start func(ctx context.Context) (servers.Server, error)
	// timeout bounds start and the probe of a named server. Default 30 s.
	timeout time.Duration
	// probe checks that a server answers this client (credentials
	// included); nil: not checked.
	probe func(ctx context.Context, c *conn) error
	// diagnose names the problem and the fix of a failed probe (auth.go).
	diagnose func(s symptoms) (problem, fix string)
	// startTLS: TLS is negotiated inside the protocol (Postgres's
	// SSLRequest), so a bare TLS handshake says nothing about a failure.
	startTLS bool
	// hostPortOf is the first server's host:port in an endpoint; nil: the
	// endpoint is host:port.
	hostPortOf func(endpoint string) string
	// environ is the variable (name=value) that points a worker process at
	// a server the harness started; nil: vars[0]=endpoint.
	environ func(endpoint string) string
	// servers gives the suite a server the harness started, so that the
	// server-fault and failover scenarios can stop, kill or move it; nil:
	// no member to act on.
	servers func(sv *service, s servers.Server) suite.Servers
	// nodes, if not nil, starts the service anew on nodes, for the node
	// scenarios (suite.Config.Nodes).
	nodes *onNodes
	// connect, if not nil, is the connection to a server the harness
	// started when its endpoint is not enough for the clients (kube: a
	// rest.Config and a namespace), with the variables (conn.env) that
	// point a worker process at it.
	connect func(s servers.Server) (*conn, error)
}

// backend is one backend this package provides: the service it runs on and
// how to make its Locker there.
type backend struct {
	name string
	kind kind
	on   *service
	// newLocker makes one client's Locker on the server(s) at c.
	newLocker func(c *conn, cl suite.Client) (backends.Locker, error)
	// tune, if not nil, adjusts the backend's Config.
	tune func(cfg *suite.Config)
	// whenNamed: started only when named, never by "all" or "libraries"
	// (WhenNamed lists them, not Names or Libraries): its server is costly
	// to build and start.
	whenNamed bool
}

// table lists every backend, in report order within each kind. Adding a
// backend is one entry here (and its service, if it runs on a new one);
// everything else in this package reads the table.
func table() []backend {
	redisSvc := &service{
		name: "redis", lease: 200 * time.Millisecond, pause: 500 * time.Millisecond, duration: 5 * time.Second,
		vars:       []string{"REDIS_URL", RedisCACertEnv},
		fromEnv:    redisFromEnv,
		start:      func(ctx context.Context) (servers.Server, error) { return servers.StartRedis(ctx) },
		probe:      probeRedis,
		diagnose:   diagnoseRedis,
		hostPortOf: urlHost,
		environ: func(ep string) string {
			if !strings.Contains(ep, "://") {
				ep = "redis://" + ep + "/0"
			}
			return "REDIS_URL=" + ep
		},
		servers: redisServers,
	}
	postgresSvc := &service{
		name: "postgres", lease: 200 * time.Millisecond, pause: 500 * time.Millisecond, duration: 5 * time.Second,
		vars:       []string{"DATABASE_URL", "PGHOST", "PGHOSTADDR", "PGPORT", "PGUSER", "PGPASSWORD", "PGPASSFILE", "PGDATABASE", "PGSSLMODE", "PGSSLROOTCERT", "PGSSLCERT", "PGSSLKEY", "PGSSLSNI", "PGSERVICE", "PGSERVICEFILE", "PGCONNECT_TIMEOUT", "PGTARGETSESSIONATTRS"},
		fromEnv:    postgresFromEnv,
		start:      func(ctx context.Context) (servers.Server, error) { return servers.StartPostgres(ctx) },
		probe:      probePostgres,
		diagnose:   diagnosePostgres,
		hostPortOf: pgHostPort,
		startTLS:   true,
		servers:    oneProcess("postgres", noClockPostgres),
	}
	consulSvc := &service{
		name: "consul", lease: 200 * time.Millisecond, pause: 800 * time.Millisecond, duration: 6 * time.Second,
		vars:       []string{"CONSUL_HTTP_ADDR", "CONSUL_HTTP_TOKEN", "CONSUL_HTTP_TOKEN_FILE", "CONSUL_HTTP_SSL", "CONSUL_HTTP_SSL_VERIFY", "CONSUL_CACERT", "CONSUL_CAPATH", "CONSUL_CLIENT_CERT", "CONSUL_CLIENT_KEY", "CONSUL_TLS_SERVER_NAME"},
		fromEnv:    consulFromEnv("consul", "CONSUL_HTTP_ADDR"),
		start:      func(ctx context.Context) (servers.Server, error) { return servers.StartConsul(ctx) },
		probe:      probeConsul,
		diagnose:   diagnoseConsul,
		hostPortOf: stripScheme,
		servers:    oneProcess("consul", noClockConsul),
	}
	etcdSvc := &service{
		name: "etcd", lease: time.Second, pause: 2 * time.Second, pauses: 3, duration: 8 * time.Second,
		vars:       []string{"ETCDCTL_ENDPOINTS", "ETCDCTL_CACERT", "ETCDCTL_CERT", "ETCDCTL_KEY", "ETCDCTL_USER", "ETCDCTL_PASSWORD", "ETCDCTL_INSECURE_SKIP_TLS_VERIFY"},
		fromEnv:    etcdFromEnv("etcd", "ETCDCTL_ENDPOINTS"),
		start:      func(ctx context.Context) (servers.Server, error) { return servers.StartEtcd(ctx) },
		probe:      probeEtcd,
		diagnose:   diagnoseEtcd,
		hostPortOf: func(ep string) string { return stripScheme(strings.Split(ep, ",")[0]) },
		servers:    embedded,
	}
	zookeeperSvc := &service{
		// tickTime 100 ms, minSessionTimeout 200 ms on the harness's server;
		// a stalled session is freed within a tick of its timeout.
		name: "zookeeper", lease: 200 * time.Millisecond, pause: 500 * time.Millisecond, duration: 5 * time.Second,
		vars:       []string{"ZOOKEEPER_ADDRS", ZooKeeperAuthEnv, ZooKeeperCACertEnv, ZooKeeperCertEnv, ZooKeeperKeyEnv},
		fromEnv:    zookeeperFromEnv("zookeeper", "ZOOKEEPER_ADDRS"),
		start:      func(ctx context.Context) (servers.Server, error) { return servers.StartZooKeeper(ctx) },
		probe:      probeZooKeeper,
		diagnose:   diagnoseZooKeeper,
		hostPortOf: func(ep string) string { return strings.TrimSpace(strings.Split(ep, ",")[0]) },
		servers:    oneProcess("zookeeper", noClockZooKeeper),
	}
	mysqlSvc := &service{
		// wait_timeout, which frees a stalled holder's GET_LOCK, has whole
		// seconds: 1 s is the shortest lease.
		name: "mysql", lease: time.Second, pause: 2 * time.Second, pauses: 3, duration: 8 * time.Second,
		vars:       []string{"MYSQL_URL"},
		fromEnv:    mysqlFromEnv,
		diagnose:   diagnoseMySQL,
		hostPortOf: mysqlHostPort,
		start:      func(ctx context.Context) (servers.Server, error) { return servers.StartMariaDB(ctx) },
		probe:      probeMySQL,
		servers:    oneProcess("mariadbd", noClockMariaDB),
	}
	natsSvc := &service{
		// The server refuses per-key TTLs under a second.
		name: "nats", lease: time.Second, pause: 2 * time.Second, pauses: 3, duration: 8 * time.Second,
		vars:       []string{"NATS_URL"},
		fromEnv:    natsFromEnv("NATS_URL"),
		diagnose:   diagnoseNATS,
		hostPortOf: natsHostPort,
		start:      func(ctx context.Context) (servers.Server, error) { return servers.StartNATS(ctx) },
		probe:      probeNATS,
		servers:    embedded,
	}
	redis3Svc := &service{
		name: "redis-3", lease: redisSvc.lease, pause: redisSvc.pause, duration: redisSvc.duration,
		vars:    []string{"LOCKSUITE_REDIS_NODES"},
		shared:  []string{RedisCACertEnv},
		fromEnv: redisNodesFromEnv,
		start:   func(ctx context.Context) (servers.Server, error) { return startRedisNodes(ctx, 3) },
		probe:   probeNodes,
	}
	// The clusters use their single server's defaults. A cluster named by
	// its variable is used as it is, unprobed and without Servers; it takes
	// the credentials and TLS settings of its single server's variables
	// (withSecurityOf), except redis-sentinel.
	clusterOf := func(name, v string, single *service, start func(context.Context) (servers.Cluster, error)) *service {
		return &service{
			name: name, lease: single.lease, pause: single.pause, pauses: single.pauses, duration: single.duration,
			vars:    []string{v},
			start:   func(ctx context.Context) (servers.Server, error) { return start(ctx) },
			timeout: 60 * time.Second, // three processes, and an election
			servers: clusterServersOf,
		}
	}
	etcdCluster := clusterOf("etcd-cluster", "LOCKSUITE_ETCD_CLUSTER", etcdSvc,
		func(ctx context.Context) (servers.Cluster, error) { return servers.StartEtcdCluster(ctx, 3) })
	etcdCluster.withSecurityOf(etcdSvc, etcdFromEnv(etcdCluster.name, etcdCluster.vars[0]))
	etcdCluster.nodes = &onNodes{n: 3, members: 3, start: func(ctx context.Context, h *servers.Hosts, _ suite.NodeOptions) (servers.Cluster, error) {
		return servers.StartEtcdClusterOn(ctx, h, 3)
	}}
	consulCluster := clusterOf("consul-cluster", "LOCKSUITE_CONSUL_CLUSTER", consulSvc,
		func(ctx context.Context) (servers.Cluster, error) { return servers.StartConsulCluster(ctx, 3) })
	consulCluster.withSecurityOf(consulSvc, consulFromEnv(consulCluster.name, consulCluster.vars[0]))
	consulCluster.nodes = &onNodes{n: 3, members: 3, start: func(ctx context.Context, h *servers.Hosts, _ suite.NodeOptions) (servers.Cluster, error) {
		return servers.StartConsulClusterOn(ctx, h, 3)
	}}
	zookeeperEnsemble := clusterOf("zookeeper-ensemble", "LOCKSUITE_ZOOKEEPER_ENSEMBLE", zookeeperSvc,
		func(ctx context.Context) (servers.Cluster, error) { return servers.StartZooKeeperEnsemble(ctx, 3) })
	zookeeperEnsemble.withSecurityOf(zookeeperSvc, zookeeperFromEnv(zookeeperEnsemble.name, zookeeperEnsemble.vars[0]))
	natsCluster := clusterOf("nats-cluster", "LOCKSUITE_NATS_CLUSTER", natsSvc,
		func(ctx context.Context) (servers.Cluster, error) { return servers.StartNATSCluster(ctx, 3) })
	natsCluster.fromEnv = natsFromEnv(natsCluster.vars[0]) // credentials in the URLs
	redisSentinel := clusterOf("redis-sentinel", "LOCKSUITE_REDIS_SENTINEL", redisSvc,
		func(ctx context.Context) (servers.Cluster, error) { return servers.StartRedisSentinel(ctx) })
	redisSentinel.nodes = &onNodes{n: 5, members: 2, direct: redisDirect,
		start: func(ctx context.Context, h *servers.Hosts, o suite.NodeOptions) (servers.Cluster, error) {
			var so servers.SentinelOptions
			if o.MinReplicas {
				so.MinReplicasToWrite, so.MinReplicasMaxLag = 1, 1
			}
			return servers.StartRedisSentinelOn(ctx, h, so)
		}}

	kubeSvc := kubeService()

	return []backend{
		{name: "consul", kind: adapter, on: consulSvc, newLocker: func(c *conn, cl suite.Client) (backends.Locker, error) {
			return consul.New(consul.Config{Address: c.endpoint, Token: c.token, TLS: c.tls, Dial: cl.Dial, Key: cl.Key, TTL: cl.Lease})
		}},
		{name: "etcd", kind: adapter, on: etcdSvc, newLocker: func(c *conn, cl suite.Client) (backends.Locker, error) {
			return etcd.New(etcd.Config{Endpoints: c.addrs(), TLS: c.tls, Username: c.user, Password: c.password, Dial: cl.Dial, Key: cl.Key, TTL: cl.Lease})
		}},
		{name: "postgres", kind: adapter, on: postgresSvc, newLocker: func(c *conn, cl suite.Client) (backends.Locker, error) {
			return postgres.New(postgres.Config{ConnString: strings.TrimSpace(c.endpoint), Dial: cl.Dial, Key: cl.Key, Lease: cl.Lease})
		}},
		{name: "redis", kind: adapter, on: redisSvc, newLocker: func(c *conn, cl suite.Client) (backends.Locker, error) {
			if strings.Contains(c.endpoint, "://") {
				return redis.New(redis.Config{URL: c.endpoint, TLS: c.tls, Dial: cl.Dial, Key: cl.Key, Lease: cl.Lease})
			}
			return redis.New(redis.Config{Addr: c.endpoint, Dial: cl.Dial, Key: cl.Key, Lease: cl.Lease})
		}},
		{name: "zookeeper", kind: adapter, on: zookeeperSvc, newLocker: newZooKeeper},
		{name: "mysql", kind: adapter, on: mysqlSvc, newLocker: func(c *conn, cl suite.Client) (backends.Locker, error) {
			dsn, err := mysql.DSN(strings.TrimSpace(c.endpoint))
			if err != nil {
				return nil, err
			}
			return mysql.New(mysql.Config{DSN: dsn, Dial: cl.Dial, Key: cl.Key, Lease: cl.Lease})
		}},
		{name: "nats-kv", kind: adapter, on: natsSvc, newLocker: func(c *conn, cl suite.Client) (backends.Locker, error) {
			return natskv.New(natskv.Config{URL: c.endpoint, Dial: cl.Dial, Key: cl.Key, Lease: cl.Lease})
		}},
		// kube-apiserver is a 170 MB build (ci/setup.sh) and takes seconds
		// to start: its two backends run when named.
		{name: "k8s-lease", kind: adapter, on: kubeSvc, newLocker: newK8sLease, whenNamed: true},

		// The library adapters take the same credentials and TLS settings
		// as the adapters on their service.
		{name: "consul-lock", kind: library, on: consulSvc, newLocker: func(c *conn, cl suite.Client) (backends.Locker, error) {
			// LockWaitTime 1s: an abandoned Acquire's Lock ends within 1s
			// (Close waits for it), not the library's 15s.
			return consullock.New(consullock.Config{Address: c.endpoint, Token: c.token, TLS: c.tls, Dial: cl.Dial, Key: cl.Key, TTL: cl.Lease, LockDelay: consulLockDelay, LockWaitTime: time.Second})
		}, tune: func(cfg *suite.Config) {
			// A waiter that meets the lock-delay waits consul/api's fixed
			// 5 s (DefaultLockRetryTime) before it tries again: give the
			// second holder that long to get in, so that the pause
			// scenarios measure the lock rather than the default bound
			// (3 × expiry + 2 s).
			cfg.StallTimeout = 3*(2*cfg.Lease+consulLockDelay) + 2*time.Second + 5*time.Second
		}},
		{name: "etcd-mutex", kind: library, on: etcdSvc, newLocker: func(c *conn, cl suite.Client) (backends.Locker, error) {
			// Not cl.Key itself: the counter store's keys are under
			// cl.Key+"/", and the mutex would wait for them as for older
			// waiters.
			return etcdmutex.New(etcdmutex.Config{Endpoints: c.addrs(), TLS: c.tls, Username: c.user, Password: c.password, Dial: cl.Dial, Key: cl.Key + "/mutex", TTL: cl.Lease})
		}},
		{name: "pg-xact", kind: library, on: postgresSvc, newLocker: func(c *conn, cl suite.Client) (backends.Locker, error) {
			return pgxact.New(pgxact.Config{ConnString: strings.TrimSpace(c.endpoint), Dial: cl.Dial, Key: cl.Key, Lease: cl.Lease})
		}},
		{name: "redsync", kind: library, on: redisSvc, newLocker: newRedsync},
		{name: "redsync-3", kind: library, on: redis3Svc, newLocker: newRedsync},
		{name: "zk-lock", kind: library, on: zookeeperSvc, newLocker: func(c *conn, cl suite.Client) (backends.Locker, error) {
			return zklock.New(zklock.Config{Servers: c.addrs(), TLS: c.tls, Auth: c.zkAuth(), Dial: cl.Dial, Key: cl.Key, Lease: cl.Lease})
		}},
		{name: "leader-election", kind: library, on: kubeSvc, newLocker: newLeaderElection, whenNamed: true},

		// Every connection of a cluster's client goes through cl.Dial, so
		// the suite's fault path stalls or cuts the client's whole lock
		// traffic, renewals included, whichever member it talks to.
		{name: "consul-cluster", kind: cluster, on: consulCluster, newLocker: func(c *conn, cl suite.Client) (backends.Locker, error) {
			return consul.New(consul.Config{Addresses: c.hostPorts(), Token: c.token, TLS: c.tls, Dial: cl.Dial, Key: cl.Key, TTL: cl.Lease})
		}},
		{name: "etcd-cluster", kind: cluster, on: etcdCluster, newLocker: func(c *conn, cl suite.Client) (backends.Locker, error) {
			return etcd.New(etcd.Config{Endpoints: c.addrs(), TLS: c.tls, Username: c.user, Password: c.password, Dial: cl.Dial, Key: cl.Key, TTL: cl.Lease})
		}},
		{name: "zookeeper-ensemble", kind: cluster, on: zookeeperEnsemble, newLocker: newZooKeeper},
		{name: "nats-cluster", kind: cluster, on: natsCluster, newLocker: func(c *conn, cl suite.Client) (backends.Locker, error) {
			// The lock's bucket replicated on all three servers.
			return natskv.New(natskv.Config{URL: c.endpoint, Dial: cl.Dial, Key: cl.Key, Lease: cl.Lease, Replicas: 3})
		}},
		{name: "redis-sentinel", kind: cluster, on: redisSentinel, newLocker: func(c *conn, cl suite.Client) (backends.Locker, error) {
			// go-redis dials the sentinels and whatever primary they name.
			return redis.New(redis.Config{SentinelAddrs: c.addrs(), MasterName: servers.SentinelMaster, Dial: cl.Dial, Key: cl.Key, Lease: cl.Lease})
		}},
	}
}

// consulLockDelay is consul-lock's LockDelay: equal to its session TTL, the
// proportion of the library's defaults (SessionTTL 15s, LockDelay 15s)
// scaled to the suite's short lease.
const consulLockDelay = 200 * time.Millisecond

func newRedsync(c *conn, cl suite.Client) (backends.Locker, error) {
	return redsync.New(redsync.Config{Addrs: c.addrs(), TLS: c.tls, Dial: cl.Dial, Key: cl.Key, Lease: cl.Lease})
}

func newZooKeeper(c *conn, cl suite.Client) (backends.Locker, error) {
	return zookeeper.New(zookeeper.Config{Servers: c.addrs(), TLS: c.tls, Auth: c.zkAuth(), Dial: cl.Dial, Key: cl.Key, Lease: cl.Lease})
}

// probeZooKeeper asks every server whether it runs (ruok; over TLS with
// c's settings, within 2 s: a plain ruok at a TLS port gets no answer),
// then opens a session with c's digest user (zkProbe).
func probeZooKeeper(ctx context.Context, c *conn) error {
	for _, a := range c.addrs() {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		out, err := servers.FourLetterWordTLS(rctx, a, "ruok", withServerName(c.tls, hostOnly(a)))
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %w", a, err)
		}
		if !strings.Contains(out, "imok") {
			return fmt.Errorf("%s answers ruok with %q, not imok (allow the command: 4lw.commands.whitelist=ruok,srvr)", a, out)
		}
	}
	return zkProbe(ctx, c)
}

// zkProbe opens a session with c's TLS settings and digest user, and asks
// whether /locksuite exists: a server that enforces authentication refuses
// a session without it. If /locksuite exists, it lists it: the digest
// scheme takes any password, and a wrong one shows only against the ACL of
// znodes the right one made (the suite's parents, made with the lock's ACL).
func zkProbe(ctx context.Context, c *conn) error {
	dialTLS := tlsdial.Wrap((&net.Dialer{}).DialContext, c.tls)
	dial := func(network, addr string, timeout time.Duration) (net.Conn, error) {
		dctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return dialTLS(dctx, network, addr)
	}
	zc, events, err := zk.Connect(c.addrs(), 4*time.Second, zk.WithDialer(dial), zk.WithLogInfo(false), zk.WithLogger(zkQuiet{}))
	if err != nil {
		return err
	}
	defer zc.Close()
	for session := false; !session; {
		select {
		case ev := <-events:
			session = ev.State == zk.StateHasSession
		case <-ctx.Done():
			return fmt.Errorf("no session: %w", ctx.Err())
		}
	}
	if a := c.zkAuth(); a != "" {
		if err := zc.AddAuth("digest", []byte(a)); err != nil {
			return fmt.Errorf("digest auth: %w", err)
		}
	}
	ok, _, err := zc.Exists("/locksuite")
	if err == nil && ok {
		_, _, err = zc.Children("/locksuite")
	}
	if err != nil {
		return fmt.Errorf("/locksuite: %w", err)
	}
	return nil
}

// zkQuiet drops go-zookeeper's log lines.
type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}

// probeMySQL connects with the DSN (or mysql:// URL) and pings.
func probeMySQL(ctx context.Context, c *conn) error {
	dsn, err := mysql.DSN(strings.TrimSpace(c.endpoint))
	if err != nil {
		return err
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	return db.PingContext(ctx)
}

// probeNATS connects and asks for JetStream's account info: the lock needs
// JetStream.
func probeNATS(ctx context.Context, c *conn) error {
	nc, err := nats.Connect(c.endpoint, nats.Timeout(3*time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if _, err := js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("JetStream: %w (start nats-server with -js)", err)
	}
	return nil
}

// lookup returns the backend named n.
func lookup(n string) (backend, bool) {
	for _, b := range table() {
		if b.name == n {
			return b, true
		}
	}
	return backend{}, false
}

// serviceOf returns the service named n, or the one backend n runs on.
func serviceOf(n string) (*service, bool) {
	var found *service
	for _, b := range table() {
		if b.on.name == n {
			return b.on, true
		}
		if b.name == n {
			found = b.on
		}
	}
	return found, found != nil
}

// services lists every service once, in table order.
func services() []*service {
	var out []*service
	seen := map[string]bool{}
	for _, b := range table() {
		if !seen[b.on.name] {
			seen[b.on.name] = true
			out = append(out, b.on)
		}
	}
	return out
}

// namesOf lists the backends of kind k that "all" or "libraries" start.
func namesOf(k kind) []string {
	var out []string
	for _, b := range table() {
		if b.kind == k && !b.whenNamed {
			out = append(out, b.name)
		}
	}
	return out
}

func namesWhenNamed() []string {
	var out []string
	for _, b := range table() {
		if b.whenNamed {
			out = append(out, b.name)
		}
	}
	return out
}

// Variables are the environment variables that name a server the user
// runs instead of one the harness starts, one per service, in table order
// (DATABASE_URL stands for libpq's PG* variables too).
func Variables() []string {
	var out []string
	for _, s := range services() {
		out = append(out, s.vars[0])
	}
	return out
}

func leases() map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, b := range table() {
		out[b.name] = b.on.lease
	}
	return out
}

// withSecurityOf makes a cluster named by its variable read the
// credentials and TLS settings of single's variables (all of single.vars
// but its address) with fromEnv, and pass them on to worker processes.
func (s *service) withSecurityOf(single *service, fromEnv func() (*conn, error)) {
	s.shared = single.vars[1:]
	s.fromEnv = fromEnv
}

// chaos is the service's default chaos sizes.
func (s *service) chaos() suite.Chaos {
	c := suite.NewConfig().Chaos
	c.Interval, c.Pauses, c.StallEvery = 500*time.Millisecond, 4, 10
	c.Pause, c.Duration = s.pause, s.duration
	if s.pauses > 0 {
		c.Pauses = s.pauses
	}
	return c
}

// unknown is the error for a name that is neither a backend nor a service.
func unknown(n string) error {
	var all []string
	for _, b := range table() {
		all = append(all, b.name)
	}
	return fmt.Errorf("local: unknown backend %q: choose from %s", n, strings.Join(all, ", "))
}
