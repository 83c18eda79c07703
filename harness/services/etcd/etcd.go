// Package etcd starts etcd servers for the suite: one embedded in this
// process (go.etcd.io/etcd/server/v3/embed), or run as a child process, and
// clusters of child processes. Each child is this binary run again (see
// the member role in cluster.go): a binary that starts etcd members
// imports this package, as every binary that uses it does.
package etcd

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/internal/spawn"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Server is an etcd server started by Start: embedded in this process, or
// WithCrash a child process. Its Secrets' user (WithAuth) is root.
type Server struct {
	servers.BaseMethods
	b   *servers.Base
	tls bool
}

func (s *Server) Name() string { return "etcd" }

// Endpoint is host:port (no scheme, no credentials).
func (s *Server) Endpoint() string { return s.b.Addr() }

// URL is the client URL: http://host:port, or https:// WithTLS.
func (s *Server) URL() string { return servers.HTTPURL(s.b.Addr(), s.tls) }

// CrashAlso is Crash that also kills the members also with the server (as
// servers.Base.CrashAlso does): for a server whose processes depend on
// this etcd (kube-apiserver), which after starts again once etcd serves.
func (s *Server) CrashAlso(ctx context.Context, powerLoss bool, also []*servers.Member, after func(context.Context) error) (servers.CrashReport, error) {
	return s.b.CrashAlso(ctx, powerLoss, also, after)
}

// Start embeds a single-member etcd server (go.etcd.io/etcd/server/v3
// embed) on free loopback ports, with a 100 ms heartbeat and a 500 ms election
// timeout so that the server's lease TTL floor is 1 s (1.5 × election
// timeout, rounded up to a second) instead of the default 2 s, and
// --unsafe-no-fsync (fsync on commit, as packaged,
// WithDurability(DurabilityPackaged)).
//
// WithCrash (or WithLazyFS) runs the same server as a child process (this
// binary run again, as StartCluster's members are), its data in a data
// directory, which Crash restarts on; an embedded one cannot be crashed.
//
// WithTLS serves clients on https only, and requires a client certificate
// signed by the test CA (Secrets.CertFile); WithAuth adds the root user with
// a random password and enables authentication (bcrypt at its minimum cost,
// so that the suite's many clients authenticate quickly).
func Start(ctx context.Context, opts ...servers.Option) (*Server, error) {
	o := servers.Apply(opts)
	fail := func(err error) error {
		return &servers.Unavailable{Backend: "etcd", Err: err, Fix: servers.FixFUSE(err, "free loopback ports and a writable temporary directory, or name a server with ETCDCTL_ENDPOINTS")}
	}
	if err := o.CheckDurability("etcd"); err != nil {
		return nil, err
	}
	ports, dir, err := servers.PortsAndDir(2, "etcd")
	if err != nil {
		return nil, fail(err)
	}
	scheme := "http"
	var certs *servers.PKI
	var sec servers.Secrets
	if o.TLS {
		if certs, err = servers.NewPKI(dir, -1, -1); err != nil {
			os.RemoveAll(dir)
			return nil, fail(err)
		}
		certs.SetSecrets(&sec)
		scheme = "https"
	}
	cu, _ := url.Parse(fmt.Sprintf("%s://127.0.0.1:%d", scheme, ports[0]))
	pu, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", ports[1]))
	b := servers.NewBase(dir, cu.Host, "etcd.log", syscall.SIGTERM, 5*time.Second)
	b.SetSecrets(sec)
	s := &Server{BaseMethods: b, b: b, tls: o.TLS}
	if o.Crash {
		err = s.runProcess(ctx, o, certs, cu, pu)
	} else {
		err = s.embed(ctx, o, certs, cu, pu)
	}
	if err != nil {
		s.Stop()
		return nil, fail(err)
	}
	if o.Auth {
		if err := s.enableAuth(ctx); err != nil {
			s.Stop()
			return nil, fail(fmt.Errorf("enable auth: %w", err))
		}
	}
	if err := s.Sync(); err != nil { // the root user made
		s.Stop()
		return nil, fail(err)
	}
	return s, nil
}

// embed runs the server in this process.
func (s *Server) embed(ctx context.Context, o servers.Settings, certs *servers.PKI, cu, pu *url.URL) error {
	cfg := embed.NewConfig()
	cfg.Name = "locksuite"
	cfg.Dir = s.b.Dir()
	if certs != nil {
		cfg.ClientTLSInfo = transport.TLSInfo{CertFile: certs.ServerCert, KeyFile: certs.ServerKey,
			TrustedCAFile: certs.CA, ClientCertAuth: true}
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.TickMs, cfg.ElectionMs = 100, 500
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{s.Log()}
	cfg.UnsafeNoFsync = o.Durability != servers.DurabilityPackaged
	if o.Auth {
		cfg.BcryptCost = 4 // bcrypt.MinCost
	}
	s.b.SetEmbedded("etcd runs inside this process: start it WithCrash (a child process)")
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	s.b.SetShutdown(e.Close)
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err := <-e.Err():
		return err
	case <-time.After(20 * time.Second):
		return fmt.Errorf("not ready after 20s")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// runProcess runs the server as a child process (see MemberSpec).
func (s *Server) runProcess(ctx context.Context, o servers.Settings, certs *servers.PKI, cu, pu *url.URL) error {
	data, err := s.b.NewDataDir("data", o.Lazy)
	if err != nil {
		return err
	}
	dir := s.b.Dir()
	spec := MemberSpec{Name: "locksuite", Dir: data, Client: cu.String(), Peer: pu.String(),
		InitialCluster: "locksuite=" + pu.String(), Token: filepath.Base(dir),
		Fsync: o.Durability == servers.DurabilityPackaged, LogLevel: "error"}
	if certs != nil {
		spec.CertFile, spec.KeyFile, spec.CAFile = certs.ServerCert, certs.ServerKey, certs.CA
	}
	c, err := s.client(2 * time.Second)
	if err != nil {
		return err
	}
	s.b.SetShutdown(func() { c.Close() })
	start := func() (*servers.Proc, error) { return StartMember(spawn.Start, "etcd", dir, spec) }
	return s.b.Run(ctx, "etcd", 20*time.Second, start, func(ctx context.Context) error {
		_, err := c.Status(ctx, s.b.Addr())
		return err
	})
}

// client is a client of the server with its TLS configuration (nil without
// WithTLS) and no credentials, dialling for up to dialTimeout.
func (s *Server) client(dialTimeout time.Duration) (*clientv3.Client, error) {
	tc, err := s.Secrets().ClientTLS()
	if err != nil {
		return nil, err
	}
	return clientv3.New(clientv3.Config{Endpoints: []string{s.b.Addr()}, TLS: tc, DialTimeout: dialTimeout, Logger: zap.NewNop()})
}

// enableAuth adds root with a random password and turns authentication on.
func (s *Server) enableAuth(ctx context.Context) error {
	c, err := s.client(5 * time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	pw := servers.RandomSecret()
	if _, err := c.UserAdd(ctx, "root", pw); err != nil {
		return err
	}
	if _, err := c.UserGrantRole(ctx, "root", "root"); err != nil {
		return err
	}
	if _, err := c.AuthEnable(ctx); err != nil {
		return err
	}
	sec := s.Secrets()
	sec.User, sec.Password = "root", pw
	s.b.SetSecrets(sec)
	return nil
}
