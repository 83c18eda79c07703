package servers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/consul/api"
)

// ConsulVersion is the Consul server the harness runs: the newest
// MPL-licensed release, built from source by ci/setup.sh from the tools
// module in harness/consulbuild.
const ConsulVersion = "1.13.9"

// ConsulBinary finds the consul binary: $LOCKSUITE_CONSUL if set, then the
// build cache (<user cache dir>/locksuite/consul-<version>), then PATH.
func ConsulBinary() (string, error) {
	if p := os.Getenv("LOCKSUITE_CONSUL"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("LOCKSUITE_CONSUL=%s: %w", p, err)
		}
		return p, nil
	}
	if p := ConsulCachePath(); p != "" {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("consul"); err == nil {
		return p, nil
	}
	return "", errors.New("no consul binary (not in $LOCKSUITE_CONSUL, " + ConsulCachePath() + " or PATH)")
}

// ConsulCachePath is where ci/setup.sh leaves the binary it builds.
func ConsulCachePath() string {
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "locksuite", "consul-"+ConsulVersion)
}

// Consul is a single-server Consul agent in dev mode, started by StartConsul.
type Consul struct {
	p    *proc
	addr string
	once sync.Once
}

func (s *Consul) Name() string     { return "consul" }
func (s *Consul) Endpoint() string { return s.addr }
func (s *Consul) Pid() int         { return s.p.Pid() }

// StartConsul starts a Consul agent (-dev: one in-memory server) on free
// loopback ports with session_ttl_min = "100ms", so that sessions with short
// TTLs are allowed (Consul then invalidates them about 2 × TTL after the last
// renewal), and waits until it has a leader.
func StartConsul(ctx context.Context) (*Consul, error) {
	bin, err := ConsulBinary()
	if err != nil {
		return nil, &Unavailable{"consul", err, "run ci/setup.sh (builds Consul " + ConsulVersion + " with go build, about 7 minutes once), set LOCKSUITE_CONSUL to a consul binary, or name an agent with CONSUL_HTTP_ADDR"}
	}
	ports, err := freePorts(4)
	if err != nil {
		return nil, &Unavailable{"consul", err, "free loopback ports"}
	}
	dir, err := os.MkdirTemp("", "locksuite-consul-")
	if err != nil {
		return nil, err
	}
	hcl := fmt.Sprintf(`
bind_addr = "127.0.0.1"
client_addr = "127.0.0.1"
advertise_addr = "127.0.0.1"
ports {
  http = %d
  serf_lan = %d
  serf_wan = %d
  server = %d
  dns = -1
  grpc = -1
}
session_ttl_min = "100ms"
disable_update_check = true
log_level = "warn"
`, ports[0], ports[1], ports[2], ports[3])
	if err := os.WriteFile(filepath.Join(dir, "locksuite.hcl"), []byte(hcl), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p, err := startProc("consul", dir, nil, bin, "agent", "-dev", "-node", "locksuite", "-config-file", filepath.Join(dir, "locksuite.hcl"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, &Unavailable{"consul", err, "check that " + bin + " runs"}
	}
	s := &Consul{p: p, addr: fmt.Sprintf("127.0.0.1:%d", ports[0])}
	ac := api.DefaultConfig()
	ac.Address = s.addr
	c, err := api.NewClient(ac)
	if err != nil {
		s.Stop()
		return nil, err
	}
	err = waitReady(ctx, p, 30*time.Second, func(ctx context.Context) error {
		leader, err := c.Status().LeaderWithQueryOptions((&api.QueryOptions{}).WithContext(ctx))
		if err == nil && strings.TrimSpace(leader) == "" {
			err = errors.New("no leader yet")
		}
		return err
	})
	if err != nil {
		s.Stop()
		return nil, &Unavailable{"consul", err, "see the log above"}
	}
	return s, nil
}

func (s *Consul) Stop() error {
	s.once.Do(func() {
		s.p.stop(syscall.SIGINT, 5*time.Second)
		os.RemoveAll(s.p.dir)
	})
	return nil
}
