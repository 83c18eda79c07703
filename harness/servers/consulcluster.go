package servers

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
)

// ConsulCluster is n Consul servers (-server, -bootstrap-expect=n, joined
// with retry_join), each its own process with its own ports and data
// directory. Started by StartConsulCluster.
type ConsulCluster struct {
	group
	raft    map[string]*Member // Raft address (the server port) → member
	clients map[*Member]*api.Client
}

func (s *ConsulCluster) Name() string { return "consul-cluster" }

// Endpoint is every server's HTTP address, comma-separated.
func (s *ConsulCluster) Endpoint() string { return strings.Join(s.Addrs(), ",") }

// StartConsulCluster starts n Consul servers (the binary of ConsulBinary) on
// free loopback ports with session_ttl_min = "100ms", as StartConsul does,
// and raft_multiplier = 1 (Consul's production recommendation: a leader is
// replaced about 1-2 s after it fails, not 5-10 s), and waits until they
// have elected a leader and every server answers. It takes WithLazyFS.
func StartConsulCluster(ctx context.Context, n int, opts ...Option) (*ConsulCluster, error) {
	return StartConsulClusterOn(ctx, nil, n, opts...)
}

// StartConsulClusterOn is StartConsulCluster with server i (consul-(i+1))
// placed by h (nil: loopback).
func StartConsulClusterOn(ctx context.Context, h *Hosts, n int, opts ...Option) (*ConsulCluster, error) {
	o, err := ClusterSettings("consul-cluster", opts)
	if err != nil {
		return nil, err
	}
	if err := h.Check("consul-cluster", n); err != nil {
		return nil, &Unavailable{"consul-cluster", err, "place every server"}
	}
	bin, err := ConsulBinary()
	if err != nil {
		return nil, &Unavailable{"consul-cluster", err, "run ci/setup.sh (builds Consul " + ConsulVersion + " once), or set LOCKSUITE_CONSUL to a consul binary"}
	}
	ports, dir, err := PortsAndDir(4*n, "consul-cluster")
	if err != nil {
		return nil, &Unavailable{"consul-cluster", err, "free loopback ports and a writable temporary directory"}
	}
	s := &ConsulCluster{group: group{dir: dir, grace: 3 * time.Second}, raft: map[string]*Member{}, clients: map[*Member]*api.Client{}}
	s.healthy = s.Healthy
	var join []string
	for i := range n {
		join = append(join, fmt.Sprintf("%q", net.JoinHostPort(h.Host(i), strconv.Itoa(ports[4*i+1]))))
	}
	for i := range n {
		name, mdir, data, err := s.memberData("consul", i, "data", o)
		if err != nil {
			s.Stop()
			return nil, &Unavailable{"consul-cluster", err, FixFUSE(err, "a writable temporary directory")}
		}
		hcl := fmt.Sprintf(`
node_name = %[1]q
server = true
bootstrap_expect = %[2]d
data_dir = %[3]q
bind_addr = %[9]q
client_addr = %[9]q
advertise_addr = %[9]q
ports {
  http = %[4]d
  serf_lan = %[5]d
  serf_wan = %[6]d
  server = %[7]d
  dns = -1
  grpc = -1
}
retry_join = [%[8]s]
retry_interval = "1s"
session_ttl_min = "100ms"
performance {
  raft_multiplier = 1
}
disable_update_check = true
log_level = "warn"
limits {
  http_max_conns_per_client = %[10]d
}
`, name, n, data.path, ports[4*i], ports[4*i+1], ports[4*i+2], ports[4*i+3], strings.Join(join, ", "), h.Host(i), consulConnsPerClient)
		cf := filepath.Join(mdir, "locksuite.hcl")
		if err := os.WriteFile(cf, []byte(hcl), 0o600); err != nil {
			s.Stop()
			return nil, &Unavailable{"consul-cluster", err, "a writable temporary directory"}
		}
		start := h.Starter(i)
		m, err := s.addOn(name, mdir, h.Host(i), ports[4*i], func() (*Proc, error) {
			return Launch(start, name, mdir, nil, nil, bin, "agent", "-config-file", cf)
		})
		if err != nil {
			s.Stop()
			return nil, &Unavailable{"consul-cluster", err, "check that " + bin + " runs"}
		}
		s.raft[net.JoinHostPort(h.Host(i), strconv.Itoa(ports[4*i+3]))] = m
		ac := api.DefaultConfig()
		ac.Address = m.addr
		ac.Transport = &http.Transport{MaxIdleConnsPerHost: 2, IdleConnTimeout: 10 * time.Second, DialContext: h.Dial}
		if s.clients[m], err = api.NewClient(ac); err != nil {
			s.Stop()
			return nil, &Unavailable{"consul-cluster", err, "a Consul API client"}
		}
	}
	if err := s.waitStarted(ctx, 60*time.Second, s.Healthy); err != nil {
		s.Stop()
		return nil, &Unavailable{"consul-cluster", err, "see the error and the servers' logs above"}
	}
	return s, nil
}

// status asks every running server for the leader and returns the one they
// agree on.
func (s *ConsulCluster) status(ctx context.Context) (*Member, error) {
	ms, err := Running(s.members)
	if err != nil {
		return nil, err
	}
	agreed, err := Agree(ms, "leader", func(m *Member) (string, error) {
		l, err := s.clients[m].Status().LeaderWithQueryOptions((&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			return "", fmt.Errorf("%s: %w", m.name, err)
		}
		return l, nil
	})
	if err != nil {
		return nil, err
	}
	if l := s.raft[agreed]; l != nil && l.Running() {
		return l, nil
	}
	return nil, fmt.Errorf("the leader %s is not a running server", agreed)
}

// Healthy: every running server names the same running leader, and a
// consistent read through each of them (which the leader must confirm with
// a quorum) succeeds.
func (s *ConsulCluster) Healthy(ctx context.Context) error {
	if _, err := s.status(ctx); err != nil {
		return err
	}
	return s.eachRunning(func(m *Member) error {
		_, _, err := s.clients[m].KV().Get("locksuite-health", (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
		if err != nil {
			return fmt.Errorf("%s: consistent read: %w", m.name, err)
		}
		return nil
	})
}

func (s *ConsulCluster) Leader(ctx context.Context) (*Member, error) { return s.status(ctx) }
