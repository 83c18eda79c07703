package servers

import (
	"cmp"
	"context"
	"net"
	"strconv"

	"errors"
	"fmt"
	"google.golang.org/grpc"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// etcdMemberEnv makes a process an etcd cluster member: see init.
const etcdMemberEnv = "LOCKSUITE_ETCD_MEMBER"

// etcdMemberSpec is what a member process (or a single server run as a
// process: StartEtcd WithCrash) is told.
type etcdMemberSpec struct {
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
// uses this package) until SIGTERM, and never reaches main or the tests.
// Re-running the current binary, as harness/worker does for chaos workers,
// needs no build step, no Go toolchain and no source tree at run time, and
// the member runs exactly the etcd code the coordinator was built with; a
// separately built `main` would need all three and a cache to invalidate.
func init() { serveMember(etcdMemberEnv, "etcd", serveEtcdMember) }

func serveEtcdMember(s etcdMemberSpec) int {
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
	// The single server's timing (StartEtcd): a 1 s lease floor.
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
	case <-stopSignal():
	case err := <-e.Err():
		fmt.Fprintf(os.Stderr, "etcd member %s: %v\n", s.Name, err)
	}
	e.Close()
	return 0
}

// EtcdCluster is a three-member etcd cluster, each member its own process,
// started by StartEtcdCluster.
type EtcdCluster struct {
	group
	c   *clientv3.Client
	mu  sync.Mutex
	ids map[uint64]*Member // member ID → member, learnt from Status
}

func (s *EtcdCluster) Name() string { return "etcd-cluster" }

// Endpoint is every member's client address, comma-separated.
func (s *EtcdCluster) Endpoint() string { return strings.Join(s.Addrs(), ",") }

// StartEtcdCluster starts n etcd members (three for the failover scenario)
// on free loopback ports, each its own process running the embedded server
// of this binary (see init), with the single server's timing (100 ms
// heartbeat, 500 ms election timeout: leases of 1 s and more), and waits
// until they have elected a leader. It takes WithDurability (fsync, as
// StartEtcd) and WithLazyFS.
func StartEtcdCluster(ctx context.Context, n int, opts ...Option) (*EtcdCluster, error) {
	return StartEtcdClusterOn(ctx, nil, n, opts...)
}

// StartEtcdClusterOn is StartEtcdCluster with member i (etcd-(i+1))
// placed by h (nil: loopback).
func StartEtcdClusterOn(ctx context.Context, h *Hosts, n int, opts ...Option) (*EtcdCluster, error) {
	fail := func(err error) error {
		return &Unavailable{"etcd-cluster", err, fixFUSE(err, "free loopback ports and a writable temporary directory")}
	}
	o, err := clusterOptions("etcd-cluster", opts)
	if err != nil {
		return nil, err
	}
	if err := h.check("etcd-cluster", n); err != nil {
		return nil, fail(err)
	}
	ports, dir, err := portsAndDir(2*n, "etcd-cluster")
	if err != nil {
		return nil, fail(err)
	}
	s := &EtcdCluster{group: group{dir: dir}, ids: map[uint64]*Member{}}
	var initial []string
	for i := range n {
		initial = append(initial, fmt.Sprintf("etcd-%d=http://%s", i+1, net.JoinHostPort(h.host(i), strconv.Itoa(ports[2*i+1]))))
	}
	for i := range n {
		name, mdir, data, err := s.memberData("etcd", i, "data", o)
		if err != nil {
			s.Stop()
			return nil, fail(err)
		}
		spec := etcdMemberSpec{
			Name: name, Dir: data.path, Fsync: o.durability == DurabilityPackaged,
			Client:         "http://" + net.JoinHostPort(h.host(i), strconv.Itoa(ports[2*i])),
			Peer:           "http://" + net.JoinHostPort(h.host(i), strconv.Itoa(ports[2*i+1])),
			InitialCluster: strings.Join(initial, ","),
			Token:          filepath.Base(dir),
		}
		start := h.starter(i)
		if _, err := s.addOn(name, mdir, h.host(i), ports[2*i], func() (*proc, error) {
			return startSelfMember(start, name, mdir, etcdMemberEnv, spec)
		}); err != nil {
			s.Stop()
			return nil, fail(err)
		}
	}
	cc := clientv3.Config{Endpoints: s.Addrs(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()}
	if h != nil {
		cc.DialOptions = []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return h.dial(ctx, "tcp", addr)
		})}
	}
	s.c, err = clientv3.New(cc)
	if err != nil {
		s.Stop()
		return nil, fail(err)
	}
	if err := s.waitStarted(ctx, 30*time.Second, s.Healthy); err != nil {
		s.Stop()
		return nil, fail(err)
	}
	return s, nil
}

// status asks every running member for its status and returns the leader
// they agree on.
func (s *EtcdCluster) status(ctx context.Context) (*Member, []*Member, error) {
	ms, err := running(s.members)
	if err != nil {
		return nil, nil, err
	}
	var leader uint64
	for _, m := range ms {
		st, err := s.c.Status(ctx, m.addr)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", m.name, err)
		}
		s.mu.Lock()
		s.ids[st.Header.MemberId] = m
		s.mu.Unlock()
		switch {
		case st.Leader == 0:
			return nil, nil, fmt.Errorf("%s has no leader", m.name)
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
func (s *EtcdCluster) Healthy(ctx context.Context) error {
	if _, _, err := s.status(ctx); err != nil {
		return err
	}
	_, err := s.c.Get(ctx, "locksuite-health")
	return err
}

func (s *EtcdCluster) Leader(ctx context.Context) (*Member, error) {
	l, _, err := s.status(ctx)
	return l, err
}

func (s *EtcdCluster) Restart(ctx context.Context) error {
	return s.restart(ctx, 30*time.Second, s.Healthy)
}

// Stop ends every member and removes the cluster's directory.
func (s *EtcdCluster) Stop() error {
	s.stop(syscall.SIGTERM, 5*time.Second, func() {
		if s.c != nil {
			s.c.Close()
		}
	})
	return nil
}
