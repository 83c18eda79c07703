package entry

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/pgxact"
	"github.com/locksuite/locksuite/backends/postgres"
	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/fencing/pgstore"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/harness/services"
	"github.com/locksuite/locksuite/suite"
)

// Service is a throwaway PostgreSQL cluster (initdb, then
// postgres), or the server libpq's variables name. It also holds the
// counter store (stores).
var Service = &services.Service{
	Name: "postgres", Title: "Postgres", Server: "initdb and postgres",
	Lease: 200 * time.Millisecond, Pause: 500 * time.Millisecond, Duration: 5 * time.Second,
	Vars:       []string{"DATABASE_URL", "PGHOST", "PGHOSTADDR", "PGPORT", "PGUSER", "PGPASSWORD", "PGPASSFILE", "PGDATABASE", "PGSSLMODE", "PGSSLROOTCERT", "PGSSLCERT", "PGSSLKEY", "PGSSLSNI", "PGSERVICE", "PGSERVICEFILE", "PGCONNECT_TIMEOUT", "PGTARGETSESSIONATTRS"},
	FromEnv:    postgresFromEnv,
	Start:      services.StartOf(servers.StartPostgres),
	Probe:      probePostgres,
	Diagnose:   diagnosePostgres,
	HostPortOf: HostPort,
	StartTLS:   true,
	Servers:    services.OneProcess("postgres", noClockPostgres),
	Durability: servers.DurabilityPackaged,
	Version:    func() string { return services.BinVersion(nil, "postgres", "/usr/lib/postgresql/*/bin/postgres") },
	Store:      openPgStore,
}

const pgxModule = "github.com/jackc/pgx/v5"

var Backends = []services.Backend{
	{Name: "postgres", Kind: services.Adapter, On: Service, Modules: []string{pgxModule}, NewLocker: newPostgres},
	{Name: "pg-xact", Kind: services.Library, On: Service, Modules: []string{pgxModule}, NewLocker: newPgXact},
}

// newPostgres is the session advisory lock (backends/postgres) at c.
var newPostgres = postgresLock(false)

// newPgXact is the transaction advisory lock (backends/pgxact) at c.
var newPgXact = pgXactLock(false)

// postgresLock makes the session advisory lock at c; pooler: c is a
// connection pooler (postgres.Config.Pooler).
func postgresLock(pooler bool) func(c *services.Conn, cl suite.Client) (backends.Locker, error) {
	return func(c *services.Conn, cl suite.Client) (backends.Locker, error) {
		return postgres.New(postgres.Config{ConnString: strings.TrimSpace(c.Endpoint), Dial: cl.Dial, Key: cl.Key, Lease: cl.Lease, Pooler: pooler})
	}
}

// pgXactLock makes the transaction advisory lock at c; pooler: c is a
// connection pooler (pgxact.Config.Pooler).
func pgXactLock(pooler bool) func(c *services.Conn, cl suite.Client) (backends.Locker, error) {
	return func(c *services.Conn, cl suite.Client) (backends.Locker, error) {
		return pgxact.New(pgxact.Config{ConnString: strings.TrimSpace(c.Endpoint), Dial: cl.Dial, Key: cl.Key, Lease: cl.Lease, Pooler: pooler})
	}
}

// noClockPostgres is why postgres's clock is not jumped (wrapped in
// errors.ErrUnsupported).
const noClockPostgres = "postgres ends an idle session (idle_session_timeout) with an interval timer (setitimer) armed for the time remaining: a wall-clock jump does not make it fire sooner (measured: TestPostgresIdleTimeoutIgnoresClockJump), so the lease does not follow the wall clock"

// openPgStore is the counter store in the table locksuite_counter
// (fencing/pgstore), over a pool of connections to c.
func openPgStore(ctx context.Context, c *services.Conn) (*services.CounterStore, error) {
	pool, err := pgxpool.New(ctx, strings.TrimSpace(c.Endpoint))
	if err != nil {
		return nil, err
	}
	return &services.CounterStore{
		New: func(ctx context.Context, name string, fenced bool) (fencing.Store, error) {
			return pgstore.New(ctx, pool, "", name, fenced)
		},
		Close: pool.Close,
	}, nil
}

// postgresFromEnv reads DATABASE_URL, or libpq's PG* variables.
func postgresFromEnv() (*services.Conn, error) {
	c := &services.Conn{}
	if u := os.Getenv("DATABASE_URL"); u != "" {
		c.Endpoint = u
	} else if os.Getenv("PGHOST") != "" {
		c.Endpoint = " " // libpq's variables: pgx reads them from an empty DSN
	} else {
		return nil, nil
	}
	c.Secrets = append(c.Secrets, os.Getenv("PGPASSWORD"))
	pc, err := pgconn.ParseConfig(strings.TrimSpace(c.Endpoint))
	if err != nil {
		return nil, &servers.Unavailable{Backend: "postgres", Err: err, Fix: "check DATABASE_URL (postgres://user:password@host:port/db?sslmode=...) and the PG* variables"}
	}
	c.Secrets = append(c.Secrets, pc.Password)
	return c, nil
}

// probePostgres: a connection, and a ping on it.
func probePostgres(ctx context.Context, c *services.Conn) error {
	p, err := pgxpool.New(ctx, strings.TrimSpace(c.Endpoint))
	if err != nil {
		return err
	}
	defer p.Close()
	return p.Ping(ctx)
}

func diagnosePostgres(s services.Symptoms) (problem, fix string) {
	var pe *pgconn.PgError
	isPg := errors.As(s.Err, &pe)
	switch {
	case isPg && pe.Code == "28P01":
		return "authentication failed: wrong password", "set the password in PGPASSWORD or in DATABASE_URL (postgres://user:password@host:port/db)"
	case isPg && pe.Code == "28000" && strings.Contains(pe.Message, "no encryption"):
		return "server requires TLS (pg_hba.conf refuses plain connections)", "set PGSSLMODE=require (or verify-full with PGSSLROOTCERT), or sslmode= in DATABASE_URL"
	case isPg && pe.Code == "28000":
		return "authentication failed: pg_hba.conf has no entry for this user and host", "check PGUSER and the server's pg_hba.conf"
	case s.Untrusted():
		return "the server's TLS certificate is not trusted", "set PGSSLROOTCERT (or sslrootcert= in DATABASE_URL) to a PEM file of its CA"
	case s.Has("server refused TLS connection"):
		return "the server does not offer TLS", "set PGSSLMODE=prefer or disable, or sslmode= in DATABASE_URL"
	}
	return "", "check DATABASE_URL or the PG* variables, or unset them to let the harness make a throwaway cluster"
}

// HostPort is the host:port of a URL, a key=value DSN or libpq's
// variables: pgx knows where.
func HostPort(ep string) string {
	if pc, err := pgconn.ParseConfig(strings.TrimSpace(ep)); err == nil {
		return net.JoinHostPort(pc.Host, strconv.Itoa(int(pc.Port)))
	}
	return ep
}
