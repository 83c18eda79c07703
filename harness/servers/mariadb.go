package servers

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/locksuite/locksuite/internal/spawn"
)

// MariaDB is a throwaway MariaDB server started by StartMariaDB.
type MariaDB struct {
	base
	dsn    string
	socket string
}

// Name is "mysql", the backend this server is for.
func (s *MariaDB) Name() string { return "mysql" }

// Endpoint is a go-sql-driver/mysql DSN without the password:
// locksuite@tcp(127.0.0.1:PORT)/locksuite (see DSN and Secrets).
func (s *MariaDB) Endpoint() string { return s.dsn }

// DSN is Endpoint with the password in it (WithAuth).
func (s *MariaDB) DSN() string {
	if s.secrets.Password == "" {
		return s.dsn
	}
	return strings.Replace(s.dsn, s.secrets.User+"@", s.secrets.User+":"+s.secrets.Password+"@", 1)
}

var mariadbDirs = []string{"/usr/sbin", "/usr/libexec", "/usr/local/mysql/bin", "/usr/local/mysql/scripts"}

// StartMariaDB makes a new data directory with mariadb-install-db in a
// temporary directory and starts mariadbd on a free loopback port
// (bind-address 127.0.0.1) and a Unix socket of its own in that directory,
// with the binary log off and InnoDB's log flushed once a second (a
// throwaway server needs no durability), or at each commit as packaged
// WithDurability(DurabilityPackaged). As root it runs both as the
// "mysql" user, which Debian's mariadb-server package creates: mariadbd
// refuses to run as root, and switching user itself (--user) would clear
// the parent-death signal that ends it with a killed coordinator.
//
// It creates the database "locksuite" and the user locksuite@127.0.0.1 with
// every privilege (KILL of other sessions included), and no password; the
// endpoint is a go-sql-driver/mysql DSN for that user and database.
// WithAuth gives the user a random password (mysql_native_password);
// WithTLS gives the server a certificate of the test CA and makes it refuse
// plain TCP connections (require_secure_transport), so that a client needs
// Secrets.ClientTLS. The harness itself talks to the server as root over
// the Unix socket.
func StartMariaDB(ctx context.Context, opts ...Option) (*MariaDB, error) {
	o := Apply(opts)
	fail := func(err error, fix string) error { return &Unavailable{"mysql", err, FixFUSE(err, fix)} }
	if err := o.CheckDurability("mysql"); err != nil {
		return nil, err
	}
	const install = "install MariaDB's server (apt-get install mariadb-server), or name a server with MYSQL_URL"
	mariadbd, err := lookPath("mariadbd", mariadbDirs...)
	if err != nil {
		if mariadbd, err = lookPath("mysqld", mariadbDirs...); err != nil {
			return nil, fail(err, install)
		}
	}
	installDB, err := lookPath("mariadb-install-db", mariadbDirs...)
	if err != nil {
		if installDB, err = lookPath("mysql_install_db", mariadbDirs...); err != nil {
			return nil, fail(err, install)
		}
	}
	cred, dir, dd, err := serviceDataDir("mysql", "mariadb", "mysql", "mariadb-server", o.Lazy)
	if err != nil {
		return nil, err
	}
	uid, gid := Owner(cred)
	// The server's settings, for the bootstrap and the server alike
	// (--no-defaults: no /etc/mysql/my.cnf of the machine's own server).
	// --tmpdir: the server's own directory, not $TMPDIR, which may be
	// private to this process's user (a test binary's), not the mysql user's.
	common := []string{"--no-defaults", "--tmpdir=" + dir, "--skip-name-resolve", "--skip-log-bin",
		"--innodb-buffer-pool-size=32M", "--innodb-log-file-size=8M"}
	if o.Durability == DurabilityHarness {
		common = append(common, "--innodb-flush-log-at-trx-commit=0")
	}
	// The bootstrap writes to disk (the mount's backing directory), not
	// through a lazyfs mount: a power loss is not meant to undo it.
	out, err := RunAs(ctx, cred, dir, installDB, append(common[:1:1], append([]string{
		"--auth-root-authentication-method=normal", "--skip-test-db", "--datadir=" + dd.setup}, common[1:]...)...)...)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fail(fmt.Errorf("%s: %v: %s", filepath.Base(installDB), err, spawn.Tail(out, 600)), "check that "+installDB+" works")
	}
	port, err := FreePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	sock := filepath.Join(dir, "mysqld.sock")
	args := append(common, "--datadir="+dd.path, "--port="+strconv.Itoa(port), "--bind-address=127.0.0.1", "--socket="+sock,
		"--pid-file="+filepath.Join(dir, "mysqld.pid"), "--max-connections=500", "--skip-networking=0")
	var secrets Secrets
	params := ""
	if o.TLS {
		certs, err := NewPKI(dir, uid, gid)
		if err != nil {
			os.RemoveAll(dir)
			return nil, fail(err, "a writable temporary directory")
		}
		certs.SetSecrets(&secrets)
		args = append(args, "--ssl-ca="+certs.CA, "--ssl-cert="+certs.ServerCert, "--ssl-key="+certs.ServerKey,
			"--require-secure-transport=ON")
		// The adapter and the driver need the CA: Secrets.ClientTLS.
		params = "?tls=true"
	}
	secrets.User = "locksuite"
	if o.Auth {
		secrets.Password = RandomSecret()
	}
	s := &MariaDB{base: base{dir: dir, data: dd, sig: syscall.SIGTERM, grace: 10 * time.Second, secrets: secrets,
		addr: fmt.Sprintf("127.0.0.1:%d", port)},
		socket: sock, dsn: fmt.Sprintf("locksuite@tcp(127.0.0.1:%d)/locksuite%s", port, params)}
	if !o.Auth {
		s.secrets.User = ""
	}
	argv := append([]string{mariadbd}, args...)
	start := func() (*Proc, error) { return Launch(spawn.Start, "mariadbd", dir, cred, nil, argv...) }
	err = s.run(ctx, "mariadbd", 30*time.Second, start, func(ctx context.Context) error {
		db, err := s.rootDB()
		if err != nil {
			return err
		}
		defer db.Close()
		return db.PingContext(ctx)
	})
	if err == nil {
		err = s.setup(ctx, secrets.Password)
	}
	if err == nil {
		err = s.Sync() // the database and user setup made
	}
	if err != nil {
		s.Stop()
		return nil, fail(err, "see the log above")
	}
	return s, nil
}

// rootDB is root over the server's Unix socket (no password: the
// bootstrap's "normal" root authentication).
func (s *MariaDB) rootDB() (*sql.DB, error) {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "unix", s.socket
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(c), nil
}

// setup makes the database and the user the endpoint names.
func (s *MariaDB) setup(ctx context.Context, password string) error {
	db, err := s.rootDB()
	if err != nil {
		return err
	}
	defer db.Close()
	for _, q := range []string{
		"CREATE DATABASE locksuite",
		"CREATE USER 'locksuite'@'127.0.0.1' IDENTIFIED BY " + quoteSQL(password),
		"GRANT ALL PRIVILEGES ON *.* TO 'locksuite'@'127.0.0.1'",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("setup: %s: %w", strings.Fields(q)[0]+" "+strings.Fields(q)[1], err)
		}
	}
	return nil
}

// quoteSQL quotes s as a MySQL string literal (s is a random secret of
// letters and digits; the escapes are for safety only).
func quoteSQL(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `'`, `''`)
	return "'" + r.Replace(s) + "'"
}
