package servers

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/locksuite/locksuite/harness/internal/spawn"
	"github.com/locksuite/locksuite/internal/tempdir"
)

// Postgres is a throwaway PostgreSQL cluster started by StartPostgres.
type Postgres struct {
	p       *proc
	dsn     string
	secrets Secrets
	clock   *FakeClock // only when started withFakeClock (a test)
	once    sync.Once
}

func (s *Postgres) Name() string { return "postgres" }

// Endpoint is a postgres:// URL without the password (see URL and
// Secrets).
func (s *Postgres) Endpoint() string { return s.dsn }

// Log is the server's log file, in the directory Stop removes: copy it
// before Stop to keep it.
func (s *Postgres) Log() string { return s.p.log }
func (s *Postgres) Pid() int    { return s.p.Pid() }

// Secrets are the role's password (WithAuth) and the test CA (WithTLS).
func (s *Postgres) Secrets() Secrets { return s.secrets }

// URL is Endpoint with the password in it.
func (s *Postgres) URL() string {
	if s.secrets.Password == "" {
		return s.dsn
	}
	return strings.Replace(s.dsn, "://"+s.secrets.User+"@", "://"+s.secrets.User+":"+s.secrets.Password+"@", 1)
}

var pgDirs = []string{"/usr/lib/postgresql/*/bin"}

// StartPostgres makes a new cluster with initdb in a temporary directory
// (trust authentication, loopback only, fsync off) and starts postgres on a
// free port. As root it runs both as the "postgres" user, which Debian's
// server package creates. The endpoint is a postgres:// URL for user
// "locksuite", database "postgres".
//
// WithAuth gives the role a random password and makes pg_hba.conf ask for
// it over TCP (scram-sha-256); WithTLS turns ssl on with a certificate of
// the test CA and lets TCP clients in only over TLS (hostssl lines, no host
// lines), so that a plain connection is refused. The Unix socket in the
// cluster's directory stays trusted, for the harness.
func StartPostgres(ctx context.Context, opts ...Option) (*Postgres, error) {
	o := apply(opts)
	fail := func(err error, fix string) error { return &Unavailable{"postgres", err, fix} }
	const install = "install PostgreSQL's server (apt-get install postgresql-15), or name a server with DATABASE_URL or PGHOST"
	initdb, err := lookPath("initdb", pgDirs...)
	if err != nil {
		return nil, fail(err, install)
	}
	postgres, err := lookPath("postgres", pgDirs...)
	if err != nil {
		return nil, fail(err, install)
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fail(fmt.Errorf("running as root and no postgres user: %w", err), "create a postgres user (apt-get install postgresql-15 does), or run as another user")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	parent := ""
	if cred != nil && !traversable(os.TempDir()) {
		// The postgres user must reach its data directory: a private
		// TMPDIR (mode 0700 somewhere on its path) would stop it.
		parent = "/tmp"
	}
	dir, err := tempdir.New(parent, "locksuite-postgres-")
	if err != nil {
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	data := dir + "/data"
	initArgs := []string{"-D", data, "-U", "locksuite", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions"}
	var secrets Secrets
	if o.auth {
		secrets.User, secrets.Password = "locksuite", randomSecret()
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
	cmd := exec.CommandContext(ctx, initdb, initArgs...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = spawn.Start(cmd)
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, fail(fmt.Errorf("initdb: %v: %s", err, out.String()), "check that "+initdb+" works")
	}
	port, err := FreePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	args := []string{"-D", data, "-p", strconv.Itoa(port),
		"-k", dir, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "max_connections=200", "-c", "log_min_messages=warning"}
	sslmode := "disable"
	if o.auth || o.tls {
		method, host := "trust", "host"
		if o.auth {
			method = "scram-sha-256"
		}
		if o.tls {
			host = "hostssl"
			uid, gid := -1, -1
			if cred != nil {
				uid, gid = int(cred.Uid), int(cred.Gid)
			}
			certs, err := newPKI(dir, uid, gid)
			if err != nil {
				os.RemoveAll(dir)
				return nil, fail(err, "a writable temporary directory")
			}
			certs.secrets(&secrets)
			args = append(args, "-c", "ssl=on", "-c", "ssl_cert_file="+certs.serverCert, "-c", "ssl_key_file="+certs.serverKey,
				"-c", "ssl_ca_file="+certs.ca)
			sslmode = "verify-full&sslrootcert=" + url.QueryEscape(certs.ca)
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
		uid, gid := -1, -1
		if cred != nil {
			uid, gid = int(cred.Uid), int(cred.Gid)
		}
		if clock, env, err = newFakeClock(dir, uid, gid); err != nil || clock == nil {
			os.RemoveAll(dir)
			return nil, fail(fmt.Errorf("no libfaketime (%v)", err), "apt-get install faketime")
		}
	}
	p, err := startProcEnv("postgres", dir, cred, env, append([]string{postgres}, args...)...)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fail(err, "check that "+postgres+" runs")
	}
	s := &Postgres{p: p, clock: clock, dsn: fmt.Sprintf("postgres://locksuite@127.0.0.1:%d/postgres?sslmode=%s", port, sslmode), secrets: secrets}
	err = waitReady(ctx, p, 20*time.Second, func(ctx context.Context) error {
		c, err := pgx.Connect(ctx, s.URL())
		if err != nil {
			return err
		}
		return c.Close(ctx)
	})
	if err != nil {
		s.Stop()
		return nil, fail(err, "see the log above")
	}
	return s, nil
}

// Stop shuts the cluster down (fast shutdown) and deletes it.
func (s *Postgres) Stop() error {
	s.once.Do(func() {
		s.p.stop(syscall.SIGINT, 10*time.Second)
		os.RemoveAll(s.p.dir)
	})
	return nil
}

// traversable reports whether every directory on path's way from / lets
// others through (o+x), as a server running as another user needs.
func traversable(path string) bool {
	for p := filepath.Clean(path); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		if p == "/" || p == "." {
			return true
		}
	}
}
