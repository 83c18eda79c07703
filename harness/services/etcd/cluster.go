package etcd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/internal/roles"
	"google.golang.org/grpc"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// memberEnv makes a process an etcd cluster member: see init.
const memberEnv = "LOCKSUITE_ETCD_MEMBER"

// MemberSpec is what a member process (or a single server run as a
// process: Start WithCrash) is told: see StartMember.
type MemberSpec struct {
	Name           string `json:"name"`
	Dir            string `json:"dir"`
	Client         string `json:"client"` // URL
	Peer           string `json:"peer"`   // URL
	InitialCluster string `json:"initial_cluster"`
	Token          string `json:"token"`
	// Fsync: fsync on commit, as packaged (not --unsafe-no-fsync).
	Fsync bool `json:"fsync"`
	// The client TLS files, when clients must use TLS (with a client
	// certificate of the CA).
	CertFile string `json:"cert_file,omitempty"`
	KeyFile  string `json:"key_file,omitempty"`
	CAFile   string `json:"ca_file,omitempty"`
	// LogLevel is zap's level ("warn" when empty).
	LogLevel string `json:"log_level,omitempty"`
}

// A member of an etcd cluster is this same binary run again with
// LOCKSUITE_ETCD_MEMBER set: the process serves the embedded etcd server
// (go.etcd.io/etcd/server/v3/embed, already linked into every binary that
// uses this package) until SIGTERM, from harness/role's Serve, which the
// binary's main or TestMain calls first: it never reaches the tests.
// Re-running the current binary, as harness/worker does for chaos workers,
// needs no build step, no Go toolchain and no source tree at run time, and
// the member runs exactly the etcd code the coordinator was built with; a
// separately built `main` would need all three and a cache to invalidate.
func init() { roles.Member(memberEnv, "etcd", serveMember) }

// StartMember starts, with start (spawn.Start, or a node's Start), this
// binary again as the etcd member spec.Name, its spec, log and directory
// in dir (as servers.StartSelfMember); the member serves spec until
// SIGTERM. It returns the started process, or the error of writing the
// spec or of start.
func StartMember(start func(*exec.Cmd) error, name, dir string, spec MemberSpec) (*servers.Proc, error) {
	return servers.StartSelfMember(start, name, dir, memberEnv, spec)
}

func serveMember(s MemberSpec) int {
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = s.Name, s.Dir
	cu, err1 := url.Parse(s.Client)
	pu, err2 := url.Parse(s.Peer)
	if err := errors.Join(err1, err2); err != nil {
		fmt.Fprintf(os.Stderr, "etcd member: %v\n", err)
		return 2
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster, cfg.InitialClusterToken = s.InitialCluster, s.Token
	if s.CertFile != "" {
		cfg.ClientTLSInfo = transport.TLSInfo{CertFile: s.CertFile, KeyFile: s.KeyFile, TrustedCAFile: s.CAFile, ClientCertAuth: true}
	}
	// The single server's timing (Start): a 1 s lease floor.
	cfg.TickMs, cfg.ElectionMs = 100, 500
	cfg.LogLevel = cmp.Or(s.LogLevel, "warn")
	cfg.LogOutputs = []string{"stderr"}
	cfg.UnsafeNoFsync = !s.Fsync
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcd member %s: %v\n", s.Name, err)
		return 1
	}
	select {
	case <-servers.StopSignal():
	case err := <-e.Err():
		fmt.Fprintf(os.Stderr, "etcd member %s: %v\n", s.Name, err)
	}
	e.Close()
	return 0
}

// Cluster is a three-member etcd cluster, each member its own process,
// started by StartCluster.
type Cluster struct {
	servers.GroupMethods
	g   *servers.Group
	c   *clientv3.Client
	mu  sync.Mutex
	ids map[uint64]*servers.Member // member ID → member, learnt from Status
}

func (s *Cluster) Name() string { return "etcd-cluster" }

// Endpoint is every member's client address, comma-separated.
func (s *Cluster) Endpoint() string { return strings.Join(s.Addrs(), ",") }

// StartCluster starts n etcd members (three for the failover scenario)
// on free loopback ports, each its own process running the embedded server
// of this binary (see init), with the single server's timing (100 ms
// heartbeat, 500 ms election timeout: leases of 1 s and more), and waits
// until they have elected a leader. It takes WithDurability (fsync, as
// Start) and WithLazyFS.
func StartCluster(ctx context.Context, n int, opts ...servers.Option) (*Cluster, error) {
	return StartClusterOn(ctx, nil, n, opts...)
}

// StartClusterOn is StartCluster with member i (etcd-(i+1)) placed by h
// (nil: loopback).
func StartClusterOn(ctx context.Context, h *servers.Hosts, n int, opts ...servers.Option) (*Cluster, error) {
	fail := func(err error) error {
		return &servers.Unavailable{Backend: "etcd-cluster", Err: err, Fix: servers.FixFUSE(err, "free loopback ports and a writable temporary directory")}
	}
	o, err := servers.ClusterSettings("etcd-cluster", opts)
	if err != nil {
		return nil, err
	}
	if err := h.Check("etcd-cluster", n); err != nil {
		return nil, fail(err)
	}
	ports, dir, err := servers.PortsAndDir(2*n, "etcd-cluster")
	if err != nil {
		return nil, fail(err)
	}
	g := servers.NewGroup(dir, 0)
	s := &Cluster{GroupMethods: g, g: g, ids: map[uint64]*servers.Member{}}
	var initial []string
	for i := range n {
		initial = append(initial, fmt.Sprintf("etcd-%d=http://%s", i+1, net.JoinHostPort(h.Host(i), strconv.Itoa(ports[2*i+1]))))
	}
	for i := range n {
		name, mdir, data, err := g.MemberData("etcd", i, "data", o)
		if err != nil {
			s.Stop()
			return nil, fail(err)
		}
		spec := MemberSpec{
			Name: name, Dir: data, Fsync: o.Durability == servers.DurabilityPackaged,
			Client:         "http://" + net.JoinHostPort(h.Host(i), strconv.Itoa(ports[2*i])),
			Peer:           "http://" + net.JoinHostPort(h.Host(i), strconv.Itoa(ports[2*i+1])),
			InitialCluster: strings.Join(initial, ","),
			Token:          filepath.Base(dir),
		}
		start := h.Starter(i)
		if _, err := g.AddOn(name, mdir, h.Host(i), ports[2*i], func() (*servers.Proc, error) {
			return StartMember(start, name, mdir, spec)
		}); err != nil {
			s.Stop()
			return nil, fail(err)
		}
	}
	cc := clientv3.Config{Endpoints: s.Addrs(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()}
	if h != nil {
		cc.DialOptions = []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return h.Dial(ctx, "tcp", addr)
		})}
	}
	s.c, err = clientv3.New(cc)
	if err != nil {
		s.Stop()
		return nil, fail(err)
	}
	if err := g.WaitStarted(ctx, 30*time.Second, s.Healthy); err != nil {
		s.Stop()
		return nil, fail(err)
	}
	return s, nil
}

// status asks every running member for its status and returns the leader
// they agree on.
func (s *Cluster) status(ctx context.Context) (*servers.Member, []*servers.Member, error) {
	ms, err := servers.Running(s.Members())
	if err != nil {
		return nil, nil, err
	}
	var leader uint64
	for _, m := range ms {
		st, err := s.c.Status(ctx, m.Addr())
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", m.Name(), err)
		}
		s.mu.Lock()
		s.ids[st.Header.MemberId] = m
		s.mu.Unlock()
		switch {
		case st.Leader == 0:
			return nil, nil, fmt.Errorf("%s has no leader", m.Name())
		case leader != 0 && st.Leader != leader:
			return nil, nil, fmt.Errorf("members disagree on the leader (%x, %x)", leader, st.Leader)
		}
		leader = st.Leader
	}
	s.mu.Lock()
	l := s.ids[leader]
	s.mu.Unlock()
	if l == nil || !l.Running() {
		return nil, nil, fmt.Errorf("the leader %x is not a running member", leader)
	}
	return l, ms, nil
}

// Healthy: every running member answers and names the same running leader,
// and a linearizable read (which needs a quorum) succeeds.
func (s *Cluster) Healthy(ctx context.Context) error {
	if _, _, err := s.status(ctx); err != nil {
		return err
	}
	_, err := s.c.Get(ctx, "locksuite-health")
	return err
}

func (s *Cluster) Leader(ctx context.Context) (*servers.Member, error) {
	l, _, err := s.status(ctx)
	return l, err
}

func (s *Cluster) Restart(ctx context.Context) error {
	return s.g.RestartWithin(ctx, 30*time.Second, s.Healthy)
}

// Stop ends every member and removes the cluster's directory.
func (s *Cluster) Stop() error {
	s.g.StopWith(syscall.SIGTERM, 5*time.Second, func() {
		if s.c != nil {
			s.c.Close()
		}
	})
	return nil
}
