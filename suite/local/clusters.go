package local

import (
	"context"
	"os"
	"strings"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/consul"
	"github.com/locksuite/locksuite/backends/etcd"
	"github.com/locksuite/locksuite/backends/redis"
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
// sentinels) are at addrs. Every connection goes through c.Dial, so the
// suite's fault path stalls or cuts the client's whole lock traffic,
// renewals included, whichever member it talks to.
func newClusterLocker(n string, addrs []string, c suite.Client) (backends.Locker, error) {
	switch n {
	case "etcd-cluster":
		return etcd.New(etcd.Config{Endpoints: addrs, Dial: c.Dial, Key: c.Key, TTL: c.Lease})
	case "consul-cluster":
		return consul.New(consul.Config{Addresses: addrs, Dial: c.Dial, Key: c.Key, TTL: c.Lease})
	default:
		// go-redis dials the sentinels and whatever primary they name.
		return redis.New(redis.Config{SentinelAddrs: addrs, MasterName: servers.SentinelMaster, Dial: c.Dial, Key: c.Key, Lease: c.Lease})
	}
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
