package suite

import (
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strings"
	"syscall"

	"github.com/locksuite/locksuite/harness/run"
	"github.com/locksuite/locksuite/harness/traffic"
)

// wentAway reports whether err says that a server is gone: the connection
// was refused, reset or closed mid-reply, or (gRPC, etcd) is unavailable,
// or (Postgres) the server shut the session down. Client libraries' error
// types are read through the methods they share (SQLState, as pgconn's
// PgError has), and by their text otherwise, so that the suite depends on
// none of them; the text also serves for errors that crossed a process
// boundary (a chaos worker's) or that a client did not wrap.
func wentAway(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	// Postgres: 57P01 admin shutdown, 57P02 crash shutdown (a postmaster
	// that died), 57P03 cannot connect now.
	var sql interface{ SQLState() string }
	if errors.As(err, &sql) && strings.HasPrefix(sql.SQLState(), "57P") {
		return true
	}
	msg := err.Error()
	// "code = Unavailable" is how a gRPC status error (etcd's) prints
	// codes.Unavailable.
	for _, m := range []string{"connection refused", "connection reset", "broken pipe", "unexpected EOF", ": EOF", "code = Unavailable", "(SQLSTATE 57P"} {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

// explain turns the error of a scenario whose server went away mid-run into
// a *run.Error that says so, naming the service (the lock's, or the
// counter store) and the fix. Other errors are returned as they are.
func explain(cfg Config, scenario string, err error) error {
	if err == nil || !wentAway(err) {
		return err
	}
	var re *run.Error
	if errors.As(err, &re) {
		err = re.Err // the run's name is said once, here
	}
	what := "the lock service (" + cfg.Name
	if addr := address(err); addr != "" {
		what += " at " + addr
	}
	what += ")"
	var se *traffic.StepError
	if errors.As(err, &se) && se.Step != "acquire" ||
		!errors.As(err, &se) && (strings.Contains(err.Error(), ": read: ") || strings.Contains(err.Error(), ": write: ")) {
		what = "the counter store"
	}
	return &run.Error{Backend: cfg.Name, Scenario: scenario,
		Err: fmt.Errorf("%s went away during the run (it refused or dropped the connection): %w; fix: check that the server is running and reachable, then run again", what, err)}
}

// dialAddr finds the address in a dial error's text ("dial tcp
// 127.0.0.1:6379: connect: connection refused"), for errors that a client
// library printed rather than wrapped.
var dialAddr = regexp.MustCompile(`dial tcp ([^ ]+): `)

// address is the address of the server that err says went away, if it
// says: the net.OpError it wraps, or its text.
func address(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Addr != nil {
		return op.Addr.String()
	}
	if m := dialAddr.FindStringSubmatch(err.Error()); m != nil {
		return m[1]
	}
	return ""
}
