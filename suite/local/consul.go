package local

import (
	"context"
	"os"
	"strings"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/consul"
	"github.com/locksuite/locksuite/backends/consullock"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/suite"
)

// consulService is one Consul agent in dev mode (servers.StartConsul, the
// build of ci/setup.sh), or the agent CONSUL_HTTP_ADDR names.
var consulService = &service{
	name: "consul", title: "Consul", server: "consul (the build of ci/setup.sh)",
	lease: 200 * time.Millisecond, pause: 800 * time.Millisecond, duration: 6 * time.Second,
	vars:       []string{"CONSUL_HTTP_ADDR", "CONSUL_HTTP_TOKEN", "CONSUL_HTTP_TOKEN_FILE", "CONSUL_HTTP_SSL", "CONSUL_HTTP_SSL_VERIFY", "CONSUL_CACERT", "CONSUL_CAPATH", "CONSUL_CLIENT_CERT", "CONSUL_CLIENT_KEY", "CONSUL_TLS_SERVER_NAME"},
	fromEnv:    consulFromEnv("consul", "CONSUL_HTTP_ADDR"),
	start:      startOf(servers.StartConsul),
	probe:      probeConsul,
	diagnose:   diagnoseConsul,
	hostPortOf: stripScheme,
	servers:    oneProcess("consul", noClockConsul),
	durability: servers.DurabilityPackaged,
	version:    consulVersion,
}

// consulCluster is three Consul servers; named by its variable, it takes
// the CONSUL_* credentials and TLS settings.
var consulCluster = clusterOf("consul-cluster", "a Consul cluster", "three consul servers", "LOCKSUITE_CONSUL_CLUSTER", consulService, threeOf(servers.StartConsulCluster)).
	withSecurityOf(consulService, consulFromEnv("consul-cluster", "LOCKSUITE_CONSUL_CLUSTER")).
	onThreeNodes(threeOn(servers.StartConsulClusterOn))

const consulAPI = "github.com/hashicorp/consul/api"

var consulBackends = []backend{
	{name: "consul", kind: adapter, on: consulService, modules: []string{consulAPI}, newLocker: func(c *conn, cl suite.Client) (backends.Locker, error) {
		return consul.New(consul.Config{Address: c.endpoint, Token: c.token, TLS: c.tls, Dial: cl.Dial, Key: cl.Key, TTL: cl.Lease})
	}},
	{name: "consul-lock", kind: library, on: consulService, modules: []string{consulAPI}, newLocker: func(c *conn, cl suite.Client) (backends.Locker, error) {
		// LockWaitTime 1s: an abandoned Acquire's Lock ends within 1s
		// (Close waits for it), not the library's 15s.
		return consullock.New(consullock.Config{Address: c.endpoint, Token: c.token, TLS: c.tls, Dial: cl.Dial, Key: cl.Key, TTL: cl.Lease, LockDelay: consulLockDelay, LockWaitTime: time.Second})
	}, tune: func(cfg *suite.Config) {
		// A waiter that meets the lock-delay waits consul/api's fixed
		// 5 s (DefaultLockRetryTime) before it tries again: give the
		// second holder that long to get in, so that the pause
		// scenarios measure the lock rather than the default bound
		// (3 × expiry + 2 s).
		cfg.StallTimeout = 3*(2*cfg.Lease+consulLockDelay) + 2*time.Second + 5*time.Second
	}},
	// Every connection of a cluster's client goes through cl.Dial, so the
	// suite's fault path stalls or cuts the client's whole lock traffic,
	// renewals included, whichever member it talks to.
	{name: "consul-cluster", kind: cluster, on: consulCluster, modules: []string{consulAPI}, newLocker: func(c *conn, cl suite.Client) (backends.Locker, error) {
		return consul.New(consul.Config{Addresses: c.hostPorts(), Token: c.token, TLS: c.tls, Dial: cl.Dial, Key: cl.Key, TTL: cl.Lease})
	}},
}

// consulLockDelay is consul-lock's LockDelay: equal to its session TTL, the
// proportion of the library's defaults (SessionTTL 15s, LockDelay 15s)
// scaled to the suite's short lease.
const consulLockDelay = 200 * time.Millisecond

// noClockConsul is why consul's clock is not jumped (wrapped in
// errors.ErrUnsupported).
const noClockConsul = "consul is a Go program: its session timers (time.AfterFunc) run on the monotonic clock, and Go reads time through the vDSO rather than libc, so libfaketime cannot move it (measured: under it, consul's HTTP Date header shows the real time); the lease does not follow the wall clock"

// consulVersion asks the consul binary the harness would start.
func consulVersion() string {
	b, err := servers.ConsulBinary()
	if err != nil {
		return "not found here (" + err.Error() + ")"
	}
	return binVersion([]string{"version"}, b)
}

// consulFromEnv returns the fromEnv of a Consul service named by variable
// v (CONSUL_HTTP_ADDR, LOCKSUITE_CONSUL_CLUSTER): its address(es), and the
// token and TLS settings of the CONSUL_* variables that consul/api reads.
func consulFromEnv(name, v string) func() (*conn, error) {
	return func() (*conn, error) {
		c := &conn{endpoint: os.Getenv(v)}
		if c.endpoint == "" {
			return nil, nil
		}
		ac := consulapi.DefaultConfig() // reads every CONSUL_* variable
		c.token = ac.Token
		c.secrets = append(c.secrets, c.token)
		if strings.HasPrefix(strings.TrimSpace(c.endpoint), "https://") || ac.Scheme == "https" {
			if ac.TLSConfig.Address == "" {
				ac.TLSConfig.Address = hostOnly(stripScheme(strings.Split(c.endpoint, ",")[0]))
			}
			t, err := consulapi.SetupTLSConfig(&ac.TLSConfig)
			if err != nil {
				return nil, &servers.Unavailable{Backend: name, Err: err, Fix: "check CONSUL_CACERT, CONSUL_CLIENT_CERT and CONSUL_CLIENT_KEY"}
			}
			c.tls = t
		}
		return c, nil
	}
}

// consulClient is an API client for c.
func consulClient(c *conn) (*consulapi.Client, error) {
	ac := consulapi.DefaultConfig()
	ac.Address, ac.Token = c.endpoint, c.token
	if c.tls != nil {
		ac.Scheme = "https"
		ac.Transport.TLSClientConfig = c.tls.Clone() // the transport adds h2 to its config
	}
	return consulapi.NewClient(ac)
}

// probeConsul: the leader (public), then a key read (needs the token).
func probeConsul(ctx context.Context, c *conn) error {
	cc, err := consulClient(c)
	if err != nil {
		return err
	}
	if _, err = cc.Status().LeaderWithQueryOptions((&consulapi.QueryOptions{}).WithContext(ctx)); err != nil {
		return err
	}
	_, _, err = cc.KV().Get("locksuite/probe", (&consulapi.QueryOptions{}).WithContext(ctx))
	return err
}

func diagnoseConsul(s symptoms) (problem, fix string) {
	switch {
	case s.has("403") && s.has("ACL not found"):
		return "authentication failed: the agent does not know the token", "set CONSUL_HTTP_TOKEN to a valid ACL token (key:write on the suite's prefix, session:write)"
	case s.has("403", "Permission denied"):
		return "authentication failed: no token, or one without permission", "set CONSUL_HTTP_TOKEN to an ACL token with key:write on the suite's prefix and session:write"
	case s.untrusted():
		return "the agent's TLS certificate is not trusted", "set CONSUL_CACERT to a PEM file of the CA that signed it"
	case s.has("HTTP request to an HTTPS server") || s.plainToTLS():
		return "server requires TLS", "set CONSUL_HTTP_SSL=true (or use an https:// CONSUL_HTTP_ADDR) and CONSUL_CACERT"
	case s.c.tls != nil && s.has("server gave HTTP response to HTTPS client"):
		return "the agent does not speak TLS", "unset CONSUL_HTTP_SSL and use an http:// CONSUL_HTTP_ADDR"
	}
	return "", "check CONSUL_HTTP_ADDR (host:port of an agent), or unset it to let the harness start one"
}
