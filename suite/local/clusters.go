package local

import (
	"context"

	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/suite"
)

// clusterServers gives a cluster to the suite: suite.Servers, Leaderer,
// Restarter, Crasher, and for Redis Lagger.
type clusterServers struct {
	c servers.Cluster
	*crashing
}

func (s *clusterServers) Members() []suite.Member {
	var out []suite.Member
	for _, m := range s.c.Members() {
		out = append(out, m)
	}
	return out
}
func (s *clusterServers) Healthy(ctx context.Context) error { return s.c.Healthy(ctx) }
func (s *clusterServers) Restart(ctx context.Context) error { return s.c.Restart(ctx) }
func (s *clusterServers) Leader(ctx context.Context) (suite.Member, error) {
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

func (s *asyncServers) Lag(ctx context.Context) (func() error, error) {
	return s.r.HoldReplication(ctx)
}

var (
	_ suite.Leaderer  = (*clusterServers)(nil)
	_ suite.Restarter = (*clusterServers)(nil)
	_ suite.Lagger    = (*asyncServers)(nil)
)

// clusterServersOf gives the suite a cluster the harness started.
func clusterServersOf(_ *service, s servers.Server) suite.Servers {
	c := s.(servers.Cluster)
	if r, ok := c.(*servers.RedisSentinel); ok {
		return &asyncServers{clusterServers{c: c}, r}
	}
	return &clusterServers{c: c}
}
