package entry

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/mysql"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/harness/services"
	"github.com/locksuite/locksuite/internal/redact"
	"github.com/locksuite/locksuite/suite"
)

// mysqlService is a throwaway MariaDB server (mariadb-install-db, then
// mariadbd), or the MySQL or MariaDB server MYSQL_URL names.
// wait_timeout, which frees a stalled holder's GET_LOCK, has whole
// seconds: 1 s is the shortest lease.
var mysqlService = &services.Service{
	Name: "mysql", Title: "MariaDB", Server: "mariadbd",
	Lease: time.Second, Pause: 2 * time.Second, Pauses: 3, Duration: 8 * time.Second,
	Vars:       []string{"MYSQL_URL"},
	FromEnv:    mysqlFromEnv,
	Diagnose:   diagnoseMySQL,
	HostPortOf: mysqlHostPort,
	Start:      services.StartOf(servers.StartMariaDB),
	Probe:      probeMySQL,
	Servers:    services.OneProcess("mariadbd", noClockMariaDB),
	Durability: servers.DurabilityPackaged,
	Version: func() string {
		return services.BinVersion(nil, "mariadbd", "/usr/sbin/mariadbd", "mysqld", "/usr/sbin/mysqld")
	},
}

var Backends = []services.Backend{
	{Name: "mysql", Kind: services.Adapter, On: mysqlService, Modules: []string{"github.com/go-sql-driver/mysql"}, NewLocker: func(c *services.Conn, cl suite.Client) (backends.Locker, error) {
		dsn, err := mysql.DSN(strings.TrimSpace(c.Endpoint))
		if err != nil {
			return nil, err
		}
		return mysql.New(mysql.Config{DSN: dsn, Dial: cl.Dial, Key: cl.Key, Lease: cl.Lease})
	}},
}

// noClockMariaDB is why mariadbd's clock is not jumped (wrapped in
// errors.ErrUnsupported).
const noClockMariaDB = "the harness does not run mariadbd under libfaketime, so its wall clock cannot be moved"

// mysqlFromEnv reads MYSQL_URL: a go-sql-driver DSN or a mysql:// URL.
func mysqlFromEnv() (*services.Conn, error) {
	v := os.Getenv("MYSQL_URL")
	if v == "" {
		return nil, nil
	}
	dsn, err := mysql.DSN(v)
	var cfg *gomysql.Config
	if err == nil {
		cfg, err = gomysql.ParseDSN(dsn)
	}
	if err != nil {
		return nil, &servers.Unavailable{Backend: "mysql", Err: redact.Error(fmt.Errorf("MYSQL_URL %s: %w", redact.URL(v), err)),
			Fix: "set MYSQL_URL to user:password@tcp(host:port)/db or mysql://user:password@host:port/db"}
	}
	return &services.Conn{Endpoint: v, Secrets: []string{cfg.Passwd}}, nil
}

// probeMySQL connects with the DSN (or mysql:// URL) and pings.
func probeMySQL(ctx context.Context, c *services.Conn) error {
	dsn, err := mysql.DSN(strings.TrimSpace(c.Endpoint))
	if err != nil {
		return err
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	return db.PingContext(ctx)
}

func diagnoseMySQL(s services.Symptoms) (problem, fix string) {
	switch {
	case s.Has("Error 1045", "Access denied"):
		return "authentication failed: wrong user name or password", "put the right user and password in MYSQL_URL: user:password@tcp(host:port)/db or mysql://user:password@host:port/db"
	case s.Has("Error 3159", "insecure transport"):
		return "server requires TLS", "add tls=true to MYSQL_URL (tls=skip-verify for a private CA)"
	case s.Untrusted():
		return "the server's TLS certificate is not trusted", "use tls=skip-verify in MYSQL_URL, or give the server a certificate the system trusts"
	}
	return "", "check MYSQL_URL (user:password@tcp(host:port)/db or mysql://user:password@host:port/db), or unset it to let the harness start a MariaDB server"
}

// mysqlHostPort is the address in a MYSQL_URL DSN or URL.
func mysqlHostPort(ep string) string {
	dsn, err := mysql.DSN(strings.TrimSpace(ep))
	if err != nil {
		return ""
	}
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return ""
	}
	return cfg.Addr
}
