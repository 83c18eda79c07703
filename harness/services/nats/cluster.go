package nats

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/internal/roles"
	"github.com/locksuite/locksuite/internal/spawn"
	natsserver "github.com/nats-io/nats-server/v2/server"
)

// memberEnv makes a process a NATS cluster member: see init.
const memberEnv = "LOCKSUITE_NATS_MEMBER"

// memberSpec is what a member process (or a single server: Start) is
// told.
type memberSpec struct {
	Name        string `json:"name"`
	Dir         string `json:"dir"`            // the JetStream store
	Host        string `json:"host,omitempty"` // the clients' listener's address; default 127.0.0.1
	Port        int    `json:"port"`
	ClusterPort int    `json:"cluster_port,omitempty"` // 0: not clustered
	HTTPPort    int    `json:"http_port,omitempty"`    // the monitoring port; 0: none
	Routes      string `json:"routes,omitempty"`       // comma-separated nats-route:// URLs
	// User and Password, if set, are the one user the server takes.
	User     string `json:"user,omitempty"`
	Password string `json:"password,omitempty"`
	// CertFile and KeyFile, if set, make the server take TLS only.
	CertFile string `json:"cert_file,omitempty"`
	KeyFile  string `json:"key_file,omitempty"`
	// SyncAlways: sync_interval: always.
	SyncAlways bool `json:"sync_always,omitempty"`
}

// options is the server's configuration.
func (s memberSpec) options() (*natsserver.Options, error) {
	o := &natsserver.Options{
		ServerName: s.Name, Host: cmp.Or(s.Host, "127.0.0.1"), Port: s.Port,
		JetStream: true, StoreDir: s.Dir, SyncAlways: s.SyncAlways,
		Username: s.User, Password: s.Password,
		NoSigs: true, DisableJetStreamBanner: true, Logtime: true,
	}
	if s.HTTPPort != 0 {
		o.HTTPHost, o.HTTPPort = "127.0.0.1", s.HTTPPort
	}
	if s.ClusterPort != 0 {
		o.Cluster = natsserver.ClusterOpts{Name: "locksuite", Host: "127.0.0.1", Port: s.ClusterPort}
		o.Routes = natsserver.RoutesFromStr(s.Routes)
	}
	if s.CertFile != "" {
		tc, err := natsserver.GenTLSConfig(&natsserver.TLSConfigOpts{CertFile: s.CertFile, KeyFile: s.KeyFile})
		if err != nil {
			return nil, err
		}
		o.TLSConfig, o.TLS, o.TLSTimeout = tc, true, 2
	}
	return o, nil
}

// A member of a NATS cluster is this same binary run again with
// LOCKSUITE_NATS_MEMBER set: the process serves the embedded NATS server
// (already linked into every binary that uses this package) until SIGTERM,
// from harness/role's Serve, and never reaches the tests; why re-exec, see
// harness/services/etcd's cluster.go.
func init() { roles.Member(memberEnv, "nats", serveMember) }

func serveMember(s memberSpec) int {
	o, err := s.options()
	if err == nil {
		var ns *natsserver.Server
		if ns, err = natsserver.NewServer(o); err == nil {
			ns.ConfigureLogger()
			ns.Start()
			<-servers.StopSignal()
			ns.Shutdown()
			ns.WaitForShutdown()
			return 0
		}
	}
	fmt.Fprintf(os.Stderr, "nats member %s: %v\n", s.Name, err)
	return 1
}

// Cluster is a JetStream cluster of NATS servers, each its own process,
// started by StartCluster.
type Cluster struct {
	servers.GroupMethods
	g    *servers.Group
	http map[*servers.Member]string // member → its monitoring address
	hc   *http.Client
}

func (s *Cluster) Name() string { return "nats-cluster" }

// Endpoint is every server's client URL, comma-separated (the form
// nats.Connect and NATS_URL take).
func (s *Cluster) Endpoint() string {
	var urls []string
	for _, a := range s.Addrs() {
		urls = append(urls, "nats://"+a)
	}
	return strings.Join(urls, ",")
}

// StartCluster starts n NATS servers with JetStream (three for the
// failover scenario) on free loopback ports, routed to each other as one
// cluster, each its own process running the embedded server of this binary
// (see init) with its store in the cluster's temporary directory, and waits
// until they have elected a JetStream meta leader and every server reports
// itself healthy. The servers' Raft timing is nats-server's own (an
// election 4 s to 9 s after a leader is lost; it cannot be set). It takes
// WithDurability (sync_interval, as Start) and WithLazyFS.
func StartCluster(ctx context.Context, n int, opts ...servers.Option) (*Cluster, error) {
	fail := func(err error) error {
		return &servers.Unavailable{Backend: "nats-cluster", Err: err, Fix: servers.FixFUSE(err, "free loopback ports and a writable temporary directory")}
	}
	o, err := servers.ClusterSettings("nats-cluster", opts, servers.DurabilitySyncAlways)
	if err != nil {
		return nil, err
	}
	ports, dir, err := servers.PortsAndDir(3*n, "nats-cluster")
	if err != nil {
		return nil, fail(err)
	}
	g := servers.NewGroup(dir, 5*time.Second)
	s := &Cluster{GroupMethods: g, g: g, http: map[*servers.Member]string{}, hc: &http.Client{Timeout: 2 * time.Second}}
	g.SetHealthy(s.Healthy)
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[3*i+1]))
	}
	for i := range n {
		name, mdir, data, err := g.MemberData("nats", i, "jetstream", o)
		if err != nil {
			s.Stop()
			return nil, fail(err)
		}
		spec := memberSpec{Name: name, Dir: data, SyncAlways: o.Durability == servers.DurabilitySyncAlways,
			Port: ports[3*i], ClusterPort: ports[3*i+1], HTTPPort: ports[3*i+2], Routes: strings.Join(routes, ",")}
		m, err := g.AddOn(name, mdir, "127.0.0.1", ports[3*i], func() (*servers.Proc, error) {
			return servers.StartSelfMember(spawn.Start, name, mdir, memberEnv, spec)
		})
		if err != nil {
			s.Stop()
			return nil, fail(err)
		}
		s.http[m] = fmt.Sprintf("127.0.0.1:%d", ports[3*i+2])
	}
	if err := g.WaitStarted(ctx, 60*time.Second, s.Healthy); err != nil {
		s.Stop()
		return nil, fail(err)
	}
	return s, nil
}

// get reads a member's monitoring endpoint (path) into v, and fails unless
// it answers 200.
func (s *Cluster) get(ctx context.Context, m *servers.Member, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.http[m]+path, nil)
	if err != nil {
		return err
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", m.Name(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", m.Name(), path, resp.Status)
	}
	if v == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// status asks every running server for the JetStream meta leader and
// returns the one they agree on.
func (s *Cluster) status(ctx context.Context) (*servers.Member, error) {
	ms, err := servers.Running(s.Members())
	if err != nil {
		return nil, err
	}
	agreed, err := servers.Agree(ms, "JetStream meta leader", func(m *servers.Member) (string, error) {
		var jsz natsserver.JSInfo
		if err := s.get(ctx, m, "/jsz", &jsz); err != nil || jsz.Meta == nil {
			return "", err
		}
		return jsz.Meta.Leader, nil
	})
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		if m.Name() == agreed {
			return m, nil
		}
	}
	return nil, fmt.Errorf("the meta leader %s is not a running server", agreed)
}

// Healthy: every running server names the same running meta leader, and
// reports itself healthy (/healthz: JetStream on, the meta group and every
// stream and consumer it replicates current).
func (s *Cluster) Healthy(ctx context.Context) error {
	if _, err := s.status(ctx); err != nil {
		return err
	}
	return s.g.EachRunning(func(m *servers.Member) error { return s.get(ctx, m, "/healthz", nil) })
}

// Leader is the JetStream meta leader (which places streams; a key-value
// bucket's own stream has a leader of its own, which may be another
// server).
func (s *Cluster) Leader(ctx context.Context) (*servers.Member, error) { return s.status(ctx) }
