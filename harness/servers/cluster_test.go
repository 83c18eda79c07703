package servers

import (
	"context"
	"testing"
	"time"

	"github.com/locksuite/locksuite/harness/faults"
)

// TestClusters starts each cluster, checks it is healthy with a leader,
// kills the leader, waits until a new one serves, restarts the killed
// member, and stops the cluster: no member process and no directory may be
// left.
func TestClusters(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real clusters")
	}
	for _, tc := range []struct {
		name  string
		start func(context.Context) (Cluster, string, []int, error) // the cluster, its directory, and its processes that are not Members
	}{
		{"etcd-cluster", three(StartEtcdCluster)},
		{"redis-sentinel", func(ctx context.Context) (Cluster, string, []int, error) {
			c, err := StartRedisSentinel(ctx)
			if err != nil {
				return nil, "", nil, err
			}
			var pids []int
			for _, p := range c.sentinels {
				pids = append(pids, p.Pid())
			}
			return c, c.dir, pids, nil
		}},
		{"zookeeper-ensemble", three(StartZooKeeperEnsemble)},
		{"consul-cluster", three(StartConsulCluster)},
		{"nats-cluster", three(StartNATSCluster)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			t0 := time.Now()
			c, dir, pids, err := tc.start(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Stop()
			t.Logf("healthy at %s in %v", c.Endpoint(), time.Since(t0).Round(time.Millisecond))
			for _, m := range c.Members() {
				pids = append(pids, m.Pid())
			}
			if err := c.Healthy(ctx); err != nil {
				t.Fatalf("healthy after start: %v", err)
			}
			old, err := c.Leader(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := old.Kill(); err != nil {
				t.Fatal(err)
			}
			t1 := time.Now()
			if err := faults.WaitHealthy(ctx, time.Minute, c.Healthy); err != nil {
				t.Fatalf("after killing the leader %s: %v", old.Name(), err)
			}
			l, err := c.Leader(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if l == old {
				t.Fatalf("the killed member %s still leads", old.Name())
			}
			t.Logf("killed %s; %s leads, healthy after %v", old.Name(), l.Name(), time.Since(t1).Round(time.Millisecond))
			t2 := time.Now()
			if err := c.Restart(ctx); err != nil {
				t.Fatalf("restart %s: %v", old.Name(), err)
			}
			t.Logf("%s restarted, healthy with every member after %v", old.Name(), time.Since(t2).Round(time.Millisecond))
			pids = append(pids, old.Pid())
			stopGone(t, c, dir, pids...)
		})
	}
}

// three starts a three-member cluster with start, for TestClusters.
func three[C interface {
	Cluster
	directory() string
}](start func(context.Context, int, ...Option) (C, error)) func(context.Context) (Cluster, string, []int, error) {
	return func(ctx context.Context) (Cluster, string, []int, error) {
		c, err := start(ctx, 3)
		if err != nil {
			return nil, "", nil, err
		}
		return c, c.directory(), nil, nil
	}
}

// directory is the group's directory, which holds its members' and which
// Stop removes.
func (g *group) directory() string { return g.dir }
