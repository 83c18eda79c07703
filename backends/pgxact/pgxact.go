// Package pgxact is the locksuite adapter for the transaction-level
// Postgres advisory lock, the other common pattern besides the session lock
// (backends/postgres): BEGIN, then pg_try_advisory_xact_lock(key) until it
// returns true (each failed try rolls the transaction back and tries again
// after Poll), and the lock is held until the transaction ends: Release
// commits it. Clients use pgx v5.
//
// A transaction-level lock has no lease. What frees it when the holder
// stalls is the setting idle_in_transaction_session_timeout, which the
// adapter sets to Lease for each try's transaction (SET LOCAL, in the round
// trip of its BEGIN, so that it reaches the server through a connection
// pooler too): the server ends a session that sits idle inside a
// transaction for that long, and the lock goes with the transaction. There
// is no renewal: a holder whose critical section sends nothing to this
// session for longer than Lease (a slow holder, not only a stalled one) loses
// the lock. Without the timeout (Postgres's default), a stalled holder keeps
// the lock for as long as its connection stays open: safe, and everyone
// else waits.
//
// The fencing token is the transaction's own ID (pg_current_xact_id, a
// 64-bit counter that never wraps), taken in the statement that wins the
// lock and only then, so the ID is assigned at grant time: a later grant is
// a later transaction with a larger ID, while the server runs. Not across a
// crash: the lock transaction writes nothing to the WAL, so a restarted
// server can hand its ID out again, or a smaller one (docs/crash.md,
// Findings). The same statement reads the backend's pid (the lease's
// Session).
//
// The lock is the transaction's, so it is safe through a pooler in
// transaction mode (PgBouncer's pool_mode=transaction), which keeps one
// server connection for the whole transaction.
package pgxact

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/internal/adapt"
	"github.com/locksuite/locksuite/backends/internal/pgconf"
)

// Config describes one client of one transaction-level advisory lock.
type Config struct {
	// ConnString is a postgres:// URL or key=value DSN. Empty means libpq's
	// environment (PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, ...), as
	// pgx.ParseConfig reads it.
	ConnString string
	// Addr, if set, is a host:port that replaces the connection string's
	// host and port. The password and the TLS settings are kept, sslmode's
	// plain and TLS attempts included, and verify-full still checks the
	// connection string's host name.
	Addr string
	// Dial, if not nil, makes every connection to the server, as
	// postgres.Config.Dial does. Default: TCP.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// Key names the lock; it is hashed (FNV-64a) to the advisory lock's
	// bigint key. Required.
	Key string
	// Lease is the lock transaction's idle_in_transaction_session_timeout,
	// in whole milliseconds. Default 500ms; at least 1ms.
	Lease time.Duration
	// Poll is the wait between tries while the lock is taken. Default 5ms.
	Poll time.Duration
	// Pooler says that the connection string names a connection pooler
	// (PgBouncer) in front of Postgres. A query whose context ends is then
	// abandoned by closing its connection with no cancel request: pgx
	// sends one whenever it closes a connection with a query in flight,
	// and PgBouncer 1.18 exits on a cancel request that races the client's
	// disconnect (pgbouncer#801, #822), taking every client's session and
	// lock with it. The server learns that the query was abandoned when it
	// next writes to the session. Default false: pgx's cancel request.
	Pooler bool
	_      struct{}
}

type locker struct {
	cfg    *pgx.ConnConfig
	key    int64
	lease  time.Duration
	poll   time.Duration
	begin  pgx.TxOptions // BEGIN, and the transaction's timeout
	closed atomic.Bool
	conn   adapt.Session[*pgx.Conn] // the client's session, dialed on demand
}

// New returns a Locker for cfg. It does not connect.
func New(cfg Config) (backends.Locker, error) {
	if err := adapt.Check("pgxact", cfg.Key, "the lock key", &cfg.Lease, 500*time.Millisecond, time.Millisecond, "idle_in_transaction_session_timeout's 1ms resolution"); err != nil {
		return nil, err
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 5 * time.Millisecond
	}
	cc, err := pgconf.Parse("pgxact", cfg.ConnString, cfg.Addr, cfg.Dial, cfg.Pooler)
	if err != nil {
		return nil, err
	}
	begin := pgx.TxOptions{BeginQuery: "BEGIN; " + pgconf.Set("idle_in_transaction_session_timeout", cfg.Lease, true)}
	l := &locker{cfg: cc, key: int64(pgconf.Key(cfg.Key)), lease: cfg.Lease, poll: cfg.Poll, begin: begin}
	// A new connection when there is none or the server ended it; one
	// dropped is closed.
	l.conn = adapt.Session[*pgx.Conn]{
		Open:   func(ctx context.Context) (*pgx.Conn, error) { return pgconf.Connect(ctx, l.cfg) },
		Ended:  (*pgx.Conn).IsClosed,
		Forget: func(c *pgx.Conn) { c.Close(context.Background()) },
	}
	return l, nil
}

var _ backends.TTLer = (*locker)(nil)

func (l *locker) TTL() time.Duration { return l.lease }

// Expiry is TTL: the service frees the lease on time.
func (l *locker) Expiry() time.Duration { return l.TTL() }

// tryLock wins the lock and, only then, assigns the transaction its ID;
// and says which backend runs it.
const tryLock = `SELECT CASE WHEN pg_try_advisory_xact_lock($1) THEN pg_current_xact_id()::text::bigint ELSE 0 END, pg_backend_pid()`

// Acquire tries until it holds the lock or ctx is done. A session the server
// ended (this client stalled inside a try's transaction past the timeout),
// or a dial that timed out, is replaced; other errors (authentication, a
// missing database) are returned at once.
func (l *locker) Acquire(ctx context.Context) (backends.Lease, error) {
	wrap := func(err error) error {
		return adapt.Wrap(ctx, "pgxact", "acquire", fmt.Sprintf("advisory xact lock %d", l.key), err)
	}
	for {
		if l.closed.Load() {
			return nil, backends.ErrClosed
		}
		if ctx.Err() != nil {
			return nil, wrap(ctx.Err())
		}
		c, err := l.conn.Get(ctx)
		if err != nil {
			if retryable(err) && ctx.Err() == nil {
				if err := adapt.Sleep(ctx, l.poll); err != nil {
					return nil, wrap(err)
				}
				continue
			}
			return nil, wrap(err)
		}
		var (
			fence int64
			pid   int32
		)
		tx, err := c.BeginTx(ctx, l.begin)
		if err == nil {
			err = tx.QueryRow(ctx, tryLock, l.key).Scan(&fence, &pid)
		}
		if err == nil && fence > 0 {
			return &lease{l: l, conn: c, tx: tx, fence: uint64(fence), pid: pid}, nil
		}
		if tx != nil {
			rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			rerr := tx.Rollback(rctx)
			cancel()
			if err == nil && rerr != nil && !errors.Is(rerr, pgx.ErrTxClosed) {
				err = rerr
			}
		}
		if err != nil {
			l.conn.Drop(c)
			if ctx.Err() != nil || !retryable(err) {
				return nil, wrap(err)
			}
		}
		if err := adapt.Sleep(ctx, l.poll); err != nil {
			return nil, wrap(err)
		}
	}
}

// retryable: the session ended before the grant (25P03
// idle_in_transaction_session_timeout, 57P01 terminated, 57P05
// idle_session_timeout), or the connection or its dial broke or timed out.
func retryable(err error) bool { return pgconf.Ended(err, "25P03", "57P01", "57P05") }

// Close closes the client's session; a lock still held goes with it.
func (l *locker) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	if c := l.conn.Take(); c != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return c.Close(ctx)
	}
	return nil
}

type lease struct {
	l     *locker
	conn  *pgx.Conn
	tx    pgx.Tx
	fence uint64
	pid   int32 // the server backend that ran the grant
	mu    sync.Mutex
	done  bool
}

var _ backends.Sessioner = (*lease)(nil)

func (g *lease) Fence() uint64 { return g.fence }

// Session is the pid of the server backend whose transaction holds the
// lock.
func (g *lease) Session() string { return fmt.Sprintf("pid %d", g.pid) }

// Release commits the lock's transaction, which releases the lock: it is the
// transaction's, and never anyone else's. If the server already ended the
// session (the timeout), the lock went with it and Release returns nil.
func (g *lease) Release(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done {
		return nil
	}
	g.done = true
	err := g.tx.Commit(ctx)
	if err == nil || errors.Is(err, pgx.ErrTxClosed) {
		return nil
	}
	if g.conn.IsClosed() || retryable(err) {
		g.l.conn.Drop(g.conn)
		return nil
	}
	return fmt.Errorf("pgxact: release advisory xact lock %d: %w", g.l.key, err)
}
