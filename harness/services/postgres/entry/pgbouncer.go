package entry

import (
	"context"
	"net/url"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/harness/services"
	"github.com/locksuite/locksuite/suite"
)

// PgBouncer in front of Postgres: the two Postgres locks through a
// connection pooler, in each pool mode (issue 26). Each service is a
// pgbouncer of its own in front of a throwaway Postgres of its own
// (servers.StartPgBouncer), or the pooler its variable names.
// pgbouncer-one is transaction pooling with one server connection, which
// every client's transactions take turns on: the session lock's pitfall
// then shows in every run, and a session kill there faults only the runs
// of that backend.
var (
	pgbouncerService        = poolerService("pgbouncer", servers.PoolTransaction, 0, "LOCKSUITE_PGBOUNCER_URL")
	pgbouncerOneService     = poolerService("pgbouncer-one", servers.PoolTransaction, 1, "LOCKSUITE_PGBOUNCER_ONE_URL")
	pgbouncerSessionService = poolerService("pgbouncer-session", servers.PoolSession, 0, "LOCKSUITE_PGBOUNCER_SESSION_URL")
)

// txnPoolerUnsafe is why the session lock through a transaction pooler can
// grant twice with no fault (suite.Config.Unsafe).
const txnPoolerUnsafe = "a session advisory lock through PgBouncer in transaction pooling: the lock belongs to the server session, not to the client, and each of a client's statements may run on another client's server session (the harness's pooler has one, so every client's does), where pg_advisory_lock is granted at once to whoever asks (advisory locks are re-entrant per session) and the unlock can free another client's hold"

var PoolerBackends = []services.Backend{
	{Name: "postgres-pgbouncer", Kind: services.Pooler, On: pgbouncerOneService, Modules: []string{pgxModule}, NewLocker: newPooledPostgres,
		Tune: func(cfg *suite.Config) { cfg.Unsafe = txnPoolerUnsafe }},
	{Name: "pg-xact-pgbouncer", Kind: services.Pooler, On: pgbouncerService, Modules: []string{pgxModule}, NewLocker: newPooledPgXact},
	{Name: "postgres-pgbouncer-session", Kind: services.Pooler, On: pgbouncerSessionService, Modules: []string{pgxModule}, NewLocker: newPooledPostgres},
	{Name: "pg-xact-pgbouncer-session", Kind: services.Pooler, On: pgbouncerSessionService, Modules: []string{pgxModule}, NewLocker: newPooledPgXact},
}

// The adapters through a pooler send no cancel request (Config.Pooler).
var newPooledPostgres, newPooledPgXact = postgresLock(true), pgXactLock(true)

// poolerService is PgBouncer in mode, with pool server connections (0:
// servers.StartPgBouncer's default), in front of its own Postgres, or the
// pooler v names: the lock's sizes and checks are Postgres's.
func poolerService(name string, mode servers.PoolMode, pool int, v string) *services.Service {
	title, server := "PgBouncer ("+string(mode)+" pooling)", "pgbouncer (pool_mode="+string(mode)
	if pool == 1 {
		title, server = "PgBouncer ("+string(mode)+" pooling, one server connection)", server+", default_pool_size=1"
	}
	return &services.Service{
		Name: name, Title: title,
		Server: server + ") in front of its own initdb and postgres",
		Lease:  Service.Lease, Pause: Service.Pause, Duration: Service.Duration,
		Vars:    []string{v},
		FromEnv: func() (*services.Conn, error) { return poolerFromEnv(v) },
		Start: func(ctx context.Context, _ ...servers.Option) (servers.Server, error) {
			return servers.StartPgBouncer(ctx, mode, pool)
		},
		Probe:      probePostgres,
		Diagnose:   diagnosePostgres,
		HostPortOf: HostPort,
		StartTLS:   true,
		Servers:    poolerServers,
		Version:    func() string { return services.BinVersion(nil, "pgbouncer", "/usr/sbin/pgbouncer") },
		NoCompose:  "the harness starts PgBouncer with a Postgres of its own; a pooler of the user's is named by " + v,
	}
}

// poolerFromEnv reads v, a postgres:// URL or DSN of the user's pooler (in
// the mode its service says), and adds pgx's
// default_query_exec_mode=simple_protocol to a URL that sets no mode:
// PgBouncer before 1.21 keeps no prepared statement across the server
// connections of transaction pooling.
func poolerFromEnv(v string) (*services.Conn, error) {
	ep := os.Getenv(v)
	if ep == "" {
		return nil, nil
	}
	pc, err := pgconn.ParseConfig(ep)
	if err != nil {
		return nil, &servers.Unavailable{Backend: v, Err: err, Fix: "check " + v + " (postgres://user:password@host:port/db?sslmode=...)"}
	}
	if u, err := url.Parse(ep); err == nil && u.Scheme != "" && !strings.Contains(ep, "default_query_exec_mode=") {
		q := u.Query()
		q.Set("default_query_exec_mode", "simple_protocol")
		u.RawQuery = q.Encode()
		ep = u.String()
	}
	return &services.Conn{Endpoint: ep, Secrets: []string{pc.Password}}, nil
}

// poolerServers: the Postgres behind the pooler the harness started is
// the one member (the lock's state is there: a server fault stops it); the
// pooler answers the health check.
func poolerServers(sv *services.Service, s servers.Server) suite.Servers {
	pg := s.(*servers.PgBouncer).Postgres()
	return &services.ServerMembers{Service: sv, Server: s, MemberList: []suite.Member{&services.Process{Label: "postgres", Proc: pg.Members()[0], Jump: services.Unsupported(noClockPostgres)}}}
}
