package entry

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/zklock"
	"github.com/locksuite/locksuite/backends/zookeeper"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/harness/services"
	"github.com/locksuite/locksuite/internal/tlsdial"
	"github.com/locksuite/locksuite/suite"
)

// The suite's own variables for the security settings of a ZooKeeper server
// the user names (ZOOKEEPER_ADDRS, LOCKSUITE_ZOOKEEPER_ENSEMBLE): ZooKeeper
// has no client variables of its own.
const (
	// AuthEnv is "user:password" for the digest scheme: the
	// sessions authenticate with it, and the lock's znodes get an ACL for
	// that user only (zookeeper.Config.Auth).
	AuthEnv = "LOCKSUITE_ZOOKEEPER_AUTH"
	// CACertEnv names a PEM file of the CA that signed the
	// servers' certificates: with it, the clients speak TLS (the servers'
	// secureClientPort) and trust that CA only.
	CACertEnv = "LOCKSUITE_ZOOKEEPER_CACERT"
	// CertEnv and ZooKeeperKeyEnv name a client certificate and
	// its key (PEM), for a server whose ssl.clientAuth is need
	// (ZooKeeper's default); either one also turns TLS on.
	CertEnv = "LOCKSUITE_ZOOKEEPER_CERT"
	KeyEnv  = "LOCKSUITE_ZOOKEEPER_KEY"
)

// Service is one ZooKeeper server (Debian's zookeeper.jar run
// with java), or the ensemble ZOOKEEPER_ADDRS names. tickTime 100 ms,
// minSessionTimeout 200 ms on the harness's server; a stalled session is
// freed within a tick of its timeout.
var Service = &services.Service{
	Name: "zookeeper", Title: "ZooKeeper", Server: "java with Debian's zookeeper.jar",
	Lease: 200 * time.Millisecond, Pause: 500 * time.Millisecond, Duration: 5 * time.Second,
	Vars:       []string{"ZOOKEEPER_ADDRS", AuthEnv, CACertEnv, CertEnv, KeyEnv},
	FromEnv:    FromEnv("zookeeper", "ZOOKEEPER_ADDRS"),
	Start:      services.StartOf(servers.StartZooKeeper),
	Probe:      probeZooKeeper,
	Diagnose:   diagnoseZooKeeper,
	HostPortOf: func(ep string) string { return strings.TrimSpace(strings.Split(ep, ",")[0]) },
	Servers:    services.OneProcess("zookeeper", noClockZooKeeper),
	Durability: servers.DurabilityPackaged,
	Version:    func() string { return services.JarVersion(zookeeperJar) },
}

// zookeeperEnsemble is three ZooKeeper servers; named by its variable, it
// takes the LOCKSUITE_ZOOKEEPER_* security settings.
var zookeeperEnsemble = services.ClusterOf("zookeeper-ensemble", "a ZooKeeper ensemble", "three ZooKeeper servers", "LOCKSUITE_ZOOKEEPER_ENSEMBLE", Service, services.ThreeOf(servers.StartZooKeeperEnsemble)).
	WithSecurityOf(Service, FromEnv("zookeeper-ensemble", "LOCKSUITE_ZOOKEEPER_ENSEMBLE"))

const goZooKeeper = "github.com/go-zookeeper/zk"

// zookeeperJar is the server's jar that harness/servers runs (Debian's
// package zookeeper puts it there).
const zookeeperJar = "/usr/share/java/zookeeper.jar"

var Backends = []services.Backend{
	{Name: "zookeeper", Kind: services.Adapter, On: Service, NewLocker: newZooKeeper, Modules: []string{goZooKeeper}},
	{Name: "zk-lock", Kind: services.Library, On: Service, Modules: []string{goZooKeeper}, NewLocker: func(c *services.Conn, cl suite.Client) (backends.Locker, error) {
		return zklock.New(zklock.Config{Servers: c.Addrs(), TLS: c.TLS, Auth: Auth(c), Dial: cl.Dial, Key: cl.Key, Lease: cl.Lease})
	}},
	{Name: "zookeeper-ensemble", Kind: services.Cluster, On: zookeeperEnsemble, NewLocker: newZooKeeper, Modules: []string{goZooKeeper}},
}

func newZooKeeper(c *services.Conn, cl suite.Client) (backends.Locker, error) {
	return zookeeper.New(zookeeper.Config{Servers: c.Addrs(), TLS: c.TLS, Auth: Auth(c), Dial: cl.Dial, Key: cl.Key, Lease: cl.Lease})
}

// noClockZooKeeper is why zookeeper's clock is not jumped (wrapped in
// errors.ErrUnsupported).
const noClockZooKeeper = "zookeeper times sessions with System.nanoTime, a monotonic clock: a wall-clock jump does not move a session's expiry"

// FromEnv returns the fromEnv of a ZooKeeper service named by
// variable v (ZOOKEEPER_ADDRS, LOCKSUITE_ZOOKEEPER_ENSEMBLE): the servers,
// and the LOCKSUITE_ZOOKEEPER_* security settings.
func FromEnv(name, v string) func() (*services.Conn, error) {
	return func() (*services.Conn, error) {
		c := &services.Conn{Endpoint: os.Getenv(v)}
		if c.Endpoint == "" {
			return nil, nil
		}
		if a := os.Getenv(AuthEnv); a != "" {
			var ok bool
			c.User, c.Password, ok = strings.Cut(a, ":")
			c.Secrets = append(c.Secrets, c.Password, a)
			if !ok || c.User == "" {
				return nil, &servers.Unavailable{Backend: name, Err: fmt.Errorf("%s is not user:password", AuthEnv),
					Fix: "set " + AuthEnv + "=user:password (the digest scheme's user)"}
			}
		}
		ca, cert, key := os.Getenv(CACertEnv), os.Getenv(CertEnv), os.Getenv(KeyEnv)
		if ca == "" && cert == "" && key == "" {
			return c, nil
		}
		c.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
		if ca != "" {
			pool, err := services.LoadCA(ca)
			if err != nil {
				return nil, &servers.Unavailable{Backend: name, Err: fmt.Errorf("%s: %w", CACertEnv, err), Fix: "set " + CACertEnv + " to a PEM file of the servers' CA"}
			}
			c.TLS.RootCAs = pool
		}
		if cert != "" || key != "" {
			kp, err := tls.LoadX509KeyPair(cert, key)
			if err != nil {
				return nil, &servers.Unavailable{Backend: name, Err: fmt.Errorf("%s, %s: %w", CertEnv, KeyEnv, err),
					Fix: "set " + CertEnv + " and " + KeyEnv + " to a client certificate and its key (PEM)"}
			}
			c.TLS.Certificates = []tls.Certificate{kp}
		}
		return c, nil
	}
}

// Auth is the digest scheme's "user:password", or "" without a user.
func Auth(c *services.Conn) string {
	if c.User == "" {
		return ""
	}
	return c.User + ":" + c.Password
}

// probeZooKeeper asks every server whether it runs (ruok; over TLS with
// c's settings, within 2 s: a plain ruok at a TLS port gets no answer),
// then opens a session with c's digest user (zkProbe).
func probeZooKeeper(ctx context.Context, c *services.Conn) error {
	for _, a := range c.Addrs() {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		out, err := servers.FourLetterWordTLS(rctx, a, "ruok", services.WithServerName(c.TLS, services.HostOnly(a)))
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %w", a, err)
		}
		if !strings.Contains(out, "imok") {
			return fmt.Errorf("%s answers ruok with %q, not imok (allow the command: 4lw.commands.whitelist=ruok,srvr)", a, out)
		}
	}
	return zkProbe(ctx, c)
}

// zkProbe opens a session with c's TLS settings and digest user, and asks
// whether /locksuite exists: a server that enforces authentication refuses
// a session without it. If /locksuite exists, it lists it: the digest
// scheme takes any password, and a wrong one shows only against the ACL of
// znodes the right one made (the suite's parents, made with the lock's ACL).
func zkProbe(ctx context.Context, c *services.Conn) error {
	dialTLS := tlsdial.Wrap((&net.Dialer{}).DialContext, c.TLS)
	dial := func(network, addr string, timeout time.Duration) (net.Conn, error) {
		dctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return dialTLS(dctx, network, addr)
	}
	zc, events, err := zk.Connect(c.Addrs(), 4*time.Second, zk.WithDialer(dial), zk.WithLogInfo(false), zk.WithLogger(zkQuiet{}))
	if err != nil {
		return err
	}
	defer zc.Close()
	for session := false; !session; {
		select {
		case ev := <-events:
			session = ev.State == zk.StateHasSession
		case <-ctx.Done():
			return fmt.Errorf("no session: %w", ctx.Err())
		}
	}
	if a := Auth(c); a != "" {
		if err := zc.AddAuth("digest", []byte(a)); err != nil {
			return fmt.Errorf("digest auth: %w", err)
		}
	}
	ok, _, err := zc.Exists("/locksuite")
	if err == nil && ok {
		_, _, err = zc.Children("/locksuite")
		if errors.Is(err, zk.ErrNoNode) { // removed since: another run's cleanup
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("/locksuite: %w", err)
	}
	return nil
}

// zkQuiet drops go-zookeeper's log lines.
type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}

func diagnoseZooKeeper(s services.Symptoms) (problem, fix string) {
	switch {
	case s.Has("-124"): // SESSIONCLOSEDREQUIRESASLAUTH: enforce.auth.enabled
		return "authentication failed: the server requires digest authentication", "set " + AuthEnv + "=user:password"
	case s.Has("not authenticated"): // NOAUTH on /locksuite
		return "authentication failed: the suite's znodes (/locksuite) belong to another digest user or password",
			"set " + AuthEnv + " to the user:password that made them (the digest scheme takes any password: only the znodes' ACLs tell a wrong one)"
	case s.Has("certificate required", "bad certificate"):
		return "the server requires a client certificate", "set " + CertEnv + " and " + KeyEnv + " to a client certificate and key (PEM) its CA signed"
	case s.Untrusted():
		return "the server's TLS certificate is not trusted", "set " + CACertEnv + " to a PEM file of the CA that signed it"
	case s.PlainToTLS():
		return "server requires TLS", "set " + CACertEnv + " to a PEM file of the servers' CA (TLS to their secureClientPort)"
	case s.C.TLS != nil && s.Has("EOF", "first record does not look like a TLS handshake", "connection reset") && !services.SpeaksTLS(s.Addr):
		return "the server does not speak TLS", "unset " + CACertEnv + ", " + CertEnv + " and " + KeyEnv + ", or name the servers' secureClientPort in ZOOKEEPER_ADDRS"
	}
	return "", "check ZOOKEEPER_ADDRS (host:port of each server, comma-separated, no chroot), or unset it to let the harness start one"
}
