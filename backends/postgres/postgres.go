// Package postgres is the locksuite adapter for a PostgreSQL session-level
// advisory lock (pg_advisory_lock) held on a dedicated connection.
//
// A session lock has no lease of its own: it lasts as long as the session.
// The adapter gives it one by setting idle_session_timeout on that session:
// the server ends a session that has sent nothing for that long, and with it
// the lock. While the holder runs, a background query every third of the
// timeout keeps the session busy (renewal); a holder whose process or network
// stalls sends nothing, and the server frees the lock.
//
// The fencing token is nextval of a sequence, sent in the same simple-protocol
// round trip as pg_advisory_lock: the server runs both before the client sees
// either, so no client-side pause can fall between the grant and its token.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/internal/keepalive"
	"github.com/locksuite/locksuite/backends/internal/retry"
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
	// Key names the lock; it is hashed (FNV-64a) to the advisory lock's
	// bigint key. Required.
	Key string
	// Sequence is the fence sequence's name. Default "locksuite_fence_"
	// followed by the hashed key in hex. Created if missing.
	Sequence string
	// Lease is the idle_session_timeout of the lock's session. Default
	// 500ms; at least 1ms (the setting's resolution).
	Lease time.Duration
	_     struct{}
}

type locker struct {
	cfg    *pgx.ConnConfig
	key    int64
	seq    string
	lease  time.Duration
	seqOK  atomic.Bool
	closed atomic.Bool
}

var (
	_ backends.Locker       = (*locker)(nil)
	_ backends.TTLer        = (*locker)(nil)
	_ backends.Renewer      = (*locker)(nil)
	_ backends.LossNotifier = (*lease)(nil)
)

// New returns a Locker for cfg. It does not connect.
func New(cfg Config) (backends.Locker, error) {
	if cfg.Key == "" {
		return nil, errors.New("postgres: Config.Key is empty: name the lock key")
	}
	if cfg.Lease == 0 {
		cfg.Lease = 500 * time.Millisecond
	}
	if cfg.Lease < time.Millisecond {
		return nil, fmt.Errorf("postgres: lease %v is below idle_session_timeout's 1ms resolution", cfg.Lease)
	}
	cc, err := pgx.ParseConfig(cfg.ConnString)
	if err != nil {
		return nil, fmt.Errorf("postgres: bad connection string: %w (expected postgres://user@host:port/db or PG* variables)", err)
	}
	if cfg.Addr != "" {
		host, port, err := net.SplitHostPort(cfg.Addr)
		if err != nil {
			return nil, fmt.Errorf("postgres: Addr %q: %w (expected host:port)", cfg.Addr, err)
		}
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("postgres: Addr %q: bad port: %w", cfg.Addr, err)
		}
		// One attempt per TLS setting that sslmode asks for (prefer: TLS,
		// then plain), all to Addr.
		cc.Host, cc.Port = host, uint16(p)
		fallbacks := cc.Fallbacks
		cc.Fallbacks = nil
		seen := map[bool]bool{cc.TLSConfig != nil: true}
		for _, f := range fallbacks {
			if seen[f.TLSConfig != nil] {
				continue
			}
			seen[f.TLSConfig != nil] = true
			cc.Fallbacks = append(cc.Fallbacks, &pgconn.FallbackConfig{Host: host, Port: uint16(p), TLSConfig: f.TLSConfig})
		}
	}
	if cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = 3 * time.Second
	}
	cc.RuntimeParams["idle_session_timeout"] = strconv.FormatInt(cfg.Lease.Milliseconds(), 10)
	cc.RuntimeParams["application_name"] = "locksuite"
	h := fnv.New64a()
	h.Write([]byte(cfg.Key))
	sum := h.Sum64()
	if cfg.Sequence == "" {
		cfg.Sequence = fmt.Sprintf("locksuite_fence_%016x", sum)
	}
	return &locker{cfg: cc, key: int64(sum), seq: cfg.Sequence, lease: cfg.Lease}, nil
}

func (l *locker) TTL() time.Duration { return l.lease }
func (l *locker) Renews() bool       { return true }
func (l *locker) Describe() string {
	return fmt.Sprintf("Postgres pg_advisory_lock, idle_session_timeout %v, keep-alive every %v, fence = nextval", l.lease, l.lease/3)
}

// Acquire tries until it holds the lock or ctx is done. A client stalled
// between connecting and asking finds its session ended by
// idle_session_timeout (57P05), or terminated (57P01), or its dial timed
// out: nothing was granted, and it starts over on a new connection. Other
// errors (authentication, a missing database) are returned at once.
func (l *locker) Acquire(ctx context.Context) (backends.Lease, error) {
	return retry.Acquire(ctx, l.attempt, retryable)
}

// retryable: the attempt's session ended before the grant, or its connect
// timed out (a client stalled mid-dial wakes past its deadline).
func retryable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "57P05" || pe.Code == "57P01"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(err.Error(), "conn closed")
}

func (l *locker) attempt(ctx context.Context) (backends.Lease, error) {
	if l.closed.Load() {
		return nil, backends.ErrClosed
	}
	wrap := func(err error) error {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fmt.Errorf("postgres: acquire %s: %w", l.lockName(), err)
	}
	conn, err := pgx.ConnectConfig(ctx, l.cfg)
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
	// One round trip, two statements: grant, then its fence.
	q := fmt.Sprintf("SELECT pg_advisory_lock(%d); SELECT nextval(%s)", l.key, quoteLiteral(seq))
	res, err := conn.PgConn().Exec(ctx, q).ReadAll()
	if err == nil && (len(res) != 2 || len(res[1].Rows) != 1) {
		err = fmt.Errorf("unexpected reply %v", res)
	}
	if err != nil {
		conn.Close(context.Background())
		return nil, wrap(err)
	}
	fence, err := strconv.ParseUint(string(res[1].Rows[0][0]), 10, 64)
	if err != nil {
		conn.Close(context.Background())
		return nil, wrap(err)
	}
	s := &lease{l: l, conn: conn, fence: fence}
	s.keep = keepalive.Start(l.lease/3, s.ping)
	return s, nil
}

func (l *locker) lockName() string { return fmt.Sprintf("advisory lock %d", l.key) }

func (l *locker) Close() error {
	l.closed.Store(true)
	return nil
}

func quoteLiteral(s string) string {
	out := []byte{'\''}
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, s[i])
	}
	return string(append(out, '\''))
}

type lease struct {
	l        *locker
	mu       sync.Mutex // serializes use of conn
	conn     *pgx.Conn
	fence    uint64
	keep     *keepalive.Loop
	released bool
}

func (s *lease) Fence() uint64         { return s.fence }
func (s *lease) Lost() <-chan struct{} { return s.keep.Lost() }

// ping is the keep-alive, every lease/3, so that the session is never
// idle for the timeout while the holder's process runs.
func (s *lease) ping(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.conn.Exec(ctx, "SELECT 1")
	return err
}

// Release unlocks only this session's lock (an advisory lock belongs to its
// session), then closes the session. If the server already ended the session
// (idle_session_timeout), the lock went with it and Release returns nil.
func (s *lease) Release(ctx context.Context) error {
	s.keep.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.released {
		return nil
	}
	s.released = true
	defer s.conn.Close(context.Background())
	_, err := s.conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", s.l.key)
	if err != nil && !s.conn.IsClosed() {
		return fmt.Errorf("postgres: release %s: %w", s.l.lockName(), err)
	}
	return nil
}

var _ backends.Cleaner = (*locker)(nil)

// Cleanup drops the lock's fence sequence (and nothing else: the advisory
// lock itself leaves no state).
func (l *locker) Cleanup(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, l.cfg)
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

// Terminate ends the lease's session with pg_terminate_backend from a new
// connection and waits (up to 5 s, the function's own timeout) until the
// server process is gone, so that the lock is free when it returns.
func (s *lease) Terminate(ctx context.Context) error {
	pid := s.conn.PgConn().PID()
	conn, err := pgx.ConnectConfig(ctx, s.l.cfg)
	if err != nil {
		return fmt.Errorf("postgres: terminate session %d: %w", pid, err)
	}
	defer conn.Close(context.Background())
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_terminate_backend($1, 5000)", int32(pid)).Scan(&ok); err != nil {
		return fmt.Errorf("postgres: terminate session %d: %w", pid, err)
	}
	if !ok {
		return fmt.Errorf("postgres: terminate session %d: the server did not end it within 5s", pid)
	}
	return nil
}
