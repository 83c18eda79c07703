package servers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/locksuite/locksuite/internal/spawn"
)

// ConsulVersion is the Consul server the harness runs: the newest
// MPL-licensed release, built from source by ci/setup.sh from the tools
// module in harness/consulbuild.
const ConsulVersion = "1.13.9"

// ConsulBinary finds the consul binary: $LOCKSUITE_CONSUL if set, then the
// build cache (<user cache dir>/locksuite/consul-<version>), then PATH.
func ConsulBinary() (string, error) {
	return FindBinary("LOCKSUITE_CONSUL", ConsulCachePath(), "consul")
}

// ConsulCachePath is where ci/setup.sh leaves the binary it builds.
func ConsulCachePath() string { return BuildCachePath("consul-" + ConsulVersion) }

// consulConnsPerClient is the harness's Consul servers' cap on concurrent
// HTTP connections from one client address (limits.http_max_conns_per_client,
// default 200): every client of the harness comes from one address
// (127.0.0.1, or a node's), and concurrent runs or a bench of 64 clients with
// long-polling waiters went past 200 and were answered 429.
const consulConnsPerClient = 4096

// Consul is a single-server Consul agent, started by StartConsul.
type Consul struct {
	base
	tls bool
}

func (s *Consul) Name() string { return "consul" }

// Endpoint is the HTTP (or, WithTLS, HTTPS) API's host:port.
func (s *Consul) Endpoint() string { return s.addr }

// URL is http://host:port, or https:// WithTLS.
func (s *Consul) URL() string { return HTTPURL(s.addr, s.tls) }

// StartConsul starts a Consul agent (-dev: one in-memory server) on free
// loopback ports with session_ttl_min = "100ms", so that sessions with short
// TTLs are allowed (Consul then invalidates them about 2 × TTL after the last
// renewal), and waits until it has a leader.
//
// WithCrash (or WithLazyFS) runs it as a server with its state in a data
// directory instead (server, bootstrap_expect = 1, raft_multiplier = 1 as
// StartConsulCluster's servers), which Crash restarts on; a -dev agent
// cannot be crashed (its state is in memory).
//
// WithAuth enables ACLs with default policy deny and a random initial
// management token (Secrets.Token), also the agent's own token; WithTLS
// serves the API on HTTPS only (no HTTP port), with a certificate of the
// test CA, client certificates not required.
func StartConsul(ctx context.Context, opts ...Option) (*Consul, error) {
	o := Apply(opts)
	if err := o.CheckDurability("consul"); err != nil {
		return nil, err
	}
	bin, err := ConsulBinary()
	if err != nil {
		return nil, &Unavailable{"consul", err, "run ci/setup.sh (builds Consul " + ConsulVersion + " with go build, about 7 minutes once), set LOCKSUITE_CONSUL to a consul binary, or name an agent with CONSUL_HTTP_ADDR"}
	}
	ports, dir, err := PortsAndDir(4, "consul")
	if err != nil {
		return nil, &Unavailable{"consul", err, "free loopback ports and a writable temporary directory"}
	}
	s := &Consul{base: base{dir: dir, sig: syscall.SIGINT, grace: 5 * time.Second, addr: fmt.Sprintf("127.0.0.1:%d", ports[0])}, tls: o.TLS}
	api := fmt.Sprintf("http = %d", ports[0])
	extra := ""
	if o.TLS {
		certs, err := NewPKI(dir, -1, -1)
		if err != nil {
			os.RemoveAll(dir)
			return nil, &Unavailable{"consul", err, "a writable temporary directory"}
		}
		certs.SetSecrets(&s.secrets)
		api = fmt.Sprintf("http = -1\n  https = %d", ports[0])
		extra += fmt.Sprintf(`
tls {
  defaults {
    ca_file = %q
    cert_file = %q
    key_file = %q
    verify_incoming = false
  }
}
`, certs.CA, certs.ServerCert, certs.ServerKey)
	}
	if o.Auth {
		s.secrets.Token = RandomUUID()
		extra += fmt.Sprintf(`
acl {
  enabled = true
  default_policy = "deny"
  enable_token_persistence = false
  tokens {
    initial_management = %q
    agent = %q
  }
}
`, s.secrets.Token, s.secrets.Token)
	}
	hcl := fmt.Sprintf(`
bind_addr = "127.0.0.1"
client_addr = "127.0.0.1"
advertise_addr = "127.0.0.1"
ports {
  %s
  serf_lan = %d
  serf_wan = %d
  server = %d
  dns = -1
  grpc = -1
}
session_ttl_min = "100ms"
disable_update_check = true
log_level = "warn"
limits {
  http_max_conns_per_client = %d
}
`, api, ports[1], ports[2], ports[3], consulConnsPerClient) + extra
	argv := []string{bin, "agent", "-dev", "-node", "locksuite", "-config-file", filepath.Join(dir, "locksuite.hcl")}
	if o.Crash {
		if s.data, err = newDataDir(dir, "data", o.Lazy, nil); err != nil {
			os.RemoveAll(dir)
			return nil, &Unavailable{"consul", err, "a writable temporary directory"}
		}
		hcl += fmt.Sprintf(`
node_name = "locksuite"
server = true
bootstrap_expect = 1
data_dir = %q
performance {
  raft_multiplier = 1
}
`, s.data.path)
		argv = []string{bin, "agent", "-config-file", filepath.Join(dir, "locksuite.hcl")}
	}
	if err := os.WriteFile(filepath.Join(dir, "locksuite.hcl"), []byte(hcl), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	ac := &consulapi.Config{Address: s.URL(), Token: s.secrets.Token, TLSConfig: consulapi.TLSConfig{CAFile: s.secrets.CAFile}}
	c, err := consulapi.NewClient(ac)
	if err != nil {
		s.Stop()
		return nil, err
	}
	start := func() (*Proc, error) { return Launch(spawn.Start, "consul", dir, nil, nil, argv...) }
	err = s.run(ctx, "consul", 30*time.Second, start, func(ctx context.Context) error {
		leader, err := c.Status().LeaderWithQueryOptions((&consulapi.QueryOptions{}).WithContext(ctx))
		if err == nil && strings.TrimSpace(leader) == "" {
			err = errors.New("no leader yet")
		}
		if err == nil && o.Auth {
			// The ACL system takes the management token a moment after
			// the leader is elected.
			_, _, err = c.KV().Get("locksuite/ready", (&consulapi.QueryOptions{}).WithContext(ctx))
		}
		return err
	})
	if err != nil {
		s.Stop()
		return nil, &Unavailable{"consul", err, FixFUSE(err, "see the log above")}
	}
	if !o.Crash {
		s.cannot = "consul runs in -dev mode, which keeps its state in memory: start it WithCrash (a server with a data directory)"
	}
	return s, nil
}
