package entry

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
	"github.com/locksuite/locksuite/harness/services"
	etcdservice "github.com/locksuite/locksuite/harness/services/etcd"
	"github.com/locksuite/locksuite/suite"
)

// Service is an etcd server embedded in this process, or the one
// ETCDCTL_ENDPOINTS names. It holds the counter store when Postgres does
// not (stores).
var Service = &services.Service{
	Pod:  "etcd",
	Name: "etcd", Title: "etcd", Server: "an embedded etcd server",
	Lease: time.Second, Pause: 2 * time.Second, Pauses: 3, Duration: 8 * time.Second,
	Vars:       []string{"ETCDCTL_ENDPOINTS", "ETCDCTL_CACERT", "ETCDCTL_CERT", "ETCDCTL_KEY", "ETCDCTL_USER", "ETCDCTL_PASSWORD", "ETCDCTL_INSECURE_SKIP_TLS_VERIFY"},
	FromEnv:    etcdFromEnv("etcd", "ETCDCTL_ENDPOINTS"),
	Start:      services.StartOf(etcdservice.Start),
	Probe:      probeEtcd,
	Diagnose:   diagnoseEtcd,
	HostPortOf: func(ep string) string { return services.StripScheme(strings.Split(ep, ",")[0]) },
	Servers:    services.OneProcess("etcd", services.NoClockGo),
	Durability: servers.DurabilityPackaged,
	Version:    func() string { return "embedded: " + etcdServerModule + " v" + version.Version },
	Store:      openEtcdStore,
}

// etcdCluster is three etcd members; named by its variable, it takes the
// ETCDCTL_* credentials and TLS settings.
var etcdCluster = services.ClusterOf("etcd-cluster", "an etcd cluster", "three etcd members", "LOCKSUITE_ETCD_CLUSTER", Service, services.ThreeOf(etcdservice.StartCluster)).
	WithSecurityOf(Service, etcdFromEnv("etcd-cluster", "LOCKSUITE_ETCD_CLUSTER")).
	OnThreeNodes(services.ThreeOn(etcdservice.StartClusterOn))

const etcdServerModule = "go.etcd.io/etcd/server/v3"

// etcdModules are the etcd backends' modules: the client's, and the
// server's (embedded).
var etcdModules = []string{"go.etcd.io/etcd/client/v3", etcdServerModule}

var Backends = []services.Backend{
	{Name: "etcd", Kind: services.Adapter, On: Service, Modules: etcdModules, NewLocker: newEtcd},
	{Name: "etcd-mutex", Kind: services.Library, On: Service, Modules: etcdModules, NewLocker: func(c *services.Conn, cl suite.Client) (backends.Locker, error) {
		// Not cl.Key itself: the counter store's keys are under
		// cl.Key+"/", and the mutex would wait for them as for older
		// waiters.
		return etcdmutex.New(etcdmutex.Config{Endpoints: c.Addrs(), TLS: c.TLS, Username: c.User, Password: c.Password, Dial: cl.Dial, Key: cl.Key + "/mutex", TTL: cl.Lease})
	}},
	{Name: "etcd-cluster", Kind: services.Cluster, On: etcdCluster, Modules: etcdModules, NewLocker: newEtcd},
}

func newEtcd(c *services.Conn, cl suite.Client) (backends.Locker, error) {
	return etcd.New(etcd.Config{Endpoints: c.Addrs(), TLS: c.TLS, Username: c.User, Password: c.Password, Dial: cl.Dial, Key: cl.Key, TTL: cl.Lease})
}

// openEtcdStore is the counter store under the suite's keys
// (fencing/etcdstore), over a client of c.
func openEtcdStore(_ context.Context, c *services.Conn) (*services.CounterStore, error) {
	ec, err := etcdClient(c)
	if err != nil {
		return nil, err
	}
	return &services.CounterStore{
		New: func(ctx context.Context, name string, fenced bool) (fencing.Store, error) {
			return etcdstore.New(ctx, ec, name, fenced)
		},
		Close: func() { ec.Close() },
	}, nil
}

// etcdClient connects to c's endpoints with its credentials.
func etcdClient(c *services.Conn) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: c.Addrs(), DialTimeout: 3 * time.Second, Logger: zap.NewNop(),
		TLS: c.TLS, Username: c.User, Password: c.Password})
}

// etcdFromEnv returns the fromEnv of an etcd service named by variable v
// (ETCDCTL_ENDPOINTS, LOCKSUITE_ETCD_CLUSTER): its endpoints, and the user
// and TLS settings of the ETCDCTL_* variables that etcdctl reads.
func etcdFromEnv(name, v string) func() (*services.Conn, error) {
	return func() (*services.Conn, error) {
		c := &services.Conn{Endpoint: os.Getenv(v)}
		if c.Endpoint == "" {
			return nil, nil
		}
		c.User, c.Password, _ = strings.Cut(os.Getenv("ETCDCTL_USER"), ":")
		if p := os.Getenv("ETCDCTL_PASSWORD"); p != "" {
			c.Password = p
		}
		c.Secrets = append(c.Secrets, c.Password)
		ca, cert, key := os.Getenv("ETCDCTL_CACERT"), os.Getenv("ETCDCTL_CERT"), os.Getenv("ETCDCTL_KEY")
		if !strings.Contains(c.Endpoint, "https://") && ca == "" && cert == "" {
			return c, nil
		}
		t := &tls.Config{MinVersion: tls.VersionTLS12}
		t.InsecureSkipVerify = os.Getenv("ETCDCTL_INSECURE_SKIP_TLS_VERIFY") == "true"
		fix := "check ETCDCTL_CACERT, ETCDCTL_CERT and ETCDCTL_KEY (PEM files)"
		if ca != "" {
			pool, err := services.LoadCA(ca)
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
		c.TLS = t
		return c, nil
	}
}

// probeEtcd: the first endpoint's status (public), then a read (needs the
// user).
func probeEtcd(ctx context.Context, c *services.Conn) error {
	if len(c.Addrs()) == 0 {
		return errors.New("no endpoint")
	}
	ec, err := etcdClient(c)
	if err != nil {
		return err
	}
	defer ec.Close()
	if _, err = ec.Status(ctx, c.Addrs()[0]); err != nil {
		return err
	}
	_, err = ec.Get(ctx, "locksuite/probe")
	return err
}

func diagnoseEtcd(s services.Symptoms) (problem, fix string) {
	switch {
	case s.Has("authentication failed"):
		return "authentication failed: wrong user name or password", "set ETCDCTL_USER=user:password (or ETCDCTL_PASSWORD)"
	case s.Has("user name is empty", "user name not found", "permission denied", "invalid auth token"):
		return "authentication failed: the server requires a user", "set ETCDCTL_USER=user:password (or ETCDCTL_PASSWORD)"
	case s.Has("certificate required", "bad certificate"):
		return "the server requires a client certificate", "set ETCDCTL_CERT and ETCDCTL_KEY to a client certificate and key (PEM) its CA signed"
	case s.Untrusted():
		return "the server's TLS certificate is not trusted", "set ETCDCTL_CACERT to a PEM file of the CA that signed it"
	case s.PlainToTLS():
		return "server requires TLS", "use https:// endpoints in ETCDCTL_ENDPOINTS and set ETCDCTL_CACERT (and ETCDCTL_CERT, ETCDCTL_KEY if it asks for a client certificate)"
	}
	return "", "check ETCDCTL_ENDPOINTS (host:port,...), or unset it to use the embedded server"
}
