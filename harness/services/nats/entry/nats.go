package entry

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/natskv"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/harness/services"
	natsservice "github.com/locksuite/locksuite/harness/services/nats"
	"github.com/locksuite/locksuite/suite"
)

// natsService is a NATS server with JetStream embedded in this process,
// or the one NATS_URL names. The server refuses per-key TTLs under a
// second.
var natsService = &services.Service{
	Pod:  "nats",
	Name: "nats", Title: "NATS", Server: "an embedded nats-server",
	Lease: time.Second, Pause: 2 * time.Second, Pauses: 3, Duration: 8 * time.Second,
	Vars:       []string{"NATS_URL"},
	FromEnv:    natsFromEnv("NATS_URL"),
	Diagnose:   diagnoseNATS,
	HostPortOf: natsHostPort,
	Start:      services.StartOf(natsservice.Start),
	Probe:      probeNATS,
	Servers:    services.OneProcess("nats-server", services.NoClockGo),
	Version:    func() string { return "embedded: " + natsServerModule + " v" + server.VERSION },
}

// natsCluster is three NATS servers; named by its variable, it takes the
// credentials in its URLs.
var natsCluster = func() *services.Service {
	s := services.ClusterOf("nats-cluster", "a NATS cluster", "three embedded nats-servers", "LOCKSUITE_NATS_CLUSTER", natsService, services.ThreeOf(natsservice.StartCluster))
	s.FromEnv = natsFromEnv("LOCKSUITE_NATS_CLUSTER") // credentials in the URLs
	return s
}()

// natsSync is the embedded nats-server with JetStream's sync_interval:
// always (every write synced before it is acknowledged), for the crash
// scenarios: the server's default syncs every 2 minutes.
var natsSync = services.VariantOf(natsService, "nats-kv-sync", "NATS with sync_interval always", "an embedded nats-server with sync_interval: always",
	"LOCKSUITE_NATS_SYNC", servers.DurabilitySyncAlways, natsFromEnv("LOCKSUITE_NATS_SYNC"))

const natsServerModule = "github.com/nats-io/nats-server/v2"

// natsModules are the NATS backends' modules: the client's, and the
// server's (embedded).
var natsModules = []string{"github.com/nats-io/nats.go", natsServerModule}

var Backends = []services.Backend{
	{Name: "nats-kv", Kind: services.Adapter, On: natsService, Modules: natsModules, NewLocker: newNATSKV},
	{Name: "nats-cluster", Kind: services.Cluster, On: natsCluster, Modules: natsModules, NewLocker: func(c *services.Conn, cl suite.Client) (backends.Locker, error) {
		// The lock's bucket replicated on all three servers.
		return natskv.New(natskv.Config{URL: c.Endpoint, Dial: cl.Dial, Key: cl.Key, Lease: cl.Lease, Replicas: 3})
	}},
	{Name: "nats-kv-sync", Kind: services.Variant, On: natsSync, Modules: natsModules, NewLocker: newNATSKV},
}

// newNATSKV is the nats-kv adapter's Locker on the server at c.
func newNATSKV(c *services.Conn, cl suite.Client) (backends.Locker, error) {
	return natskv.New(natskv.Config{URL: c.Endpoint, Dial: cl.Dial, Key: cl.Key, Lease: cl.Lease})
}

// natsFromEnv returns the fromEnv of a NATS service named by variable ev
// (NATS_URL, LOCKSUITE_NATS_CLUSTER): nats://[user:password@]host:port,
// comma-separated for several servers.
func natsFromEnv(ev string) func() (*services.Conn, error) {
	return func() (*services.Conn, error) {
		v := os.Getenv(ev)
		if v == "" {
			return nil, nil
		}
		c := &services.Conn{Endpoint: v}
		for _, a := range strings.Split(v, ",") {
			if u, err := url.Parse(strings.TrimSpace(a)); err == nil && u.User != nil {
				p, _ := u.User.Password()
				c.Secrets = append(c.Secrets, p, u.User.Username())
			}
		}
		return c, nil
	}
}

// probeNATS connects and asks for JetStream's account info: the lock needs
// JetStream.
func probeNATS(ctx context.Context, c *services.Conn) error {
	nc, err := nats.Connect(c.Endpoint, nats.Timeout(3*time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if _, err := js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("JetStream: %w (start nats-server with -js)", err)
	}
	return nil
}

func diagnoseNATS(s services.Symptoms) (problem, fix string) {
	switch {
	case s.Has("Authorization Violation", "authorization violation", "Authentication Expired"):
		return "authentication failed: wrong or missing user name, password or token", "put the right credentials in NATS_URL: nats://user:password@host:port"
	case s.Has("JetStream:"):
		return "the server runs without JetStream", "start nats-server with -js (JetStream), or unset NATS_URL to let the harness embed one"
	case s.Has("TLS required", "tls: first record", "secure connection"):
		return "server requires TLS", "use a tls:// URL in NATS_URL"
	case s.Untrusted():
		return "the server's TLS certificate is not trusted", "give the server a certificate the system trusts"
	}
	return "", "check NATS_URL (nats://[user:password@]host:port, comma-separated), or unset it to let the harness embed a server"
}

// natsHostPort is the first server's host:port in NATS_URL.
func natsHostPort(ep string) string {
	u, err := url.Parse(strings.TrimSpace(strings.Split(ep, ",")[0]))
	if err != nil || u.Host == "" {
		return services.StripScheme(strings.Split(ep, ",")[0])
	}
	if u.Port() == "" {
		return net.JoinHostPort(u.Hostname(), "4222")
	}
	return u.Host
}
