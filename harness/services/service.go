package services

import (
	"context"
	"strings"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/suite"
)

// Kind is how a backend is listed and selected.
type Kind int

const (
	Adapter  Kind = iota // Names: one adapter per lock service; "all"
	Library              // Libraries: a lock library as it ships; "libraries"
	Cluster              // Clusters: a replicated service, for failover
	Variant              // Variants: a service's durability setting, for the crash scenarios
	Pooler               // Poolers: a lock through a connection pooler
	Language             // Languages: a lock library of another language, through its worker; "languages"
)

// Service is the server, or set of servers, that backends run on: how the
// harness starts one, how the environment names one, how to check it, and
// the defaults of the backends on it. Each service is described once, in
// its folder's entry (harness/services/<service>/entry).
type Service struct {
	Name string
	// Title is how prose names the service ("Redis", "etcd"); Server is
	// what the harness starts for it ("redis-server", "an embedded etcd
	// server"): the CLI's help and the docs say them.
	Title, Server string
	// Lease is the default lease: short, so that the pause scenarios take
	// well under a second where the server allows it.
	Lease time.Duration
	// Pause and Duration size the chaos scenarios: each pause longer than
	// the service's expiry with the default lease, so that a pause inside
	// a critical section lets a second holder in. Pauses 0 means 4.
	Pause, Duration time.Duration
	Pauses          int
	// Vars are the environment variables that name and configure a server
	// the user runs; those set are passed on to worker processes. The
	// first one names the server (see Environ).
	Vars []string
	// Shared are variables of another service (its credentials and TLS
	// settings) that FromEnv reads too: passed on to worker processes as
	// Vars are, and listed under that service.
	Shared []string
	// FromEnv reads Vars: the named server's connection, or nil when the
	// environment names none. Nil FromEnv: the first of Vars is the
	// server's address, as is.
	FromEnv func() (*Conn, error)
	// Start starts a throwaway server (or several) on loopback, with
	// opts: none, a variant's durability, or under WithCrash crashable
	// ones (suite/local's startOptions).
	Start func(ctx context.Context, opts ...servers.Option) (servers.Server, error)
	// Durability is the setting the harness's servers of this service
	// Start with under WithCrash (the packaged defaults where the
	// harness's own are faster and not durable; the harness's for Redis,
	// without persistence, and NATS, whose default is the packaged one),
	// and a variant's servers always: it is what the variant is.
	Durability servers.Durability
	Variant    bool
	// Timeout bounds Start and the probe of a named server. Default 30 s.
	Timeout time.Duration
	// Probe checks that a server answers this client (credentials
	// included); nil: not checked.
	Probe func(ctx context.Context, c *Conn) error
	// Diagnose names the problem and the fix of a failed probe (see
	// Diagnose, the function); nil: only the generic diagnosis.
	Diagnose func(s Symptoms) (problem, fix string)
	// StartTLS: TLS is negotiated inside the protocol (Postgres's
	// SSLRequest), so a bare TLS handshake says nothing about a failure.
	StartTLS bool
	// HostPortOf is the first server's host:port in an endpoint; nil: the
	// endpoint is host:port.
	HostPortOf func(endpoint string) string
	// Environ is the variable (name=value) that points a worker process at
	// a server the harness started; nil: Vars[0]=endpoint.
	Environ func(endpoint string) string
	// Servers gives the suite a server the harness started, so that the
	// server-fault and failover scenarios can stop, kill or move it; nil:
	// no member to act on.
	Servers func(sv *Service, s servers.Server) suite.Servers
	// Nodes, if not nil, starts the service anew on nodes, for the node
	// scenarios (suite.Config.Nodes).
	Nodes *OnNodes
	// Connect, if not nil, is the connection to a server the harness
	// started when its endpoint is not enough for the clients (kube: a
	// rest.Config and a namespace), with the variables (Conn.Env) that
	// point a worker process at it.
	Connect func(s servers.Server) (*Conn, error)
	// Version is the version of the server the harness would start here,
	// for the run's environment report (suite/local's ServerVersions).
	Version func() string
	// NoCompose is why docker-compose.yml has no service of this name
	// (TestDockerCompose); "": it has one.
	NoCompose string
	// Pod is the pod harness/kuberun starts for the service under the
	// CLI's --kubernetes (kuberun.Run.StartPod's name: "etcd", "redis",
	// "nats"); "": it has none, and --kubernetes refuses its backends.
	Pod string
	// Store, if not nil, opens the counter store on the service (see
	// suite/local's stores).
	Store func(ctx context.Context, c *Conn) (*CounterStore, error)
}

// Backend is one backend the suite provides: the service it runs on and
// how to make its Locker there.
type Backend struct {
	Name string
	Kind Kind
	On   *Service
	// NewLocker makes one client's Locker on the server(s) at c.
	NewLocker func(c *Conn, cl suite.Client) (backends.Locker, error)
	// Tune, if not nil, adjusts the backend's Config.
	Tune func(cfg *suite.Config)
	// WhenNamed: started only when named, never by "all" or "libraries"
	// (WhenNamed lists them, not Names or Libraries): its server is costly
	// to build and start.
	WhenNamed bool
	// Modules are the Go modules of the Locker's client (and of the
	// server, where it is embedded), for the environment report.
	Modules []string
	// OwnClient says which protocol the adapter speaks itself, with no
	// client module ("memcached's meta protocol"); Modules is then empty.
	OwnClient string
	// Worker is the shipped worker (backends/foreign/workers) of a
	// language backend: Start prepares it and asks it what it is.
	Worker string
}

// Chaos is the service's default chaos sizes.
func (s *Service) Chaos() suite.Chaos {
	c := suite.NewConfig().Chaos
	c.Interval, c.Pauses, c.StallEvery = 500*time.Millisecond, 4, 10
	c.Pause, c.Duration = s.Pause, s.Duration
	if s.Pauses > 0 {
		c.Pauses = s.Pauses
	}
	return c
}

// StartOf is a service package's Start of one server or a cluster (S),
// as Service.Start.
func StartOf[S servers.Server](start func(context.Context, ...servers.Option) (S, error)) func(context.Context, ...servers.Option) (servers.Server, error) {
	return func(ctx context.Context, opts ...servers.Option) (servers.Server, error) {
		return start(ctx, opts...)
	}
}

// ThreeOf is a service package's StartCluster of n members with n = 3.
func ThreeOf[C servers.Cluster](start func(context.Context, int, ...servers.Option) (C, error)) func(context.Context, ...servers.Option) (C, error) {
	return func(ctx context.Context, opts ...servers.Option) (C, error) { return start(ctx, 3, opts...) }
}

// ClusterOf is a cluster of single's servers (what server says), started
// by start: it takes single's defaults, durability and version. A cluster
// named by its variable v is used as it is, unprobed and without Servers.
func ClusterOf[C servers.Cluster](name, title, server, v string, single *Service, start func(context.Context, ...servers.Option) (C, error)) *Service {
	return &Service{
		Name: name, Title: title, Server: server,
		Lease: single.Lease, Pause: single.Pause, Pauses: single.Pauses, Duration: single.Duration,
		Vars:       []string{v},
		Start:      StartOf(start),
		Durability: single.Durability,
		Timeout:    60 * time.Second, // three processes, and an election
		Servers:    ClusterServersOf,
		Version:    single.Version,
		NoCompose: "a cluster the harness starts itself, so that the failover scenarios can kill its members; " +
			"one of the user's, named by " + v + ", skips them",
	}
}

// VariantOf is single's service with the durability setting d, for the
// crash scenarios: its servers start with d always, under the name name,
// and a server of the user's with that setting is named by the variable v
// (read by fromEnv; single's other variables, its credentials and TLS
// settings, are read too). It takes everything else from single: its
// defaults, probe, Servers, version.
func VariantOf(single *Service, name, title, server, v string, d servers.Durability, fromEnv func() (*Conn, error)) *Service {
	s := *single
	s.Name, s.Title, s.Server, s.Vars, s.Shared, s.FromEnv = name, title, server, []string{v}, single.Vars[1:], fromEnv
	s.Durability, s.Variant = d, true
	s.Store, s.Nodes, s.Pod = nil, nil, ""
	if single.Environ != nil {
		s.Environ = func(ep string) string {
			_, val, _ := strings.Cut(single.Environ(ep), "=")
			return v + "=" + val
		}
	}
	s.NoCompose = "a durability setting of the server the harness starts, for the crash scenarios, which kill and restart it; " +
		"a server of the user's with that setting, named by " + v + ", is used without them"
	return &s
}

// WithSecurityOf makes a cluster named by its variable read the
// credentials and TLS settings of single's variables (all of single.Vars
// but its address) with fromEnv, and pass them on to worker processes.
func (s *Service) WithSecurityOf(single *Service, fromEnv func() (*Conn, error)) *Service {
	s.Shared = single.Vars[1:]
	s.FromEnv = fromEnv
	return s
}

// OnThreeNodes makes s start anew on three nodes, one member each (the
// node scenarios), with start (ThreeOn).
func (s *Service) OnThreeNodes(start func(context.Context, *servers.Hosts, suite.NodeOptions) (servers.Cluster, error)) *Service {
	s.Nodes = &OnNodes{N: 3, Members: 3, Start: start}
	return s
}

// ThreeOn is a service package's StartClusterOn of n members with n = 3,
// for OnThreeNodes (it takes no NodeOptions).
func ThreeOn[C servers.Cluster](start func(context.Context, *servers.Hosts, int, ...servers.Option) (C, error)) func(context.Context, *servers.Hosts, suite.NodeOptions) (servers.Cluster, error) {
	return func(ctx context.Context, h *servers.Hosts, _ suite.NodeOptions) (servers.Cluster, error) {
		return start(ctx, h, 3)
	}
}

// OnNodes is how a cluster starts anew on nodes for the node scenarios
// (suite.Config.Nodes): its processes take nodes 0 … n-1, process i on node
// i, in the order its Start…On documents; the first members of them are its
// members, the rest watchers (Sentinels).
type OnNodes struct {
	N       int // processes
	Members int // the first members of them serve; the others watch
	Start   func(ctx context.Context, h *servers.Hosts, o suite.NodeOptions) (servers.Cluster, error)
	// Direct, if not nil, makes a Locker that talks to the member at addr
	// only, where the backend's own Locker would discover the members
	// (Redis's Sentinel client): a client that keeps its connection to the
	// primary it knows.
	Direct func(addr string, cl suite.Client) (backends.Locker, error)
}

// CounterStore is the counter store open on a service: New makes the
// fencing.Store of one configuration, Close closes the connection.
type CounterStore struct {
	New   func(ctx context.Context, name string, fenced bool) (fencing.Store, error)
	Close func()
}
