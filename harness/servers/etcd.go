package servers

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/locksuite/locksuite/internal/spawn"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Etcd is an etcd server started by StartEtcd: embedded in this process,
// or WithCrash a child process. Its Secrets' user (WithAuth) is root.
type Etcd struct {
	base
	tls bool
}

func (s *Etcd) Name() string { return "etcd" }

// Endpoint is host:port (no scheme, no credentials).
func (s *Etcd) Endpoint() string { return s.addr }

// URL is the client URL: http://host:port, or https:// WithTLS.
func (s *Etcd) URL() string { return httpURL(s.addr, s.tls) }

// StartEtcd embeds a single-member etcd server (go.etcd.io/etcd/server/v3
// embed) on free loopback ports, with a 100 ms heartbeat and a 500 ms election
// timeout so that the server's lease TTL floor is 1 s (1.5 × election
// timeout, rounded up to a second) instead of the default 2 s, and
// --unsafe-no-fsync (fsync on commit, as packaged,
// WithDurability(DurabilityPackaged)).
//
// WithCrash (or WithLazyFS) runs the same server as a child process (this
// binary run again, as StartEtcdCluster's members are), its data in a data
// directory, which Crash restarts on; an embedded one cannot be crashed.
//
// WithTLS serves clients on https only, and requires a client certificate
// signed by the test CA (Secrets.CertFile); WithAuth adds the root user with
// a random password and enables authentication (bcrypt at its minimum cost,
// so that the suite's many clients authenticate quickly).
func StartEtcd(ctx context.Context, opts ...Option) (*Etcd, error) {
	o := apply(opts)
	fail := func(err error) error {
		return &Unavailable{"etcd", err, fixFUSE(err, "free loopback ports and a writable temporary directory, or name a server with ETCDCTL_ENDPOINTS")}
	}
	if err := o.checkDurability("etcd"); err != nil {
		return nil, err
	}
	ports, dir, err := portsAndDir(2, "etcd")
	if err != nil {
		return nil, fail(err)
	}
	s := &Etcd{base: base{dir: dir, logName: "etcd.log", sig: syscall.SIGTERM, grace: 5 * time.Second}, tls: o.tls}
	scheme := "http"
	var certs *pki
	if o.tls {
		if certs, err = newPKI(dir, -1, -1); err != nil {
			os.RemoveAll(dir)
			return nil, fail(err)
		}
		certs.secrets(&s.secrets)
		scheme = "https"
	}
	cu, _ := url.Parse(fmt.Sprintf("%s://127.0.0.1:%d", scheme, ports[0]))
	pu, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", ports[1]))
	s.addr = cu.Host
	if o.crash {
		err = s.runProcess(ctx, o, certs, cu, pu)
	} else {
		err = s.embed(ctx, o, certs, cu, pu)
	}
	if err != nil {
		s.Stop()
		return nil, fail(err)
	}
	if o.auth {
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
func (s *Etcd) embed(ctx context.Context, o options, certs *pki, cu, pu *url.URL) error {
	cfg := embed.NewConfig()
	cfg.Name = "locksuite"
	cfg.Dir = s.dir
	if certs != nil {
		cfg.ClientTLSInfo = transport.TLSInfo{CertFile: certs.serverCert, KeyFile: certs.serverKey,
			TrustedCAFile: certs.ca, ClientCertAuth: true}
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.TickMs, cfg.ElectionMs = 100, 500
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{s.Log()}
	cfg.UnsafeNoFsync = o.durability != DurabilityPackaged
	if o.auth {
		cfg.BcryptCost = 4 // bcrypt.MinCost
	}
	s.cannot = "etcd runs inside this process: start it WithCrash (a child process)"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	s.shutdown = e.Close
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

// runProcess runs the server as a child process (see etcdMemberSpec).
func (s *Etcd) runProcess(ctx context.Context, o options, certs *pki, cu, pu *url.URL) error {
	var err error
	if s.data, err = newDataDir(s.dir, "data", o.lazy, nil); err != nil {
		return err
	}
	spec := etcdMemberSpec{Name: "locksuite", Dir: s.data.path, Client: cu.String(), Peer: pu.String(),
		InitialCluster: "locksuite=" + pu.String(), Token: filepath.Base(s.dir),
		Fsync: o.durability == DurabilityPackaged, LogLevel: "error"}
	if certs != nil {
		spec.CertFile, spec.KeyFile, spec.CAFile = certs.serverCert, certs.serverKey, certs.ca
	}
	c, err := s.client(2 * time.Second)
	if err != nil {
		return err
	}
	s.shutdown = func() { c.Close() }
	start := func() (*proc, error) { return startSelfMember(spawn.Start, "etcd", s.dir, etcdMemberEnv, spec) }
	return s.run(ctx, "etcd", 20*time.Second, start, func(ctx context.Context) error {
		_, err := c.Status(ctx, s.addr)
		return err
	})
}

// client is a client of the server with its TLS configuration (nil without
// WithTLS) and no credentials, dialling for up to dialTimeout.
func (s *Etcd) client(dialTimeout time.Duration) (*clientv3.Client, error) {
	tc, err := s.secrets.ClientTLS()
	if err != nil {
		return nil, err
	}
	return clientv3.New(clientv3.Config{Endpoints: []string{s.addr}, TLS: tc, DialTimeout: dialTimeout, Logger: zap.NewNop()})
}

// enableAuth adds root with a random password and turns authentication on.
func (s *Etcd) enableAuth(ctx context.Context) error {
	c, err := s.client(5 * time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	pw := randomSecret()
	if _, err := c.UserAdd(ctx, "root", pw); err != nil {
		return err
	}
	if _, err := c.UserGrantRole(ctx, "root", "root"); err != nil {
		return err
	}
	if _, err := c.AuthEnable(ctx); err != nil {
		return err
	}
	s.secrets.User, s.secrets.Password = "root", pw
	return nil
}
