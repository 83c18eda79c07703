package servers

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Postgres is a throwaway PostgreSQL cluster started by StartPostgres.
type Postgres struct {
	p    *proc
	dsn  string
	once sync.Once
}

func (s *Postgres) Name() string     { return "postgres" }
func (s *Postgres) Endpoint() string { return s.dsn }
func (s *Postgres) Pid() int         { return s.p.Pid() }

var pgDirs = []string{"/usr/lib/postgresql/*/bin"}

// StartPostgres makes a new cluster with initdb in a temporary directory
// (trust authentication, loopback only, fsync off) and starts postgres on a
// free port. As root it runs both as the "postgres" user, which Debian's
// server package creates. The endpoint is a postgres:// URL for user
// "locksuite", database "postgres".
func StartPostgres(ctx context.Context) (*Postgres, error) {
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
	dir, err := os.MkdirTemp(parent, "locksuite-postgres-")
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
	cmd := exec.CommandContext(ctx, initdb, "-D", data, "-U", "locksuite", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fail(fmt.Errorf("initdb: %v: %s", err, out), "check that "+initdb+" works")
	}
	port, err := FreePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p, err := startProc("postgres", dir, cred, postgres, "-D", data, "-p", strconv.Itoa(port),
		"-k", dir, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "max_connections=200", "-c", "log_min_messages=warning")
	if err != nil {
		os.RemoveAll(dir)
		return nil, fail(err, "check that "+postgres+" runs")
	}
	s := &Postgres{p: p, dsn: fmt.Sprintf("postgres://locksuite@127.0.0.1:%d/postgres?sslmode=disable", port)}
	err = waitReady(ctx, p, 20*time.Second, func(ctx context.Context) error {
		c, err := pgx.Connect(ctx, s.dsn)
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
