package nats

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/locksuite/locksuite/harness/role"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/harness/servers/servertest"
	"github.com/locksuite/locksuite/internal/servercheck"
)

// TestMain serves the roles this test binary is run again in (a cluster
// member, a Kubernetes node: harness/role) before any test.
func TestMain(m *testing.M) { os.Exit(role.Main(m)) }

// TestNATS starts the embedded server (timed), writes a JetStream KV key
// through it, stops it, and checks that its store is gone. WithAuth and
// WithTLS: the user's password over TLS gets in, a wrong password and a
// plain connection do not; also with the server a child process
// (WithCrash), crashed and restarted once before.
func TestNATS(t *testing.T) {
	type variant struct {
		name string
		opts []servers.Option
	}
	crashed := variant{"auth+tls, crashed", []servers.Option{servers.WithAuth(), servers.WithTLS(), servers.WithCrash()}}
	for _, tc := range []variant{{"plain", nil}, {"auth+tls", []servers.Option{servers.WithAuth(), servers.WithTLS()}}, crashed} {
		t.Run(tc.name, func(t *testing.T) {
			s := servercheck.TimedStart(t, func(ctx context.Context) (*Server, error) { return Start(ctx, tc.opts...) })
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			defer s.Stop()
			if tc.name == crashed.name {
				if _, err := s.Crash(ctx, false); err != nil {
					t.Fatal(err)
				}
			}
			var nopts []nats.Option
			if tc.opts != nil {
				tlsc, err := s.Secrets().ClientTLS()
				if err != nil {
					t.Fatal(err)
				}
				nopts = append(nopts, nats.Secure(tlsc))
				if _, err := nats.Connect(s.Endpoint(), append(nopts, nats.UserInfo(s.Secrets().User, "nope"))...); err == nil {
					t.Error("wrong password: connected")
				}
				if _, err := nats.Connect(s.URL()); err == nil {
					t.Error("plain connection accepted WithTLS")
				}
			}
			nc, err := nats.Connect(s.URL(), nopts...)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "check"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := kv.Put(ctx, "k", []byte("v")); err != nil {
				t.Fatal(err)
			}
			if e, err := kv.Get(ctx, "k"); err != nil || string(e.Value()) != "v" {
				t.Fatalf("get: %v %v", e, err)
			}
			nc.Close()
			servercheck.StopGone(t, s, s.b.Dir())
		})
	}
}

// TestCrash is harness/servers' TestCrash for NATS (servertest.Crash): at
// the default sync interval a power loss loses what the server did not
// sync, with sync_interval: always nothing.
func TestCrash(t *testing.T) {
	servertest.Crash(t, []servertest.CrashCase{
		{Name: "nats-default-sync", Start: servertest.CrashRow(Start, ops, dir, servers.WithDurability(servers.DurabilityHarness)), Crash: servertest.Kept, Loss: servertest.Lost},
		{Name: "nats-sync-always", Start: servertest.CrashRow(Start, ops, dir, servers.WithDurability(servers.DurabilitySyncAlways)), Crash: servertest.Kept, Loss: servertest.Kept},
		{Name: "nats-cluster-default-sync", Start: servertest.CrashRow(servertest.ThreeMembers(StartCluster), clusterOps, clusterDir, servers.WithDurability(servers.DurabilityHarness)), Crash: servertest.Kept, Loss: servertest.Lost},
		{Name: "nats-cluster-sync-always", Start: servertest.CrashRow(servertest.ThreeMembers(StartCluster), clusterOps, clusterDir, servers.WithDurability(servers.DurabilitySyncAlways)), Crash: servertest.Kept, Loss: servertest.Kept},
	})
}

// TestCluster is harness/servers' TestClusters for NATS
// (servertest.Failover).
func TestCluster(t *testing.T) {
	servertest.Failover(t, []servertest.FailoverCase{{Name: "nats-cluster", Start: servertest.Three(StartCluster, clusterDir)}})
}

func dir(s *Server) string                { return s.b.Dir() }
func clusterDir(c *Cluster) string        { return c.g.Dir() }
func ops(s *Server) servertest.KV         { return kvAt(s.URL(), 1) }
func clusterOps(s *Cluster) servertest.KV { return kvAt(s.Endpoint(), 3) }

// kvAt reads and writes a JetStream key-value bucket with replicas
// copies at url.
func kvAt(url string, replicas int) servertest.KV {
	do := func(ctx context.Context, f func(jetstream.KeyValue) error) error {
		nc, err := nats.Connect(url)
		if err != nil {
			return err
		}
		defer nc.Close()
		b, err := bucket(ctx, nc, replicas)
		if err != nil {
			return err
		}
		return f(b)
	}
	return servertest.KV{
		Put: func(ctx context.Context, k, v string) error {
			return do(ctx, func(b jetstream.KeyValue) error { _, err := b.PutString(ctx, k, v); return err })
		},
		Get: func(ctx context.Context, k string) (v string, err error) {
			err = do(ctx, func(b jetstream.KeyValue) error {
				e, err := b.Get(ctx, k)
				if errors.Is(err, jetstream.ErrKeyNotFound) {
					return nil
				}
				if err == nil {
					v = string(e.Value())
				}
				return err
			})
			return v, err
		},
	}
}

// bucket is the key-value bucket "crash", made if needed.
func bucket(ctx context.Context, nc *nats.Conn, replicas int) (jetstream.KeyValue, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "crash", Replicas: replicas})
}
