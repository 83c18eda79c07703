// Package mysql is the locksuite adapter for MySQL's and MariaDB's named
// lock, GET_LOCK, held on a dedicated connection.
//
// GET_LOCK(name, timeout) belongs to the session that took it: the server
// frees it on RELEASE_LOCK from that session, or when the session ends, and
// at no other time. It has no lease of its own. The adapter gives it one by
// setting the session's wait_timeout: the server ends a session that has
// sent no command for that long (it reads the next command with that
// timeout), and the lock goes with it. A session whose client went silent
// (a stalled process, a frozen network) is idle, so wait_timeout is what
// frees its lock; net_read_timeout (default 30 s) and net_write_timeout (60
// s) apply only in the middle of a packet, and TCP keepalive, at its
// two-hour default, to nothing a lease cares about (measured with a frozen
// fault proxy: the lock is free wait_timeout after the holder's last
// command). A connection that is cut, not silent, ends the session at once.
// While the holder runs, a ping every third of the lease keeps the session
// busy (renewal).
//
// wait_timeout is a whole number of seconds, at least 1: a Lease is
// rounded up to whole seconds, and 1 s is the floor.
//
// GET_LOCK gives no fencing token. The adapter owns a one-row counter table
// (locksuite_fence_<hash of the key>) and, right after GET_LOCK succeeds and
// on the same session, increments it (INSERT … ON DUPLICATE KEY UPDATE
// v = LAST_INSERT_ID(v + 1)): the increment runs under the lock, because
// a session that stalled past wait_timeout between the two statements is
// ended, with its lock, before its increment can run. Cleanup drops the
// table.
//
// Lock names are limited to 64 characters by MySQL (5.7 and later): a key
// of at most 64 bytes is the lock's name as it is; a longer key is hashed,
// to "locksuite:" and 32 hexadecimal digits of its SHA-256.
package mysql

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/internal/adapt"
	"github.com/locksuite/locksuite/backends/internal/keepalive"
)

// Config describes one client of one named lock.
type Config struct {
	// DSN is a github.com/go-sql-driver/mysql data source name,
	// [user[:password]@][tcp[(host:port)]]/dbname[?param=value&...], that
	// names a database (the fence table lives there). TLS comes from its
	// tls parameter (true, skip-verify, preferred) or from the TLS field.
	// Required.
	DSN string
	// Addr, if set, is a host:port that replaces the DSN's address (the
	// suite points it at a fault proxy). The user, the password and the
	// TLS settings are kept, and TLS still verifies the DSN's host name.
	Addr string
	// TLS, if set, replaces the DSN's tls parameter (a test CA, a client
	// certificate). An empty ServerName becomes the DSN's host.
	TLS *tls.Config
	// Dial, if set, makes every connection to the server (the driver's
	// DialFunc), to Addr or the DSN's address.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// Key names the lock (see the package comment for keys over 64
	// bytes). Required.
	Key string
	// Table is the fence table's name. Default "locksuite_fence_"
	// followed by the FNV-64a hash of the key in hex. Created if missing.
	Table string
	// Lease is the wait_timeout of the lock's session, rounded up to whole
	// seconds (the setting's resolution), so at least 1s; TTL reports the
	// rounded value. Default 1s; negative is an error.
	Lease time.Duration
	_     struct{}
}

type locker struct {
	db      *sql.DB
	name    string // the GET_LOCK name
	table   string
	lease   time.Duration
	tableOK atomic.Bool

	mu     sync.Mutex
	closed bool
	held   *lease
}

var (
	_ backends.Locker       = (*locker)(nil)
	_ backends.TTLer        = (*locker)(nil)
	_ backends.Cleaner      = (*locker)(nil)
	_ backends.LossNotifier = (*lease)(nil)
	_ backends.Terminator   = (*lease)(nil)
)

// New returns a Locker for cfg. It does not connect.
func New(cfg Config) (backends.Locker, error) {
	// No minimum: wait_timeout is whole seconds, and the lease is rounded
	// up to them.
	if err := adapt.Check("mysql", cfg.Key, "the lock key", &cfg.Lease, time.Second, 0, ""); err != nil {
		return nil, err
	}
	secs := int64(math.Ceil(cfg.Lease.Seconds()))
	mc, err := mysql.ParseDSN(cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("mysql: bad DSN: %v (expected user:password@tcp(host:port)/dbname)", redact(err, mc))
	}
	if mc.DBName == "" {
		return nil, errors.New("mysql: the DSN names no database: add /dbname (the fence table lives there)")
	}
	if cfg.TLS != nil {
		mc.TLS = cfg.TLS.Clone()
		if mc.TLS.ServerName == "" {
			if host, _, err := net.SplitHostPort(mc.Addr); err == nil {
				mc.TLS.ServerName = host
			}
		}
	}
	if cfg.Addr != "" {
		if _, _, err := net.SplitHostPort(cfg.Addr); err != nil {
			return nil, fmt.Errorf("mysql: Addr %q: %w (expected host:port)", cfg.Addr, err)
		}
		mc.Net, mc.Addr = "tcp", cfg.Addr
	}
	if cfg.Dial != nil {
		mc.DialFunc = cfg.Dial
	}
	// The driver logs each broken connection ("unexpected EOF"): here an
	// ended session is an expected outcome, reported through the errors.
	mc.Logger = &mysql.NopLogger{}
	if mc.Timeout == 0 {
		mc.Timeout = 3 * time.Second
	}
	if mc.Params == nil {
		mc.Params = map[string]string{}
	}
	// Sent as SET wait_timeout=N when each connection opens.
	mc.Params["wait_timeout"] = strconv.FormatInt(secs, 10)
	conn, err := mysql.NewConnector(mc)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	db := sql.OpenDB(conn)
	// No idle connections: a lease's session ends when the lease does.
	db.SetMaxIdleConns(-1)
	h := fnv.New64a()
	h.Write([]byte(cfg.Key))
	if cfg.Table == "" {
		cfg.Table = fmt.Sprintf("locksuite_fence_%016x", h.Sum64())
	}
	return &locker{db: db, name: lockName(cfg.Key), table: cfg.Table, lease: time.Duration(secs) * time.Second}, nil
}

// lockName is key, or its hash when MySQL's 64-character limit would
// refuse it.
func lockName(key string) string {
	if len(key) <= 64 {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "locksuite:" + hex.EncodeToString(sum[:16])
}

// redact keeps a DSN's password out of a parse error.
func redact(err error, mc *mysql.Config) string {
	if mc != nil && mc.Passwd != "" {
		return "(error hidden: it may quote the password)"
	}
	return err.Error()
}

func (l *locker) TTL() time.Duration { return l.lease }

// Expiry is the lease and a margin: the server ends the idle session
// wait_timeout after it has answered the session's last command, which is
// a round trip and a thread wake-up after the client sent it (MariaDB
// 10.11, a 1 s lease, ten frozen holders: the lock was free 1.002 s to
// 1.011 s after the holder's last command was sent; see
// docs/services/mysql.md).
func (l *locker) Expiry() time.Duration { return l.lease + expiryMargin }

// expiryMargin covers the round trip and the server's scheduling, ten
// times what was measured on an idle machine.
const expiryMargin = 100 * time.Millisecond

// Acquire tries until it holds the lock or ctx is done. An attempt whose
// session ended before the grant (wait_timeout after a stall, KILL) or
// whose connect timed out starts over on a new connection; other errors
// (access denied, an unknown database) are returned at once.
func (l *locker) Acquire(ctx context.Context) (backends.Lease, error) {
	return adapt.Retry(ctx, l.attempt, retryable)
}

// MySQL error numbers of a session ended under its client.
const (
	erConnectionKilled = 1927 // ER_CONNECTION_KILLED (MariaDB)
	erQueryInterrupted = 1317 // ER_QUERY_INTERRUPTED
	erClientTimeout    = 4031 // ER_CLIENT_INTERACTION_TIMEOUT (MySQL 8.0.24+)
	erServerShutdown   = 1053 // ER_SERVER_SHUTDOWN
)

func retryable(err error) bool {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case erConnectionKilled, erQueryInterrupted, erClientTimeout:
			return true
		}
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return connGone(err)
}

// connGone: the session's connection is broken.
func connGone(err error) bool {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number == erConnectionKilled || me.Number == erClientTimeout || me.Number == erServerShutdown
	}
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, sql.ErrConnDone) || errors.Is(err, net.ErrClosed)
}

// getLockStep bounds each GET_LOCK's wait: the loop checks ctx between
// calls, and a wait abandoned by a cancelled client (the driver closes its
// connection) goes on in the server for at most this long.
const getLockStep = time.Second

func (l *locker) attempt(ctx context.Context) (backends.Lease, error) {
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return nil, backends.ErrClosed
	}
	wrap := func(err error) error {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fmt.Errorf("mysql: acquire lock %q: %w", l.name, err)
	}
	if !l.tableOK.Load() {
		_, err := l.db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+quoteIdent(l.table)+
			" (id TINYINT UNSIGNED PRIMARY KEY, v BIGINT UNSIGNED NOT NULL) ENGINE=InnoDB")
		if err != nil {
			return nil, wrap(err)
		}
		l.tableOK.Store(true)
	}
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return nil, wrap(err)
	}
	var id uint64
	for {
		step := getLockStep
		if d, ok := ctx.Deadline(); ok && time.Until(d) < step {
			step = max(time.Until(d), time.Millisecond)
		}
		var got sql.NullInt64
		err = conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?), CONNECTION_ID()", l.name, step.Seconds()).Scan(&got, &id)
		if err == nil && !got.Valid {
			err = errors.New("GET_LOCK returned NULL (an error in the server)")
		}
		if err == nil && got.Int64 == 0 {
			if ctx.Err() == nil {
				continue
			}
			err = ctx.Err()
		}
		if err != nil {
			conn.Close()
			return nil, wrap(err)
		}
		break
	}
	sent := time.Now()
	res, err := conn.ExecContext(ctx, "INSERT INTO "+quoteIdent(l.table)+
		" (id, v) VALUES (1, LAST_INSERT_ID(1)) ON DUPLICATE KEY UPDATE v = LAST_INSERT_ID(v + 1)")
	var fence int64
	if err == nil {
		fence, err = res.LastInsertId()
	}
	if err != nil {
		conn.Close() // ends the session, and frees the lock with it
		return nil, wrap(fmt.Errorf("fence: %w", err))
	}
	s := &lease{l: l, conn: conn, id: id, fence: uint64(fence)}
	s.renewed.Store(sent.UnixNano())
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		conn.Close()
		return nil, backends.ErrClosed
	}
	l.held = s
	s.keep = keepalive.Start(l.lease/3, s.ping)
	l.mu.Unlock()
	return s, nil
}

// Close releases a lease still held (RELEASE_LOCK, given up to a second:
// if the server cannot be asked, closing the session frees the lock as
// soon as the server sees the connection end) and closes the pool.
func (l *locker) Close() error {
	l.mu.Lock()
	l.closed = true
	held := l.held
	l.held = nil
	l.mu.Unlock()
	if held != nil {
		adapt.ReleaseHeld(held)
	}
	return l.db.Close()
}

func quoteIdent(s string) string { return adapt.Quote(s, '`') }

type lease struct {
	l     *locker
	mu    sync.Mutex // serializes use of conn
	conn  *sql.Conn
	id    uint64 // the session's CONNECTION_ID()
	fence uint64
	keep  *keepalive.Loop
	ended bool
	// renewed is when the last command known to have reached the session
	// was sent (UnixNano): the server's wait_timeout runs from about then.
	renewed atomic.Int64
}

func (s *lease) Fence() uint64         { return s.fence }
func (s *lease) Lost() <-chan struct{} { return s.keep.Lost() }

// ping is the keep-alive (every lease/3, so that the session is never idle
// for wait_timeout while the holder's process runs). A ping that fails
// means the session is gone (ended by the server, killed, or its
// connection cut), and the lock with it: Lost fires.
func (s *lease) ping(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, s.l.lease)
	defer cancel()
	sent := time.Now()
	err := s.conn.PingContext(pctx)
	if err == nil {
		s.renewed.Store(sent.UnixNano())
	}
	return err
}

// Release runs RELEASE_LOCK on the lease's own session, then ends the
// session. RELEASE_LOCK frees only a lock its session holds (it returns 0
// for a lock another session holds and NULL for a free one), so a late
// Release never frees another grant; if the session already ended, the
// lock went with it, and Release returns nil.
func (s *lease) Release(ctx context.Context) error {
	s.keep.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return nil
	}
	var got sql.NullInt64
	err := s.conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK(?)", s.l.name).Scan(&got)
	s.endLocked()
	if err != nil && !connGone(err) && ctx.Err() == nil {
		return fmt.Errorf("mysql: release lock %q: %w", s.l.name, err)
	}
	if err != nil && ctx.Err() != nil {
		// Not asked; ending the session (endLocked) frees the lock.
		return fmt.Errorf("mysql: release lock %q: %w", s.l.name, ctx.Err())
	}
	return nil
}

// endLocked closes the lease's connection for good: database/sql's pool
// keeps no idle connection (SetMaxIdleConns(-1)), so the session ends.
func (s *lease) endLocked() {
	if s.ended {
		return
	}
	s.ended = true
	_ = s.conn.Raw(func(any) error { return driver.ErrBadConn }) // never reused
	s.conn.Close()
	s.l.mu.Lock()
	if s.l.held == s {
		s.l.held = nil
	}
	s.l.mu.Unlock()
}

// Cleanup drops the lock's fence table (the named lock itself leaves no
// state).
func (l *locker) Cleanup(ctx context.Context) error {
	if _, err := l.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+quoteIdent(l.table)); err != nil {
		return fmt.Errorf("mysql: cleanup: drop table %s: %w", l.table, err)
	}
	l.tableOK.Store(false)
	return nil
}

// Terminate ends the lease's session with KILL CONNECTION from another
// connection, then waits (up to 5 s) until the server has let go of the
// lock, so that it is free, or another's, when Terminate returns. KILL of
// another user's session needs the CONNECTION ADMIN (or SUPER) privilege.
func (s *lease) Terminate(ctx context.Context) error {
	if _, err := s.l.db.ExecContext(ctx, "KILL CONNECTION "+strconv.FormatUint(s.id, 10)); err != nil {
		return fmt.Errorf("mysql: terminate session %d: %w", s.id, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		var holder sql.NullInt64
		err := s.l.db.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", s.l.name).Scan(&holder)
		if err != nil {
			return fmt.Errorf("mysql: terminate session %d: %w", s.id, err)
		}
		if !holder.Valid || uint64(holder.Int64) != s.id {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("mysql: terminate session %d: it still holds the lock after KILL: %w", s.id, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// DSN returns s as a go-sql-driver/mysql DSN: a mysql://user:password@
// host:port/dbname?param=value URL is converted (host defaults to
// 127.0.0.1, port to 3306; the query's parameters are the DSN's, tls=true
// among them), anything else is returned as it is, for New to parse.
func DSN(s string) (string, error) {
	if !strings.HasPrefix(s, "mysql://") {
		return s, nil
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("mysql: bad URL: %v (expected mysql://user:password@host:port/dbname)", redactURL(err))
	}
	c := mysql.NewConfig()
	c.User = u.User.Username()
	c.Passwd, _ = u.User.Password()
	host, port := u.Hostname(), u.Port()
	if host == "" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = "3306"
	}
	c.Net, c.Addr = "tcp", net.JoinHostPort(host, port)
	c.DBName = strings.TrimPrefix(u.Path, "/")
	dsn := c.FormatDSN()
	if u.RawQuery != "" {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		dsn += sep + u.RawQuery
	}
	if _, err := mysql.ParseDSN(dsn); err != nil {
		return "", fmt.Errorf("mysql: URL %s: %w", u.Redacted(), err)
	}
	return dsn, nil
}

// redactURL keeps a URL's password out of a parse error.
func redactURL(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return "unparsable"
}
