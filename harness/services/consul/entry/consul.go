package entry

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
	"github.com/locksuite/locksuite/harness/services"
	"github.com/locksuite/locksuite/suite"
)

// consulService is one Consul agent in dev mode (servers.StartConsul, the
// build of ci/setup.sh), or the agent CONSUL_HTTP_ADDR names.
var consulService = &services.Service{
	Name: "consul", Title: "Consul", Server: "consul (the build of ci/setup.sh)",
	Lease: 200 * time.Millisecond, Pause: 800 * time.Millisecond, Duration: 6 * time.Second,
	Vars:       []string{"CONSUL_HTTP_ADDR", "CONSUL_HTTP_TOKEN", "CONSUL_HTTP_TOKEN_FILE", "CONSUL_HTTP_SSL", "CONSUL_HTTP_SSL_VERIFY", "CONSUL_CACERT", "CONSUL_CAPATH", "CONSUL_CLIENT_CERT", "CONSUL_CLIENT_KEY", "CONSUL_TLS_SERVER_NAME"},
	FromEnv:    consulFromEnv("consul", "CONSUL_HTTP_ADDR"),
	Start:      services.StartOf(servers.StartConsul),
	Probe:      probeConsul,
	Diagnose:   diagnoseConsul,
	HostPortOf: services.StripScheme,
	Servers:    services.OneProcess("consul", noClockConsul),
	Durability: servers.DurabilityPackaged,
	Version:    consulVersion,
}

// consulCluster is three Consul servers; named by its variable, it takes
// the CONSUL_* credentials and TLS settings.
var consulCluster = services.ClusterOf("consul-cluster", "a Consul cluster", "three consul servers", "LOCKSUITE_CONSUL_CLUSTER", consulService, services.ThreeOf(servers.StartConsulCluster)).
	WithSecurityOf(consulService, consulFromEnv("consul-cluster", "LOCKSUITE_CONSUL_CLUSTER")).
	OnThreeNodes(services.ThreeOn(servers.StartConsulClusterOn))

const consulAPI = "github.com/hashicorp/consul/api"

var Backends = []services.Backend{
	{Name: "consul", Kind: services.Adapter, On: consulService, Modules: []string{consulAPI}, NewLocker: func(c *services.Conn, cl suite.Client) (backends.Locker, error) {
		return consul.New(consul.Config{Address: c.Endpoint, Token: c.Token, TLS: c.TLS, Dial: cl.Dial, Key: cl.Key, TTL: cl.Lease})
	}},
	{Name: "consul-lock", Kind: services.Library, On: consulService, Modules: []string{consulAPI}, NewLocker: func(c *services.Conn, cl suite.Client) (backends.Locker, error) {
		// LockWaitTime 1s: an abandoned Acquire's Lock ends within 1s
		// (Close waits for it), not the library's 15s.
		return consullock.New(consullock.Config{Address: c.Endpoint, Token: c.Token, TLS: c.TLS, Dial: cl.Dial, Key: cl.Key, TTL: cl.Lease, LockDelay: consulLockDelay, LockWaitTime: time.Second})
	}, Tune: func(cfg *suite.Config) {
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
	{Name: "consul-cluster", Kind: services.Cluster, On: consulCluster, Modules: []string{consulAPI}, NewLocker: func(c *services.Conn, cl suite.Client) (backends.Locker, error) {
		return consul.New(consul.Config{Addresses: c.HostPorts(), Token: c.Token, TLS: c.TLS, Dial: cl.Dial, Key: cl.Key, TTL: cl.Lease})
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
	return services.BinVersion([]string{"version"}, b)
}

// consulFromEnv returns the fromEnv of a Consul service named by variable
// v (CONSUL_HTTP_ADDR, LOCKSUITE_CONSUL_CLUSTER): its address(es), and the
// token and TLS settings of the CONSUL_* variables that consul/api reads.
func consulFromEnv(name, v string) func() (*services.Conn, error) {
	return func() (*services.Conn, error) {
		c := &services.Conn{Endpoint: os.Getenv(v)}
		if c.Endpoint == "" {
			return nil, nil
		}
		ac := consulapi.DefaultConfig() // reads every CONSUL_* variable
		c.Token = ac.Token
		c.Secrets = append(c.Secrets, c.Token)
		if strings.HasPrefix(strings.TrimSpace(c.Endpoint), "https://") || ac.Scheme == "https" {
			if ac.TLSConfig.Address == "" {
				ac.TLSConfig.Address = services.HostOnly(services.StripScheme(strings.Split(c.Endpoint, ",")[0]))
			}
			t, err := consulapi.SetupTLSConfig(&ac.TLSConfig)
			if err != nil {
				return nil, &servers.Unavailable{Backend: name, Err: err, Fix: "check CONSUL_CACERT, CONSUL_CLIENT_CERT and CONSUL_CLIENT_KEY"}
			}
			c.TLS = t
		}
		return c, nil
	}
}

// consulClient is an API client for c.
func consulClient(c *services.Conn) (*consulapi.Client, error) {
	ac := consulapi.DefaultConfig()
	ac.Address, ac.Token = c.Endpoint, c.Token
	if c.TLS != nil {
		ac.Scheme = "https"
		ac.Transport.TLSClientConfig = c.TLS.Clone() // the transport adds h2 to its config
	}
	return consulapi.NewClient(ac)
}

// probeConsul: the leader (public), then a key read (needs the token).
func probeConsul(ctx context.Context, c *services.Conn) error {
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

func diagnoseConsul(s services.Symptoms) (problem, fix string) {
	switch {
	case s.Has("403") && s.Has("ACL not found"):
		return "authentication failed: the agent does not know the token", "set CONSUL_HTTP_TOKEN to a valid ACL token (key:write on the suite's prefix, session:write)"
	case s.Has("403", "Permission denied"):
		return "authentication failed: no token, or one without permission", "set CONSUL_HTTP_TOKEN to an ACL token with key:write on the suite's prefix and session:write"
	case s.Untrusted():
		return "the agent's TLS certificate is not trusted", "set CONSUL_CACERT to a PEM file of the CA that signed it"
	case s.Has("HTTP request to an HTTPS server") || s.PlainToTLS():
		return "server requires TLS", "set CONSUL_HTTP_SSL=true (or use an https:// CONSUL_HTTP_ADDR) and CONSUL_CACERT"
	case s.C.TLS != nil && s.Has("server gave HTTP response to HTTPS client"):
		return "the agent does not speak TLS", "unset CONSUL_HTTP_SSL and use an http:// CONSUL_HTTP_ADDR"
	}
	return "", "check CONSUL_HTTP_ADDR (host:port of an agent), or unset it to let the harness start one"
}
