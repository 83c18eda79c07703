// Package postgres is the locksuite adapter for a PostgreSQL session-level
// advisory lock (pg_advisory_lock) held on a dedicated connection: one per
// client, kept from a Release to the client's next Acquire while the
// session is sure to be alive.
//
// A session lock has no lease of its own: it lasts as long as the session.
// The adapter gives it one by setting idle_session_timeout on that session,
// in the statements that take the lock (so that the setting reaches the
// server through a connection pooler too): the server ends a session that
// has sent nothing for that long, and with it the lock. While the holder runs, a background query every third of the
// timeout keeps the session busy (renewal); a holder whose process or network
// stalls sends nothing, and the server frees the lock.
//
// The fencing token is nextval of a sequence, sent in the same simple-protocol
// round trip as pg_advisory_lock: the server runs both before the client sees
// either, so no client-side pause can fall between the grant and its token.
// The same round trip reads the backend's pid (the lease's Session).
//
// Through a pooler in transaction mode (PgBouncer's pool_mode=transaction)
// a session lock is unsafe by design: each statement may run on another
// server connection, so the unlock can miss the connection that holds the
// lock, and a second client whose statement runs there is granted the same
// lock at once (advisory locks are re-entrant per session). Use pgxact
// there.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/internal/adapt"
	"github.com/locksuite/locksuite/backends/internal/pgconf"
)

// Config describes one client of one advisory lock.
type Config struct {
	// ConnString is a postgres:// URL or key=value DSN, over libpq's
	// environment (PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE,
	// PGSSLMODE, PGSSLROOTCERT, PGSSLCERT, PGSSLKEY, ...), as
	// pgx.ParseConfig reads them: the password and the TLS settings
	// (sslmode disable, allow, prefer (the default), require, verify-ca,
	// verify-full; sslrootcert) come from there. Empty means the
	// environment only.
	ConnString string
	// Addr, if set, is a host:port that replaces the connection string's
	// host and port (the suite points it at a fault proxy). The password
	// and the TLS settings are kept, sslmode's plain and TLS attempts
	// included, and verify-full still checks the connection string's host
	// name.
	Addr string
	// Dial, if not nil, makes every connection to the server (TLS, if any,
	// is layered on top): pass suite.Client.Dial, so that the suite can
	// fault this client's network. Default: TCP.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// Key names the lock; it is hashed (FNV-64a) to the advisory lock's
	// bigint key. Required.
	Key string
	// Sequence is the fence sequence's name. Default "locksuite_fence_"
	// followed by the hashed key in hex. Created if missing.
	Sequence string
	// Lease is the idle_session_timeout of the lock's session. Default
	// 500ms; at least 1ms (the setting's resolution).
	Lease time.Duration
	// Pooler says that the connection string names a connection pooler
	// (PgBouncer) in front of Postgres. A query whose context ends is then
	// abandoned by closing its connection with no cancel request: pgx
	// sends one whenever it closes a connection with a query in flight,
	// and PgBouncer 1.18 exits on a cancel request that races the client's
	// disconnect (pgbouncer#801, #822), taking every client's session and
	// lock with it. The server learns that the query was abandoned when it
	// next writes to the session (a pg_advisory_lock still waiting runs on
	// until it is granted, and then ends with its session). Default false:
	// pgx's cancel request.
	Pooler bool
	_      struct{}
}

type locker struct {
	cfg    *pgx.ConnConfig
	key    int64
	seq    string
	lease  time.Duration
	seqOK  atomic.Bool
	closed atomic.Bool

	mu      sync.Mutex
	spare   *pgx.Conn // the session of the last Release, or nil
	spareAt time.Time // when it went idle
}

// New returns a Locker for cfg. It does not connect.
func New(cfg Config) (backends.Locker, error) {
	if err := adapt.Check("postgres", cfg.Key, "the lock key", &cfg.Lease, 500*time.Millisecond, time.Millisecond, "idle_session_timeout's 1ms resolution"); err != nil {
		return nil, err
	}
	cc, err := pgconf.Parse("postgres", cfg.ConnString, cfg.Addr, cfg.Dial, cfg.Pooler)
	if err != nil {
		return nil, err
	}
	sum := pgconf.Key(cfg.Key)
	if cfg.Sequence == "" {
		cfg.Sequence = fmt.Sprintf("locksuite_fence_%016x", sum)
	}
	return &locker{cfg: cc, key: int64(sum), seq: cfg.Sequence, lease: cfg.Lease}, nil
}

var _ backends.TTLer = (*locker)(nil)

func (l *locker) TTL() time.Duration { return l.lease }

// Expiry is TTL: the service frees the lease on time.
func (l *locker) Expiry() time.Duration { return l.TTL() }

// Acquire tries until it holds the lock or ctx is done. A client whose
// session was ended before the grant (idle_session_timeout, 57P05;
// terminated, 57P01), or whose dial timed out, was granted nothing: it
// starts over on a new connection. Other
// errors (authentication, a missing database) are returned at once.
func (l *locker) Acquire(ctx context.Context) (backends.Lease, error) {
	return adapt.Retry(ctx, l.attempt, retryable)
}

// retryable: the attempt's session ended before the grant, or its connect
// timed out (a client stalled mid-dial wakes past its deadline).
func retryable(err error) bool { return pgconf.Ended(err, "57P05", "57P01") }

func (l *locker) attempt(ctx context.Context) (backends.Lease, error) {
	if l.closed.Load() {
		return nil, backends.ErrClosed
	}
	wrap := func(err error) error { return adapt.Wrap(ctx, "postgres", "acquire", l.lockName(), err) }
	conn, err := l.connect(ctx)
	if err != nil {
		return nil, wrap(err)
	}
	seq := pgx.Identifier{l.seq}.Sanitize()
	if !l.seqOK.Load() {
		_, err := conn.Exec(ctx, "CREATE SEQUENCE IF NOT EXISTS "+seq)
		var pe *pgconn.PgError
		if err != nil && !(errors.As(err, &pe) && (pe.Code == "23505" || pe.Code == "42P07")) {
			conn.Close(context.Background())
			return nil, wrap(err)
		}
		l.seqOK.Store(true)
	}
	// One round trip, three statements: the session's lease, the grant,
	// then its fence and the backend that holds it.
	q := fmt.Sprintf("%s; SELECT pg_advisory_lock(%d); SELECT nextval(%s), pg_backend_pid()",
		pgconf.Set("idle_session_timeout", l.lease, false), l.key, quoteLiteral(seq))
	res, err := conn.PgConn().Exec(ctx, q).ReadAll()
	if err == nil && (len(res) != 3 || len(res[2].Rows) != 1 || len(res[2].Rows[0]) != 2) {
		err = fmt.Errorf("unexpected reply %v", res)
	}
	if err != nil {
		conn.Close(context.Background())
		return nil, wrap(err)
	}
	fence, err := strconv.ParseUint(string(res[2].Rows[0][0]), 10, 64)
	if err == nil {
		_, err = strconv.ParseInt(string(res[2].Rows[0][1]), 10, 32)
	}
	if err != nil {
		conn.Close(context.Background())
		return nil, wrap(err)
	}
	kctx, stop := context.WithCancel(context.Background())
	pid, _ := strconv.ParseInt(string(res[2].Rows[0][1]), 10, 32)
	s := &lease{l: l, conn: conn, fence: fence, pid: int32(pid), stop: stop, done: make(chan struct{})}
	// A query every lease/3, so the session is never idle for the timeout
	// while the holder's process runs.
	go func() {
		defer close(s.done)
		adapt.Renew(kctx, l.lease/3, &s.lost, s.keepAlive)
	}()
	return s, nil
}

func (l *locker) lockName() string { return fmt.Sprintf("advisory lock %d", l.key) }

// connect returns the session the last Release kept, if it went idle less
// than half a lease ago (well before idle_session_timeout ends it), or a
// new connection. A connection is a server process: taking one per grant
// costs the server a fork and a backend's start each time.
func (l *locker) connect(ctx context.Context) (*pgx.Conn, error) {
	l.mu.Lock()
	c, at := l.spare, l.spareAt
	l.spare = nil
	l.mu.Unlock()
	if c != nil {
		if time.Since(at) < l.lease/2 && !c.IsClosed() {
			return c, nil
		}
		c.Close(context.Background())
	}
	return pgconf.Connect(ctx, l.cfg)
}

// keep makes c, whose lock was just released, the spare session.
func (l *locker) keep(c *pgx.Conn) {
	l.mu.Lock()
	old := l.spare
	if l.closed.Load() { // Close took the spare: keep nothing
		old = c
	} else {
		l.spare, l.spareAt = c, time.Now()
	}
	l.mu.Unlock()
	if old != nil {
		old.Close(context.Background())
	}
}

// Close closes the spare session; a lease still held keeps its own until
// its Release.
func (l *locker) Close() error {
	l.closed.Store(true)
	l.mu.Lock()
	c := l.spare
	l.spare = nil
	l.mu.Unlock()
	if c != nil {
		c.Close(context.Background())
	}
	return nil
}

func quoteLiteral(s string) string { return adapt.Quote(s, '\'') }

type lease struct {
	l        *locker
	mu       sync.Mutex // serializes use of conn
	conn     *pgx.Conn
	fence    uint64
	pid      int32 // the server backend that ran the grant
	stop     context.CancelFunc
	done     chan struct{}
	lost     adapt.Lost
	released bool
}

var (
	_ backends.LossNotifier = (*lease)(nil)
	_ backends.Sessioner    = (*lease)(nil)
)

func (s *lease) Fence() uint64 { return s.fence }

// Session is the pid of the server backend that granted the lock.
func (s *lease) Session() string { return fmt.Sprintf("pid %d", s.pid) }

func (s *lease) Lost() <-chan struct{} { return s.lost.C() }

// keepAlive sends one query: false when it fails (the session is gone)
// while the lease is still kept alive.
func (s *lease) keepAlive(ctx context.Context) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.conn.Exec(ctx, "SELECT 1")
	return err == nil || ctx.Err() != nil
}

// Release unlocks only this session's lock (an advisory lock belongs to its
// session). A session that held it, and freed it, is kept for the client's
// next Acquire (which takes it within half a lease, or closes it and dials
// anew); any other is closed. If the server already ended the session
// (idle_session_timeout), the lock went with it and Release returns nil.
func (s *lease) Release(ctx context.Context) error {
	s.stop()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.released {
		return nil
	}
	s.released = true
	var freed bool
	err := s.conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", s.l.key).Scan(&freed)
	if err == nil && freed {
		s.l.keep(s.conn)
		return nil
	}
	ended := s.conn.IsClosed()
	s.conn.Close(context.Background())
	if err != nil && !ended {
		return fmt.Errorf("postgres: release %s: %w", s.l.lockName(), err)
	}
	return nil
}

var _ backends.Cleaner = (*locker)(nil)

// Cleanup drops the lock's fence sequence (and nothing else: the advisory
// lock itself leaves no state).
func (l *locker) Cleanup(ctx context.Context) error {
	conn, err := pgconf.Connect(ctx, l.cfg)
	if err != nil {
		return fmt.Errorf("postgres: cleanup: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "DROP SEQUENCE IF EXISTS "+pgx.Identifier{l.seq}.Sanitize()); err != nil {
		return fmt.Errorf("postgres: cleanup: drop sequence %s: %w", l.seq, err)
	}
	l.seqOK.Store(false)
	return nil
}

var _ backends.Terminator = (*lease)(nil)

// Terminate ends the session that granted the lock (its backend's pid, as
// the server reported it) with pg_terminate_backend from a new connection
// and waits (up to 5 s, the function's own timeout) until the server
// process is gone, so that the lock is free when it returns. Through a
// transaction pooler the new connection's statement can run on that very
// session (PgBouncer with one server connection): it then ends itself,
// and the server's reply, that it terminated the connection (57P01), is
// the session's end. A session already gone (another client's shared
// server session ended before) is ended: Terminate returns nil.
func (s *lease) Terminate(ctx context.Context) error {
	pid := s.pid
	conn, err := pgconf.Connect(ctx, s.l.cfg)
	if err != nil {
		return fmt.Errorf("postgres: terminate session %d: %w", pid, err)
	}
	defer conn.Close(context.Background())
	var ok bool
	const q = `SELECT CASE WHEN pg_backend_pid() = $1 THEN pg_terminate_backend($1)
		WHEN NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1) THEN true
		ELSE pg_terminate_backend($1, 5000) END`
	if err := conn.QueryRow(ctx, q, pid).Scan(&ok); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "57P01" {
			return nil // the statement ran on the session it ended
		}
		return fmt.Errorf("postgres: terminate session %d: %w", pid, err)
	}
	if !ok {
		return fmt.Errorf("postgres: terminate session %d: the server did not end it within 5s", pid)
	}
	return nil
}
