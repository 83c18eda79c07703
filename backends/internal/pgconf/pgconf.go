// Package pgconf is what the Postgres adapters (postgres, pgxact) share: the
// connection settings of a lock's session, the lock's key, and which errors
// mean that the session ended before a grant.
package pgconf

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Parse returns the settings of package pkg's sessions: connString (over
// libpq's PG* variables) with every connection made by dial (if not nil),
// sent to addr (if not empty) instead of the connection string's host, and
// a 3 s connect timeout unless the string sets one. The lease's server
// setting is not among them: it is sent in the statements that take the
// lock (Set), so that it reaches the server through a connection pooler,
// which passes no such startup parameter on (PgBouncer refuses it).
//
// With addr, sslmode's attempts (prefer: TLS, then plain) all go to addr,
// and verify-full still checks the connection string's host name.
//
// With pooler, the sessions send no cancel request (see Connect): pgx
// sends one whenever it closes a connection with a query in flight (a
// query whose context ended), and PgBouncer 1.18 exits on a cancel request
// that races the client's disconnect (pgbouncer#801, #822), with every
// client's session and lock. The connection is closed all the same.
func Parse(pkg, connString, addr string, dial func(ctx context.Context, network, address string) (net.Conn, error), pooler bool) (*pgx.ConnConfig, error) {
	cc, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("%s: bad connection string: %w (expected postgres://user@host:port/db or PG* variables)", pkg, err)
	}
	if dial != nil {
		cc.DialFunc = dial
	}
	if addr != "" {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("%s: Addr %q: %w (expected host:port)", pkg, addr, err)
		}
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("%s: Addr %q: bad port: %w", pkg, addr, err)
		}
		// One attempt per TLS setting that sslmode asks for, all to addr.
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
	cc.RuntimeParams["application_name"] = "locksuite"
	if pooler {
		d := cc.DialFunc
		cc.DialFunc = func(ctx context.Context, network, address string) (net.Conn, error) {
			if ctx.Value(connecting{}) == nil {
				return nil, errNoCancel
			}
			return d(ctx, network, address)
		}
	}
	return cc, nil
}

// connecting marks the context of Connect's dials.
type connecting struct{}

var errNoCancel = errors.New("pgconf: no cancel request through a pooler (dial a session with pgconf.Connect)")

// Connect opens a session with cc, a config of Parse. Through a pooler
// (Parse's pooler), its dials are the only ones cc allows: pgx's cancel
// request, which dials a connection of its own outside Connect, fails at
// once without reaching the pooler, and pgx closes the connection.
func Connect(ctx context.Context, cc *pgx.ConnConfig) (*pgx.Conn, error) {
	return pgx.ConnectConfig(context.WithValue(ctx, connecting{}, true), cc)
}

// Set is the statement that sets the server setting (idle_session_timeout,
// idle_in_transaction_session_timeout) to lease in whole milliseconds: for
// the session, or with local for the current transaction only (SET LOCAL).
func Set(setting string, lease time.Duration, local bool) string {
	scope := ""
	if local {
		scope = "LOCAL "
	}
	return fmt.Sprintf("SET %s%s = %d", scope, setting, lease.Milliseconds())
}

// Key hashes a lock's name (FNV-64a) to an advisory lock's bigint key.
func Key(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64()
}

// Ended reports whether err says the session ended or broke before a
// grant: a server error with one of codes (57P01 terminated, 57P05
// idle_session_timeout, ...), a timeout (a client stalled mid-dial wakes
// past its deadline), or a closed connection. Nothing was granted: the
// caller may start over on a new session.
func Ended(err error, codes ...string) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		for _, c := range codes {
			if pe.Code == c {
				return true
			}
		}
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(err.Error(), "conn closed")
}
