// Package nats starts NATS servers with JetStream for the suite: one
// embedded in this process (github.com/nats-io/nats-server/v2), or run as
// a child process, and clusters of child processes. Each child is this
// binary run again (see the member role in cluster.go): a binary that
// starts NATS members imports this package, as every binary that uses it
// does.
package nats

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/internal/spawn"

	natsserver "github.com/nats-io/nats-server/v2/server"
)

// Server is a NATS server with JetStream started by Start: embedded in
// this process, or WithCrash a child process. Its Secrets' user (WithAuth)
// is locksuite.
type Server struct {
	servers.BaseMethods
	b *servers.Base
}

func (s *Server) Name() string { return "nats" }

// Endpoint is the client URL, nats://127.0.0.1:PORT, without credentials
// (see URL and Secrets). The scheme stays nats:// WithTLS: the server
// demands TLS and the client upgrades.
func (s *Server) Endpoint() string { return "nats://" + s.b.Addr() }

// Addr is host:port.
func (s *Server) Addr() string { return s.b.Addr() }

// URL is Endpoint with the user and password in it (WithAuth).
func (s *Server) URL() string {
	sec := s.Secrets()
	if sec.Password == "" {
		return s.Endpoint()
	}
	return "nats://" + sec.User + ":" + sec.Password + "@" + s.b.Addr()
}

// Start embeds a NATS server (github.com/nats-io/nats-server/v2) with
// JetStream on a free loopback port, its JetStream store in a temporary
// directory, synced at the server's default interval (2 minutes), or at
// every write WithDurability(DurabilitySyncAlways) (sync_interval:
// always). Nothing to install: the server is linked into this binary.
//
// WithCrash (or WithLazyFS) runs the same server as a child process (this
// binary run again, as StartCluster's members are), which Crash
// restarts on its store; an embedded one cannot be crashed.
//
// WithAuth makes the server take one user ("locksuite") with a random
// password and nobody else; WithTLS serves TLS only, with a certificate of
// the test CA (client certificates are not asked for).
func Start(ctx context.Context, opts ...servers.Option) (*Server, error) {
	o := servers.Apply(opts)
	fail := func(err error) error {
		return &servers.Unavailable{Backend: "nats-kv", Err: err, Fix: servers.FixFUSE(err, "a free loopback port and a writable temporary directory, or name a server with NATS_URL")}
	}
	if err := o.CheckDurability("nats-kv", servers.DurabilitySyncAlways); err != nil {
		return nil, err
	}
	ports, dir, err := servers.PortsAndDir(2, "nats")
	if err != nil {
		return nil, fail(err)
	}
	b := servers.NewBase(dir, fmt.Sprintf("127.0.0.1:%d", ports[0]), "nats.log", syscall.SIGTERM, 5*time.Second)
	s := &Server{BaseMethods: b, b: b}
	spec := memberSpec{Name: "locksuite", Port: ports[0], Dir: filepath.Join(dir, "jetstream"),
		SyncAlways: o.Durability == servers.DurabilitySyncAlways}
	var sec servers.Secrets
	if o.Auth {
		sec.User, sec.Password = "locksuite", servers.RandomSecret()
		spec.User, spec.Password = sec.User, sec.Password
	}
	if o.TLS {
		certs, err := servers.NewPKI(dir, -1, -1)
		if err != nil {
			os.RemoveAll(dir)
			return nil, fail(err)
		}
		certs.SetSecrets(&sec)
		spec.CertFile, spec.KeyFile = certs.ServerCert, certs.ServerKey
	}
	b.SetSecrets(sec)
	if o.Crash {
		err = s.runProcess(ctx, o, spec, ports[1])
	} else {
		err = s.embed(ctx, spec)
	}
	if err != nil {
		s.Stop()
		return nil, fail(err)
	}
	return s, nil
}

// embed runs the server in this process.
func (s *Server) embed(ctx context.Context, spec memberSpec) error {
	s.b.SetEmbedded("nats-server runs inside this process: start it WithCrash (a child process)")
	sopts, err := spec.options()
	if err != nil {
		return err
	}
	sopts.LogFile = s.Log()
	ns, err := natsserver.NewServer(sopts)
	if err != nil {
		return err
	}
	ns.ConfigureLogger()
	s.b.SetShutdown(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	ns.Start()
	deadline := 20 * time.Second
	if d, ok := ctx.Deadline(); ok && time.Until(d) < deadline {
		deadline = time.Until(d)
	}
	if !ns.ReadyForConnections(deadline) {
		return fmt.Errorf("not ready after %v", deadline)
	}
	if !ns.JetStreamEnabled() {
		return fmt.Errorf("JetStream did not start; see %s", s.Log())
	}
	return nil
}

// runProcess runs the server as a child process, its store in the data
// directory, and its monitoring port (for the readiness check:
// /healthz?js-server-only=true, the server and JetStream up) on httpPort.
// Not the streams: a stream that cannot be recovered (a power loss can
// leave one so, its metadata files written and not synced at the default
// sync interval) fails /healthz for good, while the server serves every
// other stream, and new ones.
func (s *Server) runProcess(ctx context.Context, o servers.Settings, spec memberSpec, httpPort int) error {
	data, err := s.b.NewDataDir("jetstream", o.Lazy)
	if err != nil {
		return err
	}
	spec.Dir, spec.HTTPPort = data, httpPort
	hc := &http.Client{Timeout: 2 * time.Second}
	healthz := fmt.Sprintf("http://127.0.0.1:%d/healthz?js-server-only=true", httpPort)
	start := func() (*servers.Proc, error) {
		return servers.StartSelfMember(spawn.Start, "nats", s.b.Dir(), memberEnv, spec)
	}
	return s.b.Run(ctx, "nats", 20*time.Second, start, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, healthz, nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/healthz: %s", resp.Status)
		}
		return nil
	})
}
