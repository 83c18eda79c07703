package local

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/suite"
)

// kind is how a backend is listed and selected.
type kind int

const (
	adapter  kind = iota // Names: one adapter per lock service; "all"
	library              // Libraries: a lock library as it ships; "libraries"
	cluster              // Clusters: a replicated service, for failover
	variant              // Variants: a service's durability setting, for the crash scenarios
	pooler               // Poolers: a lock through a connection pooler
	language             // Languages: a lock library of another language, through its worker; "languages"
)

// service is the server, or set of servers, that backends run on: how the
// harness starts one, how the environment names one, how to check it, and
// the defaults of the backends on it. Each service is described once, in
// its file (redis.go, postgres.go, ...).
type service struct {
	name string
	// title is how prose names the service ("Redis", "etcd"); server is
	// what the harness starts for it ("redis-server", "an embedded etcd
	// server"): the CLI's help and the docs say them.
	title, server string
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
	// start starts a throwaway server (or several) on loopback, with
	// opts: none, a variant's durability, or under WithCrash crashable
	// ones (crashOptions).
	start func(ctx context.Context, opts ...servers.Option) (servers.Server, error)
	// durability is the setting the harness's servers of this service
	// start with under WithCrash (the packaged defaults where the
	// harness's own are faster and not durable; the harness's for Redis,
	// without persistence, and NATS, whose default is the packaged one),
	// and a variant's servers always: it is what the variant is.
	durability servers.Durability
	variant    bool
	// timeout bounds start and the probe of a named server. Default 30 s.
	timeout time.Duration
	// probe checks that a server answers this client (credentials
	// included); nil: not checked.
	probe func(ctx context.Context, c *conn) error
	// diagnose names the problem and the fix of a failed probe (see
	// unavailable); nil: only the generic diagnosis.
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
	// version is the version of the server the harness would start here,
	// for the run's environment report (see ServerVersions).
	version func() string
	// noCompose is why docker-compose.yml has no service of this name
	// (TestDockerCompose); "": it has one.
	noCompose string
	// store, if not nil, opens the counter store on the service (see
	// stores in store.go).
	store func(ctx context.Context, c *conn) (*counterStore, error)
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
	// modules are the Go modules of the Locker's client (and of the
	// server, where it is embedded), for the environment report.
	modules []string
	// ownClient says which protocol the adapter speaks itself, with no
	// client module ("memcached's meta protocol"); modules is then empty.
	ownClient string
	// worker is the shipped worker (backends/foreign/workers) of a
	// language backend: Start prepares it and asks it what it is.
	worker string
}

// byService lists each service file's backends, in report order: within
// each kind (adapters, libraries, clusters), backends are reported, and
// "all" runs them, in the order of this list and then of each file's
// entries. Adding a service is its file and one line here.
var byService = [][]backend{
	consulBackends,
	etcdBackends,
	postgresBackends,
	redisBackends,
	zookeeperBackends,
	mysqlBackends,
	natsBackends,
	memcachedBackends,
	kubeBackends,
	pgbouncerBackends,
	languageBackends,
}

// table is every backend, built once: lookups by name, and each service
// once, in report order.
var table = newCatalog(byService)

type catalog struct {
	backends []backend // by kind, then in byService's order
	byName   map[string]*backend
	services []*service // in the order of their first backend
	svcs     map[string]*service
}

func newCatalog(files [][]backend) *catalog {
	c := &catalog{byName: map[string]*backend{}, svcs: map[string]*service{}}
	c.backends = slices.Concat(files...)
	slices.SortStableFunc(c.backends, func(a, b backend) int { return cmp.Compare(a.kind, b.kind) })
	for i := range c.backends {
		b := &c.backends[i]
		c.byName[b.name] = b
		if c.svcs[b.on.name] == nil {
			c.svcs[b.on.name] = b.on
			c.services = append(c.services, b.on)
		}
	}
	return c
}

// lookup returns the backend named n.
func lookup(n string) (backend, bool) {
	if b := table.byName[n]; b != nil {
		return *b, true
	}
	return backend{}, false
}

// serviceOf returns the service named n, or the one backend n runs on.
func serviceOf(n string) (*service, bool) {
	if s := table.svcs[n]; s != nil {
		return s, true
	}
	if b := table.byName[n]; b != nil {
		return b.on, true
	}
	return nil, false
}

// services lists every service once, in table order.
func services() []*service { return table.services }

// namesOf lists the backends of kind k that "all" or "libraries" start.
// Backends is every backend's name, each once: those of Names, Libraries,
// Clusters, WhenNamed, Variants, Poolers and Languages, in that order.
func Backends() []string {
	return slices.Concat(Names, Libraries, Clusters, WhenNamed, Variants, Poolers, Languages)
}

func namesOf(k kind) []string {
	var out []string
	for _, b := range table.backends {
		if b.kind == k && !b.whenNamed {
			out = append(out, b.name)
		}
	}
	return out
}

func namesWhenNamed() []string {
	var out []string
	for _, b := range table.backends {
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

// Service is what the CLI's help and the docs say about one service that
// backends run on.
type Service struct {
	Name   string // as Start, ConfigFor and Defaults take it: "redis", "etcd-cluster", ...
	Title  string // as prose names it: "Redis", "etcd", ...
	Server string // what the harness starts: "redis-server", "an embedded etcd server", ...
	// Variable names a server the user runs instead (REDIS_URL, ...).
	Variable string
	// Backends are the backends on it, in report order.
	Backends []string
}

// Services lists every service, in table order: the adapters' services
// first (in the order of Names), then the others.
func Services() []Service {
	var out []Service
	for _, s := range services() {
		sv := Service{Name: s.name, Title: s.title, Server: s.server, Variable: s.vars[0]}
		for _, b := range table.backends {
			if b.on == s {
				sv.Backends = append(sv.Backends, b.name)
			}
		}
		out = append(out, sv)
	}
	return out
}

func leases() map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, b := range table.backends {
		out[b.name] = b.on.lease
	}
	return out
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

// startOf is servers' StartX of one server or a cluster (S), as
// service.start.
func startOf[S servers.Server](start func(context.Context, ...servers.Option) (S, error)) func(context.Context, ...servers.Option) (servers.Server, error) {
	return func(ctx context.Context, opts ...servers.Option) (servers.Server, error) {
		return start(ctx, opts...)
	}
}

// threeOf is servers' StartXCluster of n members with n = 3.
func threeOf[C servers.Cluster](start func(context.Context, int, ...servers.Option) (C, error)) func(context.Context, ...servers.Option) (C, error) {
	return func(ctx context.Context, opts ...servers.Option) (C, error) { return start(ctx, 3, opts...) }
}

// clusterOf is a cluster of single's servers (what server says), started
// by start: it takes single's defaults, durability and version. A cluster
// named by its variable v is used as it is, unprobed and without Servers.
func clusterOf[C servers.Cluster](name, title, server, v string, single *service, start func(context.Context, ...servers.Option) (C, error)) *service {
	return &service{
		name: name, title: title, server: server,
		lease: single.lease, pause: single.pause, pauses: single.pauses, duration: single.duration,
		vars:       []string{v},
		start:      startOf(start),
		durability: single.durability,
		timeout:    60 * time.Second, // three processes, and an election
		servers:    clusterServersOf,
		version:    single.version,
		noCompose: "a cluster the harness starts itself, so that the failover scenarios can kill its members; " +
			"one of the user's, named by " + v + ", skips them",
	}
}

// variantOf is single's service with the durability setting d, for the
// crash scenarios: its servers start with d always, under the name name,
// and a server of the user's with that setting is named by the variable v
// (read by fromEnv; single's other variables, its credentials and TLS
// settings, are read too). It takes everything else from single: its
// defaults, probe, Servers, version.
func variantOf(single *service, name, title, server, v string, d servers.Durability, fromEnv func() (*conn, error)) *service {
	s := *single
	s.name, s.title, s.server, s.vars, s.shared, s.fromEnv = name, title, server, []string{v}, single.vars[1:], fromEnv
	s.durability, s.variant = d, true
	s.store, s.nodes = nil, nil
	if single.environ != nil {
		s.environ = func(ep string) string {
			_, val, _ := strings.Cut(single.environ(ep), "=")
			return v + "=" + val
		}
	}
	s.noCompose = "a durability setting of the server the harness starts, for the crash scenarios, which kill and restart it; " +
		"a server of the user's with that setting, named by " + v + ", is used without them"
	return &s
}

// withSecurityOf makes a cluster named by its variable read the
// credentials and TLS settings of single's variables (all of single.vars
// but its address) with fromEnv, and pass them on to worker processes.
func (s *service) withSecurityOf(single *service, fromEnv func() (*conn, error)) *service {
	s.shared = single.vars[1:]
	s.fromEnv = fromEnv
	return s
}

// onThreeNodes makes s start anew on three nodes, one member each (the
// node scenarios), with start (threeOn).
func (s *service) onThreeNodes(start func(context.Context, *servers.Hosts, suite.NodeOptions) (servers.Cluster, error)) *service {
	s.nodes = &onNodes{n: 3, members: 3, start: start}
	return s
}

// threeOn is servers' StartXClusterOn of n members with n = 3, for
// onThreeNodes (it takes no NodeOptions).
func threeOn[C servers.Cluster](start func(context.Context, *servers.Hosts, int, ...servers.Option) (C, error)) func(context.Context, *servers.Hosts, suite.NodeOptions) (servers.Cluster, error) {
	return func(ctx context.Context, h *servers.Hosts, _ suite.NodeOptions) (servers.Cluster, error) {
		return start(ctx, h, 3)
	}
}

// unknown is the error for a name that is neither a backend nor a service.
func unknown(n string) error {
	var all []string
	for _, b := range table.backends {
		all = append(all, b.name)
	}
	return fmt.Errorf("local: unknown backend %q: choose from %s", n, strings.Join(all, ", "))
}
