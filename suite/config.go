package suite

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/worker"
	"github.com/locksuite/locksuite/internal/tlsdial"
)

// Client is what NewLocker is told about the client it makes.
type Client struct {
	// ID numbers the clients of one scenario from 0.
	ID int
	// Key is the lock's name, unique to this scenario run and prefixed with
	// Config.Prefix. Every client of a scenario gets the same Key.
	Key string
	// Dial connects to the lock service. A Locker must make every
	// connection to the lock service through it (go-redis Options.Dialer,
	// pgx's DialFunc, gRPC's WithContextDialer, an http.Transport's
	// DialContext): in the scenarios that fault a client's network, it
	// routes each connection through the client's own fault proxy
	// (faults.Path), which stalls, cuts or blackholes all of this client's
	// traffic, renewals included, and nothing else. Elsewhere it dials
	// directly. A Locker that dials nothing through it is skipped by those
	// scenarios unless it implements backends.Freezer. Never nil. The
	// connections to the counter store must not use it.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// Lease is Config.Lease: the lease or TTL to ask the lock service for.
	Lease time.Duration
	// Endpoint is Config.Endpoint: where the lock service is, with the
	// credentials and TLS settings to reach it. Empty unless the Config
	// sets it (suite/local's does).
	Endpoint Endpoint
	_        struct{}
}

// DialTLS returns Dial with a TLS client handshake on top when conf is not
// nil (its ServerName defaulting to the address's host), for a client
// library whose dialer hook replaces its own TLS dial (go-redis's
// Options.Dialer: set it to c.DialTLS(c.Endpoint.TLS)). With a nil conf it
// returns Dial.
func (c Client) DialTLS(conf *tls.Config) func(ctx context.Context, network, address string) (net.Conn, error) {
	return tlsdial.Wrap(c.Dial, conf)
}

// Endpoint is how a Locker reaches the lock service the way the harness
// does: its address, and the credentials and TLS settings of the
// ecosystem's variables (REDIS_URL, DATABASE_URL and libpq's PG*,
// CONSUL_HTTP_ADDR and CONSUL_HTTP_TOKEN, ETCDCTL_*, ...) for a server the
// user named, or the address of the server the harness started.
// suite/local's Env.Config and Env.ConfigFor set Config.Endpoint; the suite
// hands it to NewLocker as Client.Endpoint. It carries secrets: print none
// of it.
type Endpoint struct {
	// URL is the address as the service's variable gives it, credentials
	// included: a redis:// or rediss:// URL (Redis; redis://host:port/0 for
	// the harness's server), a DSN (Postgres; empty when libpq's PG*
	// variables name the server: pgx reads them itself), Consul's agent
	// address, etcd's comma-separated endpoints, a NATS URL, a MySQL DSN.
	URL string
	// Addrs are the servers' host:port, the first server first.
	Addrs []string
	// Username and Password, from the variables (etcd's ETCDCTL_USER,
	// ZooKeeper's LOCKSUITE_ZOOKEEPER_AUTH) or the URL's user (Redis, NATS,
	// Postgres URLs); empty without.
	Username, Password string
	// Token is Consul's ACL token (CONSUL_HTTP_TOKEN); empty without.
	Token string
	// TLS is the TLS configuration to connect with (rediss://, https://,
	// a CA from LOCKSUITE_REDIS_CACERT, CONSUL_CACERT, ETCDCTL_CACERT,
	// LOCKSUITE_ZOOKEEPER_CACERT);
	// nil for plain connections. Clone it before changing it.
	TLS *tls.Config
	_   struct{}
}

// Config says what to test. Make one with NewConfig, then set at least Name,
// NewLocker and NewStore.
type Config struct {
	// Name is the backend's short name, used in spec text, labels and
	// results ("redis"). Required.
	Name string
	// Service is the kind of lock service the lock runs on ("redis",
	// "postgres", "etcd", ...), a label of every spec besides Name, so that
	// a label filter by service ("redis && fenced") keeps selecting a
	// Config whatever its Name. suite/local's Env.Config and Env.ConfigFor
	// set it. Default empty: the specs are labelled by Name alone.
	Service string
	// StoreService is the Service whose servers hold the counter store
	// (NewStore's), if the store is on one of the lock services of the
	// run. A scenario that faults a service's servers (Scenario.Exclusive:
	// it stops, kills or crashes them) runs beside the runs of other
	// services, but never beside a run whose lock or store is on the
	// service it faults: Execute reads Service and StoreService for that.
	// suite/local's Env.Config and Env.ConfigFor set it. Default empty: the
	// store is on none of them. A Config without a Service is taken to use
	// every service, and its exclusive scenarios run alone.
	StoreService string
	// NewLocker makes one client's Locker. The suite calls it once per
	// simulated process and closes every Locker it made. Required.
	NewLocker func(ctx context.Context, c Client) (backends.Locker, error)
	// NewStore returns the protected counter named name, creating it at 0 if
	// it does not exist (worker processes of a chaos run open the counter
	// their coordinator created); fenced says whether its writes compare
	// fences. name is unique to the run. Required.
	NewStore func(ctx context.Context, name string, fenced bool) (fencing.Store, error)
	// Lease is passed to NewLocker as Client.Lease. Default 500ms, the
	// pause-testing guide's ("Testing Distributed Locks Under Pauses").
	//
	// The defaults here (Lease, Clients, Duration, Work, Chaos) are
	// NewConfig's, for a Config you build yourself. A Config from
	// suite/local (Env.Config, Env.ConfigFor) carries its service's own
	// instead, shorter where the server allows (redis: lease 200ms, chaos
	// pauses of 500ms): local.Defaults gives them, docs/your-lock.md ("Which
	// sizes apply") lists them, and Test prints the sizes each Config runs
	// with (Sizes) before the specs.
	Lease time.Duration
	// Endpoint, if set, is passed to NewLocker as Client.Endpoint: where
	// the lock service is, with its credentials and TLS settings.
	// suite/local's Env.Config and Env.ConfigFor set it from the
	// ecosystem's variables, or to the server the harness started. Default
	// empty.
	Endpoint Endpoint
	// Fenced says whether the store checks fencing tokens. Default false.
	Fenced bool
	// ExpectLoss, unfenced, pins down that this lock without fencing is
	// unsafe, with one rule: a scenario whose every run lets a second holder
	// in while the first runs on asserts the loss ("loses …"); one whose
	// outcome chance or the service's own timing decides only measures it
	// ("measures …": the verdict is reported, and only an unknown one
	// fails), since asserting a loss would fail runs in which the lock did
	// nothing wrong; the rest still assert the invariant ("keeps …", "does
	// not …"). Each scenario's row in the table says which it is (its
	// Expect; Scenarios lists the rows), and the table of what a spec
	// asserts in docs/scenarios.md names them. The control always asserts
	// a lost update. Default false, and ignored when Fenced: every scenario
	// but the control then asserts the invariant. Read when GinkgoTest
	// registers the specs: it decides their text.
	ExpectLoss bool
	// Unsafe, if not empty, says why this lock, in the setting it runs in,
	// can let a second holder in with no fault at all: a Postgres session
	// lock through a pooler in transaction mode, whose unlock can land on
	// another server connection than its lock, and which is re-entrant on
	// the connection that keeps it. Unfenced with ExpectLoss, every
	// scenario that would assert the invariant then measures it
	// ("measures …"), so that a run that lost updates is reported as such
	// and not as a finding; the contract scenario measures it in every
	// Config, fenced or not, with or without ExpectLoss (neither changes
	// the Locker's contract); fenced, or without ExpectLoss, it changes
	// nothing else. A broken row's reason ends with it ("unsafe by design:
	// …"). suite/local sets it for the backends through a transaction
	// pooler. Read when GinkgoTest registers the specs. Default empty.
	Unsafe string
	// Clients is the number of concurrent clients in the baseline and the
	// control. Default 3, as in the pause-testing guide.
	Clients int
	// Duration is how long the baseline and the control run. Default 2s.
	Duration time.Duration
	// Work is the time each critical section spends between its read and its
	// write. Default 20ms, as in the pause-testing guide.
	Work time.Duration
	// StallTimeout bounds how long a holder scenario (deterministic-pause,
	// release-after-expiry, partition-cut, partition-blackhole,
	// session-kill) keeps a holder stalled or cut off waiting for a second
	// client to get the lock. If the lease has not
	// expired by then, the stalled holder is resumed and the lock is judged
	// by the counter as usual (a lock that never expires is safe, and
	// blocks). Default 3 × the Locker's expiry (backends.TTLOf) + 2s,
	// or 30s when the Locker declares none.
	StallTimeout time.Duration
	// Prefix starts every key, counter and lock name the suite makes, so
	// that it touches nothing else on a shared server. Default "locksuite".
	Prefix string
	// Chaos sizes the chaos scenarios, which run clients as worker processes.
	Chaos Chaos
	// WorkerEnv is added to the environment of worker processes. A worker
	// runs this binary again (the same test, or the CLI with the same
	// arguments) and must reach the same servers without starting new ones:
	// suite/local sets REDIS_URL, DATABASE_URL, CONSUL_HTTP_ADDR and
	// ETCDCTL_ENDPOINTS here. Default empty.
	WorkerEnv []string
	// WorkerStarter, if not nil, starts the chaos scenarios' workers
	// instead of running them as processes of this machine: locksuite run
	// --kubernetes starts each as a pod (harness/kuberun). The workers it
	// starts run this binary's worker with the same arguments and
	// WorkerEnv. Default nil: processes of this machine (worker.Local).
	WorkerStarter worker.Starter
	// Artifacts, if not empty, is a directory (created if missing) where
	// every scenario run leaves two files named after its key: its history,
	// a report.Timeline as JSON (the row with its seed, every critical
	// section and every fault), and the same drawn as a self-contained HTML
	// timeline (report.WriteHTML). Row.Artifacts names them. Default empty:
	// none kept.
	Artifacts string
	// Report, if not nil, is called once with every result, including
	// skipped ones, as soon as it is known: when its run ends (runs go
	// ahead of their specs under Execute's Parallel), from the goroutine
	// that ran it, so possibly from several goroutines at once, and with
	// Parallel 1 as its spec ends. Results are also attached to the Ginkgo
	// report as entries named "locksuite".
	Report func(report.Row)
	// Progress, if not nil, is called when a scenario run has set up and
	// starts its clients, then every second until it ends, from another
	// goroutine, with what the run knows so far. Planned is Duration for the
	// baseline and the control, the whole schedule for a chaos run, the
	// lock's expiry (Lease, when it declares none) for the holder
	// scenarios. For progress displays; Report follows with the
	// result. Default nil.
	Progress func(report.Progress)
	// Servers, if not nil, is the lock service's own processes, for the
	// scenarios that fault the server rather than the client (ServerStall,
	// ClockJump, the failover scenarios, which need a Leaderer, and the
	// crash scenarios, which need a Crasher); the
	// fault scenarios also check Servers.Healthy before their fault and
	// after it heals. Read when GinkgoTest registers the specs (a Lagger
	// decides what the failover specs assert). Default nil: those
	// scenarios are skipped.
	Servers Servers
	// Nodes, if not nil, starts the lock service anew on network
	// namespaces (harness/nodes), for the node scenarios (split-brain,
	// split-brain-min-replicas, isolate-leader, partition-random), which
	// partition its members and clients. They need root (CAP_SYS_ADMIN and
	// CAP_NET_ADMIN). suite/local sets it for etcd-cluster, consul-cluster
	// and redis-sentinel. Default nil: those scenarios are skipped.
	Nodes *NodeService

	workerArgv []string // set by Test: how to run this binary as a worker
	_          struct{}
}

// Chaos sizes the chaos scenarios: Workers processes loop acquire → read →
// work → write → release for Duration while faults stop them.
type Chaos struct {
	// Workers is the number of worker processes. Default 3.
	Workers int
	// Duration is how long workers start new critical sections. Default 10s.
	Duration time.Duration
	// Pause is how long a process pause or a stall lasts. Default 800ms: for
	// the pause scenarios to mean anything it must exceed the lock's expiry.
	Pause time.Duration
	// Interval is the time between the end of one pause and the next.
	// Default 700ms.
	Interval time.Duration
	// Pauses is how many process pauses a pause scenario injects. Default 6.
	Pauses int
	// StallEvery makes every StallEvery-th critical section of each worker
	// stall for Pause in the stall scenarios. Default 20.
	StallEvery int
	// Seed seeds the fault schedule; 0 picks one at random. The seed used is
	// in every result, and the same seed gives the same schedule.
	Seed uint64
	// LongLease is the lease of the long-lease scenario, which must be
	// longer than Pause. Default 2.5 × Pause (the pause-testing guide: 2 s against 0.8 s).
	LongLease time.Duration
	_         struct{}
}

// Sizes says what c runs with, in one line: its lease, the baseline's and
// the chaos scenarios' sizes.
func (c Config) Sizes() string {
	long := c.Chaos.LongLease
	if long == 0 {
		long = c.Chaos.Pause * 5 / 2
	}
	return fmt.Sprintf("lease %v; baseline and control: %d clients for %v, work %v; chaos: %d workers for %v, %d pauses of %v every %v, every %dth section stalls, long lease %v",
		c.Lease, c.Clients, c.Duration, c.Work, c.Chaos.Workers, c.Chaos.Duration, c.Chaos.Pauses, c.Chaos.Pause, c.Chaos.Interval, c.Chaos.StallEvery, long)
}

// NewConfig returns a Config with the documented defaults.
func NewConfig() Config {
	return Config{
		Lease:    500 * time.Millisecond,
		Clients:  3,
		Duration: 2 * time.Second,
		Work:     20 * time.Millisecond,
		Prefix:   "locksuite",
		Chaos: Chaos{
			Workers: 3, Duration: 10 * time.Second, Pause: 800 * time.Millisecond,
			Interval: 700 * time.Millisecond, Pauses: 6, StallEvery: 20,
		},
	}
}

// Validate reports the first problem with c, naming the field and the fix.
func (c *Config) Validate() error {
	switch {
	case c.Name == "":
		return errors.New("suite: Config.Name is empty: name the backend, e.g. \"redis\"")
	case c.NewLocker == nil:
		return fmt.Errorf("suite: %s: Config.NewLocker is nil: give a function that makes one client's Locker", c.Name)
	case c.NewStore == nil:
		return fmt.Errorf("suite: %s: Config.NewStore is nil: give the counter store (pgstore.New or etcdstore.New, under fencing/)", c.Name)
	case c.Lease <= 0:
		return fmt.Errorf("suite: %s: Config.Lease is %v: it must be positive (NewConfig sets 500ms)", c.Name, c.Lease)
	case c.Clients < 2:
		return fmt.Errorf("suite: %s: Config.Clients is %d: at least 2 clients are needed to contend", c.Name, c.Clients)
	case c.Duration <= 0:
		return fmt.Errorf("suite: %s: Config.Duration is %v: it must be positive (NewConfig sets 2s)", c.Name, c.Duration)
	case c.Work < 0:
		return fmt.Errorf("suite: %s: Config.Work is %v: it must not be negative", c.Name, c.Work)
	case c.StallTimeout < 0:
		return fmt.Errorf("suite: %s: Config.StallTimeout is %v: it must not be negative (0 means the default)", c.Name, c.StallTimeout)
	case c.Chaos.Workers < 2:
		return fmt.Errorf("suite: %s: Config.Chaos.Workers is %d: at least 2 workers are needed to contend", c.Name, c.Chaos.Workers)
	case c.Chaos.Duration <= 0 || c.Chaos.Pause <= 0 || c.Chaos.Interval < 0:
		return fmt.Errorf("suite: %s: Config.Chaos: Duration %v and Pause %v must be positive, Interval %v not negative (NewConfig sets 10s, 800ms, 700ms)", c.Name, c.Chaos.Duration, c.Chaos.Pause, c.Chaos.Interval)
	case c.Chaos.Pauses < 0 || c.Chaos.StallEvery < 0:
		return fmt.Errorf("suite: %s: Config.Chaos: Pauses %d and StallEvery %d must not be negative", c.Name, c.Chaos.Pauses, c.Chaos.StallEvery)
	case c.Chaos.LongLease != 0 && c.Chaos.LongLease <= c.Chaos.Pause:
		return fmt.Errorf("suite: %s: Config.Chaos.LongLease %v must be longer than Pause %v (0 means 2.5 × Pause)", c.Name, c.Chaos.LongLease, c.Chaos.Pause)
	case c.Prefix == "":
		return fmt.Errorf("suite: %s: Config.Prefix is empty: the suite names everything it makes with it (NewConfig sets \"locksuite\")", c.Name)
	}
	return nil
}
