package services

import (
	"context"

	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/suite"
)

// ClusterServers gives a cluster to the suite: suite.Servers, Leaderer,
// Restarter, Crasher, and for Redis Lagger.
type ClusterServers struct {
	C servers.Cluster
	*Crashing
}

func (s *ClusterServers) Members() []suite.Member {
	var out []suite.Member
	for _, m := range s.C.Members() {
		out = append(out, m)
	}
	return out
}
func (s *ClusterServers) Healthy(ctx context.Context) error { return s.C.Healthy(ctx) }
func (s *ClusterServers) Restart(ctx context.Context) error { return s.C.Restart(ctx) }
func (s *ClusterServers) Leader(ctx context.Context) (suite.Member, error) {
	m, err := s.C.Leader(ctx)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// AsyncServers is a Redis primary and replica: replication can lag.
type AsyncServers struct {
	ClusterServers
	R Replicated
}

// Replicated is a cluster whose replication the harness can hold
// (servers.RedisSentinel's HoldReplication): its replicas then lag.
type Replicated interface {
	HoldReplication(ctx context.Context) (func() error, error)
}

func (s *AsyncServers) Lag(ctx context.Context) (func() error, error) {
	return s.R.HoldReplication(ctx)
}

var (
	_ suite.Leaderer  = (*ClusterServers)(nil)
	_ suite.Restarter = (*ClusterServers)(nil)
	_ suite.Lagger    = (*AsyncServers)(nil)
)

// ClusterServersOf gives the suite a cluster the harness started.
func ClusterServersOf(_ *Service, s servers.Server) suite.Servers {
	c := s.(servers.Cluster)
	if r, ok := c.(Replicated); ok {
		return &AsyncServers{ClusterServers{C: c}, r}
	}
	return &ClusterServers{C: c}
}
