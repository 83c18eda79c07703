package servers

import (
	"context"
	"database/sql"
	"github.com/locksuite/locksuite/internal/servercheck"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// TestMariaDB starts a server (timed), queries it over TCP with the
// endpoint's DSN, stops it, and checks that its process and directory are
// gone. WithAuth and WithTLS: the password and the CA get in, a wrong
// password and a plain connection do not.
func TestMariaDB(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real server")
	}
	for _, tc := range secureVariants {
		t.Run(tc.name, func(t *testing.T) {
			s := servercheck.TimedStart(t, func(ctx context.Context) (*MariaDB, error) { return StartMariaDB(ctx, tc.opts...) })
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			dir, pid := s.dir, s.Pid()
			defer s.Stop()
			open := func(dsn string) (*sql.DB, error) {
				cfg, err := mysql.ParseDSN(dsn)
				if err != nil {
					return nil, err
				}
				cfg.Timeout = 5 * time.Second
				if tc.opts != nil {
					if cfg.TLS, err = s.Secrets().ClientTLS(); err != nil {
						return nil, err
					}
				}
				c, err := mysql.NewConnector(cfg)
				if err != nil {
					return nil, err
				}
				return sql.OpenDB(c), nil
			}
			db, err := open(s.DSN())
			if err != nil {
				t.Fatal(err)
			}
			var v, cipher string
			if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v); err != nil {
				t.Fatal(err)
			}
			_ = db.QueryRowContext(ctx, "SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME='Ssl_cipher'").Scan(&cipher)
			db.Close()
			t.Logf("version %s, TLS cipher %q", v, cipher)
			if !strings.Contains(v, "MariaDB") {
				t.Errorf("version %q: want MariaDB", v)
			}
			if tc.opts != nil {
				if cipher == "" {
					t.Error("WithTLS: connection without TLS")
				}
				bad, _ := open(strings.Replace(s.DSN(), s.Secrets().Password, "nope", 1))
				if err := bad.PingContext(ctx); err == nil || !strings.Contains(err.Error(), "Access denied") {
					t.Errorf("wrong password: %v, want Access denied", err)
				}
				bad.Close()
				plain, _ := sql.Open("mysql", strings.TrimSuffix(s.DSN(), "?tls=true"))
				if err := plain.PingContext(ctx); err == nil {
					t.Error("plain TCP connection accepted WithTLS")
				}
				plain.Close()
			}
			servercheck.StopGone(t, s, dir, pid)
		})
	}
}
