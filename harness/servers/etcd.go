package servers

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Etcd is an etcd server embedded in this process by StartEtcd. Its
// Secrets' user (WithAuth) is root.
type Etcd struct {
	embedded
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
// timeout, rounded up to a second) instead of the default 2 s.
//
// WithTLS serves clients on https only, and requires a client certificate
// signed by the test CA (Secrets.CertFile); WithAuth adds the root user with
// a random password and enables authentication (bcrypt at its minimum cost,
// so that the suite's many clients authenticate quickly).
func StartEtcd(ctx context.Context, opts ...Option) (*Etcd, error) {
	o := apply(opts)
	fail := func(err error) error {
		return &Unavailable{"etcd", err, "free loopback ports and a writable temporary directory, or name a server with ETCDCTL_ENDPOINTS"}
	}
	ports, dir, err := portsAndDir(2, "etcd")
	if err != nil {
		return nil, fail(err)
	}
	cfg := embed.NewConfig()
	cfg.Name = "locksuite"
	cfg.Dir = dir
	scheme := "http"
	s := &Etcd{embedded: embedded{dir: dir, log: "etcd.log"}, tls: o.tls}
	if o.tls {
		certs, err := newPKI(dir, -1, -1)
		if err != nil {
			os.RemoveAll(dir)
			return nil, fail(err)
		}
		certs.secrets(&s.secrets)
		scheme = "https"
		cfg.ClientTLSInfo = transport.TLSInfo{CertFile: certs.serverCert, KeyFile: certs.serverKey,
			TrustedCAFile: certs.ca, ClientCertAuth: true}
	}
	cu, _ := url.Parse(fmt.Sprintf("%s://127.0.0.1:%d", scheme, ports[0]))
	pu, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", ports[1]))
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.TickMs, cfg.ElectionMs = 100, 500
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{s.Log()}
	cfg.UnsafeNoFsync = true
	if o.auth {
		cfg.BcryptCost = 4 // bcrypt.MinCost
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fail(err)
	}
	s.shutdown, s.addr = e.Close, cu.Host
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		s.Stop()
		return nil, fail(err)
	case <-time.After(20 * time.Second):
		s.Stop()
		return nil, fail(fmt.Errorf("not ready after 20s"))
	case <-ctx.Done():
		s.Stop()
		return nil, fail(ctx.Err())
	}
	if o.auth {
		if err := s.enableAuth(ctx); err != nil {
			s.Stop()
			return nil, fail(fmt.Errorf("enable auth: %w", err))
		}
	}
	return s, nil
}

// enableAuth adds root with a random password and turns authentication on.
func (s *Etcd) enableAuth(ctx context.Context) error {
	tc, err := s.secrets.ClientTLS()
	if err != nil {
		return err
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.addr}, TLS: tc, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
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
