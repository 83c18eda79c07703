package servers_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/harness/servers/servertest"
)

// TestClusters starts each cluster, checks it is healthy with a leader,
// kills the leader, waits until a new one serves, restarts the killed
// member, and stops the cluster: no member process and no directory may be
// left (servertest.Failover). The clusters of harness/services are in
// their packages' tests.
func TestClusters(t *testing.T) {
	dir := func(c servers.Cluster) string { return servers.Dir(c) }
	servertest.Failover(t, []servertest.FailoverCase{
		{Name: "redis-sentinel", Start: func(ctx context.Context) (servers.Cluster, string, []int, error) {
			c, err := servers.StartRedisSentinel(ctx)
			if err != nil {
				return nil, "", nil, err
			}
			return c, servers.Dir(c), servers.SentinelPids(c), nil
		}},
		{Name: "zookeeper-ensemble", Start: servertest.Three(servers.StartZooKeeperEnsemble, func(c *servers.ZooKeeperEnsemble) string { return dir(c) })},
		{Name: "consul-cluster", Start: servertest.Three(servers.StartConsulCluster, func(c *servers.ConsulCluster) string { return dir(c) })},
	})
}

// TestStartSelfMemberUndispatched: in a binary that did not call
// harness/role's Serve (this test binary has no TestMain), a member is not
// started, since it would run these tests again; the error says what to
// call.
func TestStartSelfMemberUndispatched(t *testing.T) {
	started := false
	_, err := servers.StartSelfMember(func(*exec.Cmd) error { started = true; return nil }, "m1", t.TempDir(), "LOCKSUITE_TEST_MEMBER", struct{}{})
	if err == nil || started || !strings.Contains(err.Error(), "role.Serve") {
		t.Fatalf("started %v, err %v; want an error naming role.Serve", started, err)
	}
}
