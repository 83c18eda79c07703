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
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/locksuite/locksuite/internal/spawn"
	"github.com/locksuite/locksuite/internal/tempdir"
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
	uid, gid := ids(cred)
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
	if out, err := runAs(ctx, cred, dir, initdb, initArgs...); err != nil {
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
		if clock, env, err = newFakeClock(dir, uid, gid); err != nil || clock == nil {
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

// serviceDir returns the user to run backend's server as, and a new TempDir
// "locksuite-<name>-*" that user owns. As root, that is the system user
// named account, which the server's Debian package creates (PostgreSQL and
// MariaDB refuse to run as root); otherwise cred is nil and the directory
// is this process's. A private TMPDIR (mode 0700 somewhere on its path)
// would keep another user out, so as root the directory goes in /tmp then.
func serviceDir(backend, name, account, pkg string) (cred *syscall.Credential, dir string, err error) {
	if os.Geteuid() == 0 {
		u, err := user.Lookup(account)
		if err != nil {
			return nil, "", &Unavailable{backend, fmt.Errorf("running as root and no %s user: %w", account, err),
				fmt.Sprintf("create a %s user (apt-get install %s does), or run as another user", account, pkg)}
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	parent := ""
	if cred != nil && !traversable(os.TempDir()) {
		parent = "/tmp"
	}
	if dir, err = tempdir.New(parent, "locksuite-"+name+"-"); err != nil {
		return nil, "", err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return nil, "", err
		}
	}
	return cred, dir, nil
}

// serviceDataDir is serviceDir's directory with the data directory "data"
// in it, owned by cred's user (newDataDir, lazy as there); an error leaves
// nothing behind.
func serviceDataDir(backend, name, account, pkg string, lazy bool) (cred *syscall.Credential, dir string, dd *dataDir, err error) {
	if cred, dir, err = serviceDir(backend, name, account, pkg); err != nil {
		return nil, "", nil, err
	}
	if dd, err = newDataDir(dir, "data", lazy, cred); err != nil {
		os.RemoveAll(dir)
		return nil, "", nil, &Unavailable{backend, err, FixFUSE(err, "a writable temporary directory")}
	}
	return cred, dir, dd, nil
}

// runAs runs a server's one-off setup program (initdb,
// mariadb-install-db) as cred (nil: this process's user) in dir, killed if
// this process dies, and returns its output, stdout and stderr together.
func runAs(ctx context.Context, cred *syscall.Credential, dir, prog string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := spawn.Start(cmd)
	if err == nil {
		err = cmd.Wait()
	}
	return out.String(), err
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
