package local

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
	"github.com/locksuite/locksuite/internal/tlsdial"
	"github.com/locksuite/locksuite/suite"
)

// The suite's own variables for the security settings of a ZooKeeper server
// the user names (ZOOKEEPER_ADDRS, LOCKSUITE_ZOOKEEPER_ENSEMBLE): ZooKeeper
// has no client variables of its own.
const (
	// ZooKeeperAuthEnv is "user:password" for the digest scheme: the
	// sessions authenticate with it, and the lock's znodes get an ACL for
	// that user only (zookeeper.Config.Auth).
	ZooKeeperAuthEnv = "LOCKSUITE_ZOOKEEPER_AUTH"
	// ZooKeeperCACertEnv names a PEM file of the CA that signed the
	// servers' certificates: with it, the clients speak TLS (the servers'
	// secureClientPort) and trust that CA only.
	ZooKeeperCACertEnv = "LOCKSUITE_ZOOKEEPER_CACERT"
	// ZooKeeperCertEnv and ZooKeeperKeyEnv name a client certificate and
	// its key (PEM), for a server whose ssl.clientAuth is need
	// (ZooKeeper's default); either one also turns TLS on.
	ZooKeeperCertEnv = "LOCKSUITE_ZOOKEEPER_CERT"
	ZooKeeperKeyEnv  = "LOCKSUITE_ZOOKEEPER_KEY"
)

// zookeeperService is one ZooKeeper server (Debian's zookeeper.jar run
// with java), or the ensemble ZOOKEEPER_ADDRS names. tickTime 100 ms,
// minSessionTimeout 200 ms on the harness's server; a stalled session is
// freed within a tick of its timeout.
var zookeeperService = &service{
	name: "zookeeper", title: "ZooKeeper", server: "java with Debian's zookeeper.jar",
	lease: 200 * time.Millisecond, pause: 500 * time.Millisecond, duration: 5 * time.Second,
	vars:       []string{"ZOOKEEPER_ADDRS", ZooKeeperAuthEnv, ZooKeeperCACertEnv, ZooKeeperCertEnv, ZooKeeperKeyEnv},
	fromEnv:    zookeeperFromEnv("zookeeper", "ZOOKEEPER_ADDRS"),
	start:      startOf(servers.StartZooKeeper),
	probe:      probeZooKeeper,
	diagnose:   diagnoseZooKeeper,
	hostPortOf: func(ep string) string { return strings.TrimSpace(strings.Split(ep, ",")[0]) },
	servers:    oneProcess("zookeeper", noClockZooKeeper),
	durability: servers.DurabilityPackaged,
	version:    func() string { return jarVersion(zookeeperJar) },
}

// zookeeperEnsemble is three ZooKeeper servers; named by its variable, it
// takes the LOCKSUITE_ZOOKEEPER_* security settings.
var zookeeperEnsemble = clusterOf("zookeeper-ensemble", "a ZooKeeper ensemble", "three ZooKeeper servers", "LOCKSUITE_ZOOKEEPER_ENSEMBLE", zookeeperService, threeOf(servers.StartZooKeeperEnsemble)).
	withSecurityOf(zookeeperService, zookeeperFromEnv("zookeeper-ensemble", "LOCKSUITE_ZOOKEEPER_ENSEMBLE"))

const goZooKeeper = "github.com/go-zookeeper/zk"

// zookeeperJar is the server's jar that harness/servers runs (Debian's
// package zookeeper puts it there).
const zookeeperJar = "/usr/share/java/zookeeper.jar"

var zookeeperBackends = []backend{
	{name: "zookeeper", kind: adapter, on: zookeeperService, newLocker: newZooKeeper, modules: []string{goZooKeeper}},
	{name: "zk-lock", kind: library, on: zookeeperService, modules: []string{goZooKeeper}, newLocker: func(c *conn, cl suite.Client) (backends.Locker, error) {
		return zklock.New(zklock.Config{Servers: c.addrs(), TLS: c.tls, Auth: c.zkAuth(), Dial: cl.Dial, Key: cl.Key, Lease: cl.Lease})
	}},
	{name: "zookeeper-ensemble", kind: cluster, on: zookeeperEnsemble, newLocker: newZooKeeper, modules: []string{goZooKeeper}},
}

func newZooKeeper(c *conn, cl suite.Client) (backends.Locker, error) {
	return zookeeper.New(zookeeper.Config{Servers: c.addrs(), TLS: c.tls, Auth: c.zkAuth(), Dial: cl.Dial, Key: cl.Key, Lease: cl.Lease})
}

// noClockZooKeeper is why zookeeper's clock is not jumped (wrapped in
// errors.ErrUnsupported).
const noClockZooKeeper = "zookeeper times sessions with System.nanoTime, a monotonic clock: a wall-clock jump does not move a session's expiry"

// zookeeperFromEnv returns the fromEnv of a ZooKeeper service named by
// variable v (ZOOKEEPER_ADDRS, LOCKSUITE_ZOOKEEPER_ENSEMBLE): the servers,
// and the LOCKSUITE_ZOOKEEPER_* security settings.
func zookeeperFromEnv(name, v string) func() (*conn, error) {
	return func() (*conn, error) {
		c := &conn{endpoint: os.Getenv(v)}
		if c.endpoint == "" {
			return nil, nil
		}
		if a := os.Getenv(ZooKeeperAuthEnv); a != "" {
			var ok bool
			c.user, c.password, ok = strings.Cut(a, ":")
			c.secrets = append(c.secrets, c.password, a)
			if !ok || c.user == "" {
				return nil, &servers.Unavailable{Backend: name, Err: fmt.Errorf("%s is not user:password", ZooKeeperAuthEnv),
					Fix: "set " + ZooKeeperAuthEnv + "=user:password (the digest scheme's user)"}
			}
		}
		ca, cert, key := os.Getenv(ZooKeeperCACertEnv), os.Getenv(ZooKeeperCertEnv), os.Getenv(ZooKeeperKeyEnv)
		if ca == "" && cert == "" && key == "" {
			return c, nil
		}
		c.tls = &tls.Config{MinVersion: tls.VersionTLS12}
		if ca != "" {
			pool, err := loadCA(ca)
			if err != nil {
				return nil, &servers.Unavailable{Backend: name, Err: fmt.Errorf("%s: %w", ZooKeeperCACertEnv, err), Fix: "set " + ZooKeeperCACertEnv + " to a PEM file of the servers' CA"}
			}
			c.tls.RootCAs = pool
		}
		if cert != "" || key != "" {
			kp, err := tls.LoadX509KeyPair(cert, key)
			if err != nil {
				return nil, &servers.Unavailable{Backend: name, Err: fmt.Errorf("%s, %s: %w", ZooKeeperCertEnv, ZooKeeperKeyEnv, err),
					Fix: "set " + ZooKeeperCertEnv + " and " + ZooKeeperKeyEnv + " to a client certificate and its key (PEM)"}
			}
			c.tls.Certificates = []tls.Certificate{kp}
		}
		return c, nil
	}
}

// zkAuth is the digest scheme's "user:password", or "" without a user.
func (c *conn) zkAuth() string {
	if c.user == "" {
		return ""
	}
	return c.user + ":" + c.password
}

// probeZooKeeper asks every server whether it runs (ruok; over TLS with
// c's settings, within 2 s: a plain ruok at a TLS port gets no answer),
// then opens a session with c's digest user (zkProbe).
func probeZooKeeper(ctx context.Context, c *conn) error {
	for _, a := range c.addrs() {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		out, err := servers.FourLetterWordTLS(rctx, a, "ruok", withServerName(c.tls, hostOnly(a)))
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
func zkProbe(ctx context.Context, c *conn) error {
	dialTLS := tlsdial.Wrap((&net.Dialer{}).DialContext, c.tls)
	dial := func(network, addr string, timeout time.Duration) (net.Conn, error) {
		dctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return dialTLS(dctx, network, addr)
	}
	zc, events, err := zk.Connect(c.addrs(), 4*time.Second, zk.WithDialer(dial), zk.WithLogInfo(false), zk.WithLogger(zkQuiet{}))
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
	if a := c.zkAuth(); a != "" {
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

func diagnoseZooKeeper(s symptoms) (problem, fix string) {
	switch {
	case s.has("-124"): // SESSIONCLOSEDREQUIRESASLAUTH: enforce.auth.enabled
		return "authentication failed: the server requires digest authentication", "set " + ZooKeeperAuthEnv + "=user:password"
	case s.has("not authenticated"): // NOAUTH on /locksuite
		return "authentication failed: the suite's znodes (/locksuite) belong to another digest user or password",
			"set " + ZooKeeperAuthEnv + " to the user:password that made them (the digest scheme takes any password: only the znodes' ACLs tell a wrong one)"
	case s.has("certificate required", "bad certificate"):
		return "the server requires a client certificate", "set " + ZooKeeperCertEnv + " and " + ZooKeeperKeyEnv + " to a client certificate and key (PEM) its CA signed"
	case s.untrusted():
		return "the server's TLS certificate is not trusted", "set " + ZooKeeperCACertEnv + " to a PEM file of the CA that signed it"
	case s.plainToTLS():
		return "server requires TLS", "set " + ZooKeeperCACertEnv + " to a PEM file of the servers' CA (TLS to their secureClientPort)"
	case s.c.tls != nil && s.has("EOF", "first record does not look like a TLS handshake", "connection reset") && !speaksTLS(s.addr):
		return "the server does not speak TLS", "unset " + ZooKeeperCACertEnv + ", " + ZooKeeperCertEnv + " and " + ZooKeeperKeyEnv + ", or name the servers' secureClientPort in ZOOKEEPER_ADDRS"
	}
	return "", "check ZOOKEEPER_ADDRS (host:port of each server, comma-separated, no chroot), or unset it to let the harness start one"
}
