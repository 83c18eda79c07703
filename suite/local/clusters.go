package local

import (
	"context"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/consul"
	"github.com/locksuite/locksuite/backends/etcd"
	"github.com/locksuite/locksuite/backends/redis"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/suite"
)

// Clusters are the replicated backends this package can start, for the
// failover scenarios: three etcd members, three Consul servers, and a Redis
// primary with an asynchronous replica and three Sentinels. They are started
// only when named (not by "all"), and their Configs carry Servers, so that
// a scenario can find and kill the leader.
//
// A worker process of a chaos run reaches its coordinator's cluster through
// LOCKSUITE_ETCD_CLUSTER, LOCKSUITE_CONSUL_CLUSTER (comma-separated
// host:port of the members) and LOCKSUITE_REDIS_SENTINEL (comma-separated
// host:port of the sentinels; the primary's name is servers.SentinelMaster).
// A cluster named by these variables is used as it is, without Servers: the
// failover scenarios are skipped for it.
var Clusters = []string{"consul-cluster", "etcd-cluster", "redis-sentinel"}

// clusterEnv names the variable for each cluster.
var clusterEnv = map[string]string{
	"etcd-cluster":   "LOCKSUITE_ETCD_CLUSTER",
	"consul-cluster": "LOCKSUITE_CONSUL_CLUSTER",
	"redis-sentinel": "LOCKSUITE_REDIS_SENTINEL",
}

// base is the single-server backend whose adapter, lease and chaos sizes a
// cluster uses.
func base(n string) string {
	switch n {
	case "etcd-cluster":
		return "etcd"
	case "consul-cluster":
		return "consul"
	case "redis-sentinel":
		return "redis"
	}
	return n
}

func isCluster(n string) bool { return clusterEnv[n] != "" }

func startCluster(ctx context.Context, n string) (servers.Cluster, error) {
	switch n {
	case "etcd-cluster":
		return servers.StartEtcdCluster(ctx, 3)
	case "consul-cluster":
		return servers.StartConsulCluster(ctx, 3)
	default:
		return servers.StartRedisSentinel(ctx)
	}
}

// clusterServers gives a cluster to the suite: suite.Servers, Leaderer,
// Restarter, and for Redis Lagger.
type clusterServers struct{ c servers.Cluster }

func (s clusterServers) Members() []suite.Member {
	var out []suite.Member
	for _, m := range s.c.Members() {
		out = append(out, m)
	}
	return out
}
func (s clusterServers) Healthy(ctx context.Context) error { return s.c.Healthy(ctx) }
func (s clusterServers) Restart(ctx context.Context) error { return s.c.Restart(ctx) }
func (s clusterServers) Leader(ctx context.Context) (suite.Member, error) {
	m, err := s.c.Leader(ctx)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// asyncServers is a Redis primary and replica: replication can lag.
type asyncServers struct {
	clusterServers
	r *servers.RedisSentinel
}

func (s asyncServers) Lag(ctx context.Context) (func() error, error) { return s.r.HoldReplication(ctx) }

var (
	_ suite.Leaderer  = clusterServers{}
	_ suite.Restarter = clusterServers{}
	_ suite.Lagger    = asyncServers{}
)

func newServers(c servers.Cluster) suite.Servers {
	if r, ok := c.(*servers.RedisSentinel); ok {
		return asyncServers{clusterServers{c}, r}
	}
	return clusterServers{c}
}

// newClusterLocker makes one client of cluster n, whose members (or
// sentinels) are at addrs. The client dials every member through a fault
// proxy of its own, made when it first dials that member: Freeze freezes
// them all, so the pause scenarios stall the client's whole lock traffic,
// renewals included, whichever member it talks to.
func newClusterLocker(n string, addrs []string, c suite.Client) (backends.Locker, error) {
	ps := &proxySet{proxies: map[string]*faults.Proxy{}}
	var (
		l   backends.Locker
		err error
	)
	switch n {
	case "etcd-cluster", "consul-cluster":
		var via []string
		for _, a := range addrs {
			pa, err := ps.addr(a)
			if err != nil {
				ps.close()
				return nil, err
			}
			via = append(via, pa)
		}
		if n == "etcd-cluster" {
			l, err = etcd.New(etcd.Config{Endpoints: via, Key: c.Key, TTL: c.Lease})
		} else {
			l, err = consul.New(consul.Config{Addresses: via, Key: c.Key, TTL: c.Lease})
		}
	default:
		// go-redis dials the sentinels and whatever primary they name: the
		// proxies go in its Dialer.
		l, err = redis.New(redis.Config{SentinelAddrs: addrs, MasterName: servers.SentinelMaster, Dialer: ps.dial, Key: c.Key, Lease: c.Lease})
	}
	if err != nil {
		ps.close()
		return nil, err
	}
	return &proxied{Locker: l, ps: ps}, nil
}

// proxySet is one client's fault proxies, one per server address it dials.
type proxySet struct {
	mu      sync.Mutex
	proxies map[string]*faults.Proxy
	frozen  bool
	closed  bool
}

func (ps *proxySet) addr(target string) (string, error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if p := ps.proxies[target]; p != nil {
		return p.Addr(), nil
	}
	p, err := faults.NewProxy(target)
	if err != nil {
		return "", err
	}
	if ps.frozen {
		p.Freeze()
	}
	ps.proxies[target] = p
	return p.Addr(), nil
}

func (ps *proxySet) dial(ctx context.Context, network, target string) (net.Conn, error) {
	a, err := ps.addr(target)
	if err != nil {
		return nil, err
	}
	d := net.Dialer{Timeout: 2 * time.Second}
	return d.DialContext(ctx, network, a)
}

func (ps *proxySet) freeze() (thaw func()) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.frozen = true
	for _, p := range ps.proxies {
		p.Freeze()
	}
	return func() {
		ps.mu.Lock()
		defer ps.mu.Unlock()
		ps.frozen = false
		for _, p := range ps.proxies {
			p.Thaw()
		}
	}
}

func (ps *proxySet) close() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range ps.proxies {
		_ = p.Close()
	}
	ps.proxies, ps.closed = nil, true
}

// proxied is a cluster client behind its proxies: backends.Freezer, and
// the adapter's own capabilities passed through.
type proxied struct {
	backends.Locker
	ps *proxySet
}

var (
	_ backends.Freezer = (*proxied)(nil)
	_ backends.Expirer = (*proxied)(nil)
	_ backends.Renewer = (*proxied)(nil)
	_ backends.Cleaner = (*proxied)(nil)
)

func (p *proxied) Freeze() (thaw func()) { return p.ps.freeze() }
func (p *proxied) Close() error {
	err := p.Locker.Close()
	p.ps.close()
	return err
}
func (p *proxied) TTL() time.Duration {
	t, _ := backends.TTLOf(p.Locker)
	return t
}
func (p *proxied) Expiry() time.Duration {
	e, _ := backends.ExpiryOf(p.Locker)
	return e
}
func (p *proxied) Renews() bool {
	r, ok := p.Locker.(backends.Renewer)
	return ok && r.Renews()
}
func (p *proxied) Cleanup(ctx context.Context) error {
	if c, ok := p.Locker.(backends.Cleaner); ok {
		return c.Cleanup(ctx)
	}
	return nil
}
func (p *proxied) Describe() string {
	if d, ok := p.Locker.(backends.Info); ok {
		return d.Describe()
	}
	return ""
}

// clusterAddrs splits a cluster's endpoint list.
func clusterAddrs(ep string) []string {
	var out []string
	for _, a := range strings.Split(ep, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

func clusterFromEnv(n string) string { return os.Getenv(clusterEnv[n]) }
