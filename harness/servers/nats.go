package servers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
)

// NATS is a NATS server with JetStream embedded in this process by
// StartNATS. Its Secrets' user (WithAuth) is locksuite.
type NATS struct{ embedded }

func (s *NATS) Name() string { return "nats-kv" }

// Endpoint is the client URL, nats://127.0.0.1:PORT, without credentials
// (see URL and Secrets). The scheme stays nats:// WithTLS: the server
// demands TLS and the client upgrades.
func (s *NATS) Endpoint() string { return "nats://" + s.addr }

// Addr is host:port.
func (s *NATS) Addr() string { return s.addr }

// URL is Endpoint with the user and password in it (WithAuth).
func (s *NATS) URL() string {
	if s.secrets.Password == "" {
		return s.Endpoint()
	}
	return "nats://" + s.secrets.User + ":" + s.secrets.Password + "@" + s.addr
}

// StartNATS embeds a NATS server (github.com/nats-io/nats-server/v2) with
// JetStream on a free loopback port, its JetStream store in a temporary
// directory. Nothing to install: the server is linked into this binary.
//
// WithAuth makes the server take one user ("locksuite") with a random
// password and nobody else; WithTLS serves TLS only, with a certificate of
// the test CA (client certificates are not asked for).
func StartNATS(ctx context.Context, opts ...Option) (*NATS, error) {
	o := apply(opts)
	fail := func(err error) error {
		return &Unavailable{"nats-kv", err, "a free loopback port and a writable temporary directory, or name a server with NATS_URL"}
	}
	ports, dir, err := portsAndDir(1, "nats")
	if err != nil {
		return nil, fail(err)
	}
	port := ports[0]
	s := &NATS{embedded{dir: dir, log: "nats.log", addr: fmt.Sprintf("127.0.0.1:%d", port)}}
	sopts := &natsserver.Options{
		ServerName: "locksuite", Host: "127.0.0.1", Port: port,
		JetStream: true, StoreDir: filepath.Join(dir, "jetstream"),
		NoSigs: true, DisableJetStreamBanner: true,
		LogFile: s.Log(), Logtime: true,
	}
	if o.auth {
		s.secrets.User, s.secrets.Password = "locksuite", randomSecret()
		sopts.Username, sopts.Password = s.secrets.User, s.secrets.Password
	}
	if o.tls {
		certs, err := newPKI(dir, -1, -1)
		if err != nil {
			os.RemoveAll(dir)
			return nil, fail(err)
		}
		certs.secrets(&s.secrets)
		tc, err := natsserver.GenTLSConfig(&natsserver.TLSConfigOpts{CertFile: certs.serverCert, KeyFile: certs.serverKey})
		if err != nil {
			os.RemoveAll(dir)
			return nil, fail(err)
		}
		sopts.TLSConfig, sopts.TLS, sopts.TLSTimeout = tc, true, 2
	}
	ns, err := natsserver.NewServer(sopts)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fail(err)
	}
	ns.ConfigureLogger()
	s.shutdown = func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	}
	ns.Start()
	deadline := 20 * time.Second
	if d, ok := ctx.Deadline(); ok && time.Until(d) < deadline {
		deadline = time.Until(d)
	}
	if !ns.ReadyForConnections(deadline) {
		s.Stop()
		return nil, fail(fmt.Errorf("not ready after %v", deadline))
	}
	if !ns.JetStreamEnabled() {
		s.Stop()
		return nil, fail(fmt.Errorf("JetStream did not start; see %s", s.Log()))
	}
	return s, nil
}
