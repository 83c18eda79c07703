package servers

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/locksuite/locksuite/internal/spawn"

	natsserver "github.com/nats-io/nats-server/v2/server"
)

// NATS is a NATS server with JetStream started by StartNATS: embedded in
// this process, or WithCrash a child process. Its Secrets' user (WithAuth)
// is locksuite.
type NATS struct{ base }

func (s *NATS) Name() string { return "nats" }

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
// directory, synced at the server's default interval (2 minutes), or at
// every write WithDurability(DurabilitySyncAlways) (sync_interval:
// always). Nothing to install: the server is linked into this binary.
//
// WithCrash (or WithLazyFS) runs the same server as a child process (this
// binary run again, as StartNATSCluster's members are), which Crash
// restarts on its store; an embedded one cannot be crashed.
//
// WithAuth makes the server take one user ("locksuite") with a random
// password and nobody else; WithTLS serves TLS only, with a certificate of
// the test CA (client certificates are not asked for).
func StartNATS(ctx context.Context, opts ...Option) (*NATS, error) {
	o := apply(opts)
	fail := func(err error) error {
		return &Unavailable{"nats-kv", err, fixFUSE(err, "a free loopback port and a writable temporary directory, or name a server with NATS_URL")}
	}
	if err := o.checkDurability("nats-kv", DurabilitySyncAlways); err != nil {
		return nil, err
	}
	ports, dir, err := portsAndDir(2, "nats")
	if err != nil {
		return nil, fail(err)
	}
	s := &NATS{base{dir: dir, logName: "nats.log", addr: fmt.Sprintf("127.0.0.1:%d", ports[0]), sig: syscall.SIGTERM, grace: 5 * time.Second}}
	spec := natsMemberSpec{Name: "locksuite", Port: ports[0], Dir: filepath.Join(dir, "jetstream"),
		SyncAlways: o.durability == DurabilitySyncAlways}
	if o.auth {
		s.secrets.User, s.secrets.Password = "locksuite", randomSecret()
		spec.User, spec.Password = s.secrets.User, s.secrets.Password
	}
	if o.tls {
		certs, err := newPKI(dir, -1, -1)
		if err != nil {
			os.RemoveAll(dir)
			return nil, fail(err)
		}
		certs.secrets(&s.secrets)
		spec.CertFile, spec.KeyFile = certs.serverCert, certs.serverKey
	}
	if o.crash {
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
func (s *NATS) embed(ctx context.Context, spec natsMemberSpec) error {
	s.cannot = "nats-server runs inside this process: start it WithCrash (a child process)"
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
func (s *NATS) runProcess(ctx context.Context, o options, spec natsMemberSpec, httpPort int) error {
	var err error
	if s.data, err = newDataDir(s.dir, "jetstream", o.lazy, nil); err != nil {
		return err
	}
	spec.Dir, spec.HTTPPort = s.data.path, httpPort
	hc := &http.Client{Timeout: 2 * time.Second}
	healthz := fmt.Sprintf("http://127.0.0.1:%d/healthz?js-server-only=true", httpPort)
	start := func() (*proc, error) { return startSelfMember(spawn.Start, "nats", s.dir, natsMemberEnv, spec) }
	return s.run(ctx, "nats", 20*time.Second, start, func(ctx context.Context) error {
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
