package local

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/version"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/etcd"
	"github.com/locksuite/locksuite/backends/etcdmutex"
	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/fencing/etcdstore"
	"github.com/locksuite/locksuite/harness/servers"
	etcdservice "github.com/locksuite/locksuite/harness/services/etcd"
	"github.com/locksuite/locksuite/suite"
)

// etcdService is an etcd server embedded in this process, or the one
// ETCDCTL_ENDPOINTS names. It holds the counter store when Postgres does
// not (stores).
var etcdService = &service{
	name: "etcd", title: "etcd", server: "an embedded etcd server",
	lease: time.Second, pause: 2 * time.Second, pauses: 3, duration: 8 * time.Second,
	vars:       []string{"ETCDCTL_ENDPOINTS", "ETCDCTL_CACERT", "ETCDCTL_CERT", "ETCDCTL_KEY", "ETCDCTL_USER", "ETCDCTL_PASSWORD", "ETCDCTL_INSECURE_SKIP_TLS_VERIFY"},
	fromEnv:    etcdFromEnv("etcd", "ETCDCTL_ENDPOINTS"),
	start:      startOf(etcdservice.Start),
	probe:      probeEtcd,
	diagnose:   diagnoseEtcd,
	hostPortOf: func(ep string) string { return stripScheme(strings.Split(ep, ",")[0]) },
	servers:    oneProcess("etcd", noClockGo),
	durability: servers.DurabilityPackaged,
	version:    func() string { return "embedded: " + etcdServerModule + " v" + version.Version },
	store:      openEtcdStore,
}

// etcdCluster is three etcd members; named by its variable, it takes the
// ETCDCTL_* credentials and TLS settings.
var etcdCluster = clusterOf("etcd-cluster", "an etcd cluster", "three etcd members", "LOCKSUITE_ETCD_CLUSTER", etcdService, threeOf(etcdservice.StartCluster)).
	withSecurityOf(etcdService, etcdFromEnv("etcd-cluster", "LOCKSUITE_ETCD_CLUSTER")).
	onThreeNodes(threeOn(etcdservice.StartClusterOn))

const etcdServerModule = "go.etcd.io/etcd/server/v3"

// etcdModules are the etcd backends' modules: the client's, and the
// server's (embedded).
var etcdModules = []string{"go.etcd.io/etcd/client/v3", etcdServerModule}

var etcdBackends = []backend{
	{name: "etcd", kind: adapter, on: etcdService, modules: etcdModules, newLocker: newEtcd},
	{name: "etcd-mutex", kind: library, on: etcdService, modules: etcdModules, newLocker: func(c *conn, cl suite.Client) (backends.Locker, error) {
		// Not cl.Key itself: the counter store's keys are under
		// cl.Key+"/", and the mutex would wait for them as for older
		// waiters.
		return etcdmutex.New(etcdmutex.Config{Endpoints: c.addrs(), TLS: c.tls, Username: c.user, Password: c.password, Dial: cl.Dial, Key: cl.Key + "/mutex", TTL: cl.Lease})
	}},
	{name: "etcd-cluster", kind: cluster, on: etcdCluster, modules: etcdModules, newLocker: newEtcd},
}

func newEtcd(c *conn, cl suite.Client) (backends.Locker, error) {
	return etcd.New(etcd.Config{Endpoints: c.addrs(), TLS: c.tls, Username: c.user, Password: c.password, Dial: cl.Dial, Key: cl.Key, TTL: cl.Lease})
}

// openEtcdStore is the counter store under the suite's keys
// (fencing/etcdstore), over a client of c.
func openEtcdStore(_ context.Context, c *conn) (*counterStore, error) {
	ec, err := c.etcdClient()
	if err != nil {
		return nil, err
	}
	return &counterStore{
		new: func(ctx context.Context, name string, fenced bool) (fencing.Store, error) {
			return etcdstore.New(ctx, ec, name, fenced)
		},
		close: func() { ec.Close() },
	}, nil
}

// etcdClient connects to c's endpoints with its credentials.
func (c *conn) etcdClient() (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: c.addrs(), DialTimeout: 3 * time.Second, Logger: zap.NewNop(),
		TLS: c.tls, Username: c.user, Password: c.password})
}

// etcdFromEnv returns the fromEnv of an etcd service named by variable v
// (ETCDCTL_ENDPOINTS, LOCKSUITE_ETCD_CLUSTER): its endpoints, and the user
// and TLS settings of the ETCDCTL_* variables that etcdctl reads.
func etcdFromEnv(name, v string) func() (*conn, error) {
	return func() (*conn, error) {
		c := &conn{endpoint: os.Getenv(v)}
		if c.endpoint == "" {
			return nil, nil
		}
		c.user, c.password, _ = strings.Cut(os.Getenv("ETCDCTL_USER"), ":")
		if p := os.Getenv("ETCDCTL_PASSWORD"); p != "" {
			c.password = p
		}
		c.secrets = append(c.secrets, c.password)
		ca, cert, key := os.Getenv("ETCDCTL_CACERT"), os.Getenv("ETCDCTL_CERT"), os.Getenv("ETCDCTL_KEY")
		if !strings.Contains(c.endpoint, "https://") && ca == "" && cert == "" {
			return c, nil
		}
		t := &tls.Config{MinVersion: tls.VersionTLS12}
		t.InsecureSkipVerify = os.Getenv("ETCDCTL_INSECURE_SKIP_TLS_VERIFY") == "true"
		fix := "check ETCDCTL_CACERT, ETCDCTL_CERT and ETCDCTL_KEY (PEM files)"
		if ca != "" {
			pool, err := loadCA(ca)
			if err != nil {
				return nil, &servers.Unavailable{Backend: name, Err: fmt.Errorf("ETCDCTL_CACERT: %w", err), Fix: fix}
			}
			t.RootCAs = pool
		}
		if cert != "" || key != "" {
			kp, err := tls.LoadX509KeyPair(cert, key)
			if err != nil {
				return nil, &servers.Unavailable{Backend: name, Err: fmt.Errorf("ETCDCTL_CERT, ETCDCTL_KEY: %w", err), Fix: fix}
			}
			t.Certificates = []tls.Certificate{kp}
		}
		c.tls = t
		return c, nil
	}
}

// probeEtcd: the first endpoint's status (public), then a read (needs the
// user).
func probeEtcd(ctx context.Context, c *conn) error {
	if len(c.addrs()) == 0 {
		return errors.New("no endpoint")
	}
	ec, err := c.etcdClient()
	if err != nil {
		return err
	}
	defer ec.Close()
	if _, err = ec.Status(ctx, c.addrs()[0]); err != nil {
		return err
	}
	_, err = ec.Get(ctx, "locksuite/probe")
	return err
}

func diagnoseEtcd(s symptoms) (problem, fix string) {
	switch {
	case s.has("authentication failed"):
		return "authentication failed: wrong user name or password", "set ETCDCTL_USER=user:password (or ETCDCTL_PASSWORD)"
	case s.has("user name is empty", "user name not found", "permission denied", "invalid auth token"):
		return "authentication failed: the server requires a user", "set ETCDCTL_USER=user:password (or ETCDCTL_PASSWORD)"
	case s.has("certificate required", "bad certificate"):
		return "the server requires a client certificate", "set ETCDCTL_CERT and ETCDCTL_KEY to a client certificate and key (PEM) its CA signed"
	case s.untrusted():
		return "the server's TLS certificate is not trusted", "set ETCDCTL_CACERT to a PEM file of the CA that signed it"
	case s.plainToTLS():
		return "server requires TLS", "use https:// endpoints in ETCDCTL_ENDPOINTS and set ETCDCTL_CACERT (and ETCDCTL_CERT, ETCDCTL_KEY if it asks for a client certificate)"
	}
	return "", "check ETCDCTL_ENDPOINTS (host:port,...), or unset it to use the embedded server"
}
