package servers

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/locksuite/locksuite/internal/spawn"
)

// Postgres is a throwaway PostgreSQL cluster started by StartPostgres.
type Postgres struct {
	base
	dsn   string
	clock *FakeClock // only when started withFakeClock (a test)
}

func (s *Postgres) Name() string { return "postgres" }

// Endpoint is a postgres:// URL without the password (see URL and
// Secrets).
func (s *Postgres) Endpoint() string { return s.dsn }

// URL is Endpoint with the password in it.
func (s *Postgres) URL() string {
	if s.secrets.Password == "" {
		return s.dsn
	}
	return strings.Replace(s.dsn, "://"+s.secrets.User+"@", "://"+s.secrets.User+":"+s.secrets.Password+"@", 1)
}

var pgDirs = []string{"/usr/lib/postgresql/*/bin"}

// StartPostgres makes a new cluster with initdb in a temporary directory
// (trust authentication, loopback only; fsync, synchronous_commit and
// full_page_writes off, or on as packaged WithDurability(DurabilityPackaged))
// and starts postgres on a free port. As root it runs both as the "postgres" user, which Debian's
// server package creates. The endpoint is a postgres:// URL for user
// "locksuite", database "postgres".
//
// WithAuth gives the role a random password and makes pg_hba.conf ask for
// it over TCP (scram-sha-256); WithTLS turns ssl on with a certificate of
// the test CA and lets TCP clients in only over TLS (hostssl lines, no host
// lines), so that a plain connection is refused. The Unix socket in the
// cluster's directory stays trusted, for the harness.
func StartPostgres(ctx context.Context, opts ...Option) (*Postgres, error) {
	o := Apply(opts)
	fail := func(err error, fix string) error { return &Unavailable{"postgres", err, FixFUSE(err, fix)} }
	if err := o.CheckDurability("postgres"); err != nil {
		return nil, err
	}
	const install = "install PostgreSQL's server (apt-get install postgresql-15), or name a server with DATABASE_URL or PGHOST"
	initdb, err := lookPath("initdb", pgDirs...)
	if err != nil {
		return nil, fail(err, install)
	}
	postgres, err := lookPath("postgres", pgDirs...)
	if err != nil {
		return nil, fail(err, install)
	}
	cred, dir, dd, err := serviceDataDir("postgres", "postgres", "postgres", "postgresql-15", o.Lazy)
	if err != nil {
		return nil, err
	}
	uid, gid := Owner(cred)
	// initdb and the configuration write to disk (the mount's backing
	// directory), not through a lazyfs mount: a power loss is not meant
	// to undo the setup.
	data := dd.setup
	initArgs := []string{"-D", data, "-U", "locksuite", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions"}
	var secrets Secrets
	if o.Auth {
		secrets.User, secrets.Password = "locksuite", RandomSecret()
		pw := filepath.Join(dir, "pwfile")
		if err := os.WriteFile(pw, []byte(secrets.Password+"\n"), 0o600); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		if cred != nil {
			_ = os.Chown(pw, int(cred.Uid), int(cred.Gid))
		}
		initArgs = append(initArgs, "--pwfile", pw)
	}
	if out, err := RunAs(ctx, cred, dir, initdb, initArgs...); err != nil {
		os.RemoveAll(dir)
		return nil, fail(fmt.Errorf("initdb: %v: %s", err, out), "check that "+initdb+" works")
	}
	port, err := FreePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	args := []string{"-D", dd.path, "-p", strconv.Itoa(port),
		"-k", dir, "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200", "-c", "log_min_messages=warning"}
	if o.Durability == DurabilityHarness {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	sslmode := "disable"
	if o.Auth || o.TLS {
		method, host := "trust", "host"
		if o.Auth {
			method = "scram-sha-256"
		}
		if o.TLS {
			host = "hostssl"
			certs, err := NewPKI(dir, uid, gid)
			if err != nil {
				os.RemoveAll(dir)
				return nil, fail(err, "a writable temporary directory")
			}
			certs.SetSecrets(&secrets)
			args = append(args, "-c", "ssl=on", "-c", "ssl_cert_file="+certs.ServerCert, "-c", "ssl_key_file="+certs.ServerKey,
				"-c", "ssl_ca_file="+certs.CA)
			sslmode = "verify-full&sslrootcert=" + url.QueryEscape(certs.CA)
		}
		hba := "local all all trust\n" + host + " all all 127.0.0.1/32 " + method + "\n"
		if err := os.WriteFile(filepath.Join(data, "pg_hba.conf"), []byte(hba), 0o600); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		if cred != nil {
			_ = os.Chown(filepath.Join(data, "pg_hba.conf"), int(cred.Uid), int(cred.Gid))
		}
	}
	var (
		clock *FakeClock
		env   []string
	)
	if o.fakeClock {
		if clock, env, err = NewFakeClock(dir, uid, gid); err != nil || clock == nil {
			os.RemoveAll(dir)
			return nil, fail(fmt.Errorf("no libfaketime (%v)", err), "apt-get install faketime")
		}
	}
	s := &Postgres{base: base{dir: dir, data: dd, sig: syscall.SIGINT, grace: 10 * time.Second, secrets: secrets},
		clock: clock, dsn: fmt.Sprintf("postgres://locksuite@127.0.0.1:%d/postgres?sslmode=%s", port, sslmode)}
	s.addr = fmt.Sprintf("127.0.0.1:%d", port)
	argv := append([]string{postgres}, args...)
	start := func() (*Proc, error) { return Launch(spawn.Start, "postgres", dir, cred, env, argv...) }
	err = s.run(ctx, "postgres", 20*time.Second, start, func(ctx context.Context) error {
		c, err := pgx.Connect(ctx, s.URL())
		if err != nil {
			return err
		}
		return c.Close(ctx)
	})
	if err != nil {
		s.Stop()
		return nil, fail(err, "check that "+postgres+" runs; see its log above")
	}
	return s, nil
}
