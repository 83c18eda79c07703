package etcd

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/harness/servers/servertest"
	"github.com/locksuite/locksuite/internal/servercheck"

	"github.com/locksuite/locksuite/harness/role"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestMain serves the roles this test binary is run again in (a cluster
// member, a Kubernetes node: harness/role) before any test.
func TestMain(m *testing.M) { os.Exit(role.Main(m)) }

// TestStartStop starts the embedded server, stops it, and checks that its
// directory is gone.
func TestStartStop(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real server")
	}
	s := servercheck.MustStart(t, func() (*Server, error) { return Start(context.Background()) })
	dir := s.b.Dir()
	s.Stop()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("directory %s still exists after Stop (%v)", dir, err)
	}
}

// TestStartSecured starts the server WithAuth and WithTLS, embedded and as
// a crashable child process crashed and restarted once, and checks that a
// client with the Secrets gets in and that one with a wrong password and
// one without TLS are refused.
func TestStartSecured(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real servers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, mode := range servertest.CrashModes("etcd", []servers.Option{servers.WithAuth(), servers.WithTLS()}) {
		t.Run(mode.Name, func(t *testing.T) {
			s := servertest.StartMode(t, ctx, mode, Start)
			sec := s.Secrets()
			tc := servertest.MustTLS(t, sec)
			put := func(cfg clientv3.Config) error {
				cfg.Endpoints, cfg.DialTimeout, cfg.Logger = []string{s.Endpoint()}, 2*time.Second, zap.NewNop()
				c, err := clientv3.New(cfg)
				if err != nil {
					return err
				}
				defer c.Close()
				cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				defer cancel()
				_, err = c.Put(cctx, "locksuite/probe", "x")
				return err
			}
			servertest.Report(t, []servertest.Attempt{
				{Name: "secrets", Err: put(clientv3.Config{TLS: tc, Username: sec.User, Password: sec.Password}), Want: ""},
				{Name: "wrong password", Err: put(clientv3.Config{TLS: tc, Username: sec.User, Password: "nope"}), Want: "authentication failed"},
			})
			if err := put(clientv3.Config{Username: sec.User, Password: sec.Password}); err == nil {
				t.Error("plain connection to the TLS port succeeded")
			}
		})
	}
}

// TestCrash is harness/servers' TestCrash for etcd (servertest.Crash):
// with --unsafe-no-fsync a power loss loses what etcd did not sync, with
// fsync on commit (packaged) nothing.
func TestCrash(t *testing.T) {
	servertest.Crash(t, []servertest.CrashCase{
		{Name: "etcd-unsafe-no-fsync", Start: servertest.CrashRow(Start, ops, dir, servers.WithDurability(servers.DurabilityHarness)), Crash: servertest.Kept, Loss: servertest.Lost},
		{Name: "etcd-packaged", Start: servertest.CrashRow(Start, ops, dir, servers.WithDurability(servers.DurabilityPackaged)), Crash: servertest.Kept, Loss: servertest.Kept},
		{Name: "etcd-cluster-packaged", Start: servertest.CrashRow(servertest.ThreeMembers(StartCluster), clusterOps, clusterDir, servers.WithDurability(servers.DurabilityPackaged)), Crash: servertest.Kept, Loss: servertest.Kept},
	})
}

// TestCluster is harness/servers' TestClusters for etcd
// (servertest.Failover).
func TestCluster(t *testing.T) {
	servertest.Failover(t, []servertest.FailoverCase{{Name: "etcd-cluster", Start: servertest.Three(StartCluster, clusterDir)}})
}

func dir(s *Server) string         { return s.b.Dir() }
func clusterDir(c *Cluster) string { return c.g.Dir() }
func ops(s *Server) servertest.KV  { return kvAt([]string{s.Endpoint()}) }
func clusterOps(s *Cluster) servertest.KV {
	return kvAt(s.Addrs())
}

// kvAt reads and writes the etcd cluster at endpoints.
func kvAt(endpoints []string) servertest.KV {
	do := func(f func(*clientv3.Client) error) error {
		c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		return servercheck.Using(c, err, func(c *clientv3.Client) { c.Close() }, f)
	}
	return servertest.KV{
		Put: func(ctx context.Context, k, v string) error {
			return do(func(c *clientv3.Client) error { _, err := c.Put(ctx, k, v); return err })
		},
		Get: func(ctx context.Context, k string) (v string, err error) {
			err = do(func(c *clientv3.Client) error {
				r, err := c.Get(ctx, k)
				if err == nil && len(r.Kvs) > 0 {
					v = string(r.Kvs[0].Value)
				}
				return err
			})
			return v, err
		},
	}
}
