package servers

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/locksuite/locksuite/internal/spawn"
)

// PoolMode is how PgBouncer lends its server connections to clients
// (PgBouncer's pool_mode).
type PoolMode string

const (
	// PoolTransaction lends a server connection for one transaction (or one
	// statement outside a transaction): each of a client's transactions may
	// run on another server session.
	PoolTransaction PoolMode = "transaction"
	// PoolSession lends a server connection for as long as the client stays
	// connected: a client's session is one server session, as without the
	// pooler.
	PoolSession PoolMode = "session"
)

// PgBouncer is PgBouncer started by StartPgBouncer in front of a throwaway
// Postgres of its own.
type PgBouncer struct {
	base
	pg   *Postgres
	mode PoolMode
	dsn  string

	once2    sync.Once
	stopping chan struct{} // closed by Stop: the watchdog ends
	watched  chan struct{} // closed when the watchdog has ended
	restarts atomic.Int64
}

// Restarts is how many times the watchdog restarted pgbouncer after it
// exited on its own. PgBouncer 1.18 (Debian 12's) exits on an assertion
// ("FATAL ... disconnect_client(): bad client state: 0", pgbouncer#801, a
// fix proposed in pgbouncer#846; or "server_proto: server in bad state:
// 11", pgbouncer#822) when a client's cancel request races its disconnect,
// as pgx's does whenever it closes a connection with a query in flight (a
// cancelled Acquire; the suite's adapters send none through a pooler:
// their Config's Pooler): every client connection and server session goes
// with it, and the locks they held. The harness restarts it on the same
// port, as a service manager's Restart=on-failure would (Debian's unit
// has none), and says how often.
func (s *PgBouncer) Restarts() int { return int(s.restarts.Load()) }

func (s *PgBouncer) Name() string { return "pgbouncer-" + string(s.mode) }

// Endpoint is a postgres:// URL of the pooler, for user "locksuite" and
// database "postgres", with pgx's default_query_exec_mode=simple_protocol:
// PgBouncer 1.18 does not keep a client's prepared statements across the
// server connections of transaction pooling.
func (s *PgBouncer) Endpoint() string { return s.dsn }

// Postgres is the server behind the pooler: the lock's state is there (a
// fault that stops the lock server stops it).
func (s *PgBouncer) Postgres() *Postgres { return s.pg }

// Mode is the pooler's pool_mode.
func (s *PgBouncer) Mode() PoolMode { return s.mode }

// Stop stops the pooler (and its watchdog), then its Postgres, and removes
// their directories.
func (s *PgBouncer) Stop() error {
	if s.stopping != nil {
		s.once2.Do(func() { close(s.stopping) })
		<-s.watched
	}
	err := s.base.Stop()
	if s.pg != nil {
		_ = s.pg.Stop()
	}
	return err
}

// StartPgBouncer starts a throwaway Postgres (StartPostgres) and, in front
// of it, Debian's pgbouncer on a free loopback port (no Unix socket), with
// its configuration and auth file in a temporary directory: pool_mode as
// mode, trust authentication for the one user "locksuite", max_client_conn
// 1000, a pool of up to pool server connections (default_pool_size; pool
// 0: 100), and PgBouncer's defaults otherwise (server_reset_query DISCARD
// ALL, server_lifetime 3600 s). With pool 1 in transaction pooling, every
// client's transactions take turns on one server session, so that what a
// session holds between transactions (a session advisory lock) is shared
// by every client every time, not when two clients happen to land on the
// same connection. As root, it runs as the "postgres" user (PgBouncer
// refuses to run as root).
func StartPgBouncer(ctx context.Context, mode PoolMode, pool int) (*PgBouncer, error) {
	if pool <= 0 {
		pool = 100
	}
	fail := func(err error, fix string) error { return &Unavailable{"pgbouncer", err, fix} }
	if mode != PoolTransaction && mode != PoolSession {
		return nil, fail(fmt.Errorf("pool mode %q", mode), fmt.Sprintf("ask for %q or %q", PoolTransaction, PoolSession))
	}
	bin, err := lookPath("pgbouncer", "/usr/sbin")
	if err != nil {
		return nil, fail(err, "install PgBouncer (apt-get install pgbouncer), or name a pooler with LOCKSUITE_PGBOUNCER_URL")
	}
	pg, err := StartPostgres(ctx)
	if err != nil {
		return nil, err
	}
	cred, dir, err := serviceDir("pgbouncer", "pgbouncer", "postgres", "pgbouncer")
	if err != nil {
		_ = pg.Stop()
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		os.RemoveAll(dir)
		_ = pg.Stop()
		return nil, err
	}
	// SIGTERM: PgBouncer's immediate shutdown (SIGINT waits for its
	// clients to disconnect).
	s := &PgBouncer{base: base{dir: dir, sig: syscall.SIGTERM, grace: 5 * time.Second}, pg: pg, mode: mode,
		dsn: fmt.Sprintf("postgres://locksuite@127.0.0.1:%d/postgres?sslmode=disable&default_query_exec_mode=simple_protocol", port)}
	s.addr = fmt.Sprintf("127.0.0.1:%d", port)
	conf := filepath.Join(dir, "pgbouncer.ini")
	users := filepath.Join(dir, "userlist.txt")
	ini := fmt.Sprintf(`[databases]
postgres = host=127.0.0.1 port=%s dbname=postgres user=locksuite

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
max_client_conn = 1000
default_pool_size = %d
`, pgPort(pg), port, users, mode, pool)
	for path, text := range map[string]string{conf: ini, users: `"locksuite" ""` + "\n"} {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			s.Stop()
			return nil, fail(err, "a writable temporary directory")
		}
		if cred != nil {
			_ = os.Chown(path, int(cred.Uid), int(cred.Gid))
		}
	}
	start := func() (*Proc, error) { return Launch(spawn.Start, "pgbouncer", dir, cred, nil, bin, conf) }
	err = s.run(ctx, "pgbouncer", 20*time.Second, start, func(ctx context.Context) error {
		cc, err := pgx.ParseConfig(s.dsn)
		if err != nil {
			return err
		}
		c, err := pgx.ConnectConfig(ctx, cc)
		if err != nil {
			return err
		}
		defer c.Close(context.WithoutCancel(ctx))
		_, err = c.Exec(ctx, "SELECT 1")
		return err
	})
	if err != nil {
		s.Stop()
		return nil, fail(err, "check that "+bin+" runs; see its log above")
	}
	s.stopping, s.watched = make(chan struct{}), make(chan struct{})
	go s.watch()
	return s, nil
}

// watch restarts pgbouncer whenever it exits on its own (see Restarts),
// until Stop; a process killed on purpose (Member.Kill) stays down.
func (s *PgBouncer) watch() {
	defer close(s.watched)
	for {
		s.m.mu.Lock()
		p, killed := s.m.p, s.m.killed
		s.m.mu.Unlock()
		if killed {
			return
		}
		select {
		case <-s.stopping:
			return
		case <-p.done:
		}
		select {
		case <-s.stopping:
			return
		default:
		}
		if s.m.Killed() || s.m.Run() != nil {
			return
		}
		n := s.restarts.Add(1)
		if f, err := os.OpenFile(s.m.Log(), os.O_WRONLY|os.O_APPEND, 0); err == nil {
			fmt.Fprintf(f, "locksuite: pgbouncer exited on its own (%v); restarted it (%d restarts)\n", p.err, n)
			f.Close()
		}
	}
}

// pgPort is the port of pg's address.
func pgPort(pg *Postgres) string {
	_, port, _ := net.SplitHostPort(pg.addr)
	return port
}
