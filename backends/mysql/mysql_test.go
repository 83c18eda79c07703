package mysql

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/internal/lockertest"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/harness/servers/servertest"
)

// dsn is the server the tests use: MYSQL_URL (a DSN) if set, else a
// MariaDB the test starts (servers.StartMariaDB).
var dsn string

func TestMain(m *testing.M) {
	os.Exit(lockertest.Main(m, "MYSQL_URL", &dsn, servers.StartMariaDB, (*servers.MariaDB).DSN))
}

// newLocker returns a Locker of key, through proxy p if not nil, closed and
// (for cleanup true) cleaned up at the test's end.
func newLocker(t *testing.T, key string, p *faults.Proxy, cleanup bool) backends.Locker {
	t.Helper()
	l, err := New(Config{DSN: dsn, Key: key, Dial: lockertest.DialVia(p)})
	return lockertest.Managed(t, l, err, cleanup)
}

func serverAddr(t *testing.T) string {
	c, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return c.Addr
}

func openDB(t *testing.T) *sql.DB {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// holder is the session id holding name, 0 if it is free.
func holder(t *testing.T, db *sql.DB, name string) uint64 {
	t.Helper()
	var id sql.NullInt64
	if err := db.QueryRow("SELECT IS_USED_LOCK(?)", name).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return uint64(id.Int64)
}

// TestExclusiveAndFences: see lockertest.ExclusiveAndFences.
func TestExclusiveAndFences(t *testing.T) {
	lockertest.ExclusiveAndFences(t, newLocker(t, t.Name(), nil, true), newLocker(t, t.Name(), nil, false))
}

// TestStalledHolderExpiry freezes the holder's connection (the fault
// proxy) ten times and measures when a second client gets the lock, from
// the holder's last command (see lockertest.StalledHolder).
func TestStalledHolderExpiry(t *testing.T) {
	key := t.Name()
	p := lockertest.Proxy(t, serverAddr(t))
	db := openDB(t)
	lockertest.StalledHolder(t, lockertest.Stalled{
		A: newLocker(t, key, p, true), B: newLocker(t, key, nil, false), Proxy: p,
		Renewed: func(s backends.Lease) time.Time { return time.Unix(0, s.(*lease).renewed.Load()) },
		Holds:   func(s backends.Lease) bool { return holder(t, db, key) == s.(*lease).id },
	})
}

// TestTerminate: KILL CONNECTION from outside frees the lock at once (a
// second client gets it), the holder's Lost fires, and its Release is
// harmless.
func TestTerminate(t *testing.T) {
	key := t.Name()
	a, b := newLocker(t, key, nil, true), newLocker(t, key, nil, false)
	sa := lockertest.Acquire(t, a, 5*time.Second)
	if err := sa.(backends.Terminator).Terminate(context.Background()); err != nil {
		t.Fatal(err)
	}
	sb := lockertest.Acquire(t, b, 500*time.Millisecond)
	lockertest.LostThenRelease(t, sa, 3*time.Second, "after KILL")
	if h := holder(t, openDB(t), key); h != sb.(*lease).id {
		t.Errorf("lock held by %d, want B's %d", h, sb.(*lease).id)
	}
	sb.Release(context.Background())
}

// TestReleaseOnlyOwn: RELEASE_LOCK from another session does not free the
// lock (what makes Release compare-safe).
func TestReleaseOnlyOwn(t *testing.T) {
	key := t.Name()
	a := newLocker(t, key, nil, true)
	sa := lockertest.Acquire(t, a, 5*time.Second)
	defer sa.Release(context.Background())
	db := openDB(t)
	var got sql.NullInt64
	if err := db.QueryRow("SELECT RELEASE_LOCK(?)", key).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if !got.Valid || got.Int64 != 0 {
		t.Errorf("RELEASE_LOCK from another session returned %v, want 0 (not ours)", got)
	}
	if h := holder(t, db, key); h != sa.(*lease).id {
		t.Errorf("lock held by %d after another session's RELEASE_LOCK, want %d", h, sa.(*lease).id)
	}
}

// TestCloseAndCleanup: Close frees a held lock and makes Acquire return
// ErrClosed; a key over 64 bytes works (hashed); Cleanup drops the fence
// table.
func TestCloseAndCleanup(t *testing.T) {
	key := strings.Repeat("k", 100)
	l, err := New(Config{DSN: dsn, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	s := lockertest.Acquire(t, l, 5*time.Second)
	db := openDB(t)
	if h := holder(t, db, lockName(key)); h != s.(*lease).id {
		t.Fatalf("hashed lock %q held by %d, want %d", lockName(key), h, s.(*lease).id)
	}
	if err := l.(backends.Cleaner).Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
	lockertest.Closes(t, l)
	if h := holder(t, db, lockName(key)); h != 0 {
		t.Errorf("lock still held by %d after Close", h)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
		l.(*locker).table).Scan(&n); err != nil || n != 0 {
		t.Errorf("fence table %s: %d left after Cleanup (%v)", l.(*locker).table, n, err)
	}
}

// TestBadConfig: bad input gets an error naming the fix, without the
// password, in bounded time.
func TestBadConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{DSN: dsn}, "Key is empty"},
		{Config{DSN: "u:s3cret@tcp(127.0.0.1:1)/", Key: "k"}, "names no database"},
		{Config{DSN: "u:s3cret@tcp(127.0.0.1:1/db", Key: "k"}, "bad DSN"},
		{Config{DSN: dsn, Key: "k", Lease: -time.Second}, "negative"},
	} {
		_, err := New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%+v: error %v, want one with %q and no password", tc.cfg, err, tc.want)
		}
	}
	lockertest.WholeSecondTTL(t, func(lease time.Duration) (backends.Locker, error) {
		return New(Config{DSN: dsn, Key: "k", Lease: lease})
	})
	c, _ := mysql.ParseDSN(dsn)
	c.Passwd = "wrong"
	c.User = "nobody"
	l, err := New(Config{DSN: c.FormatDSN(), Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t0 := time.Now()
	_, err = l.Acquire(ctx)
	if err == nil || !strings.Contains(err.Error(), "Access denied") || time.Since(t0) > 5*time.Second {
		t.Errorf("bad credentials: %v after %v, want Access denied at once", err, time.Since(t0))
	}
}

// TestDSN: a mysql:// URL becomes the driver's DSN with its user,
// password, address, database and parameters; a DSN passes through; a bad
// URL's error does not print its password.
func TestDSN(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"mysql://app:s3cret@db.example:3307/locks?tls=true", "app:s3cret@tcp(db.example:3307)/locks?tls=true"},
		{"mysql://app@/locks", "app@tcp(127.0.0.1:3306)/locks"},
		{"app:pw@tcp(127.0.0.1:3306)/x", "app:pw@tcp(127.0.0.1:3306)/x"},
	} {
		got, err := DSN(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("DSN(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if _, err := DSN("mysql://app:s3cret@db.example:33%zz/x"); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("bad URL: %v, want an error without the password", err)
	}
}

// TestAuthAndTLS: against a server that demands a password and TLS (test
// CA), the DSN's password and Config.TLS get the lock, through a fault
// proxy too (Addr: TLS still verifies the DSN's host); a wrong password is
// refused at once with the server's message.
func TestAuthAndTLS(t *testing.T) {
	ctx := servertest.Slow(t, "starts a second server", time.Minute)
	// Stopped after the lockers' cleanup.
	s := servertest.Start(t, ctx, servers.StartMariaDB, servers.WithAuth(), servers.WithTLS())
	tc, err := s.Secrets().ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	c, _ := mysql.ParseDSN(s.DSN())
	lockertest.AuthAndTLS(t, ctx, s.DSN(), s.Secrets().Password, c.Addr, "Access denied", func(endpoint, addr string) (backends.Locker, error) {
		return New(Config{DSN: endpoint, TLS: tc, Addr: addr, Key: t.Name()})
	})
}

// TestCutConnection: when the holder's connection is cut (the fault proxy
// closes both sides), the server ends the session at once and frees the
// lock, long before wait_timeout: a 5 s lease, and the second client is in
// within half of it (measured, logged).
func TestCutConnection(t *testing.T) {
	key := t.Name()
	p := lockertest.Proxy(t, serverAddr(t))
	la, err := New(Config{DSN: dsn, Key: key, Lease: 5 * time.Second, Dial: lockertest.DialVia(p)})
	a := lockertest.Managed(t, la, err, true)
	b := newLocker(t, key, nil, false)
	sa := lockertest.Acquire(t, a, 5*time.Second)
	p.Cut()
	t0 := time.Now()
	sb := lockertest.Acquire(t, b, 10*time.Second)
	d := time.Since(t0)
	t.Logf("connection cut: the lock was free after %v (lease 5s)", d.Round(time.Millisecond))
	if d > 2500*time.Millisecond {
		t.Errorf("the lock was free only %v after the cut: wait_timeout, not the cut, freed it", d)
	}
	p.Heal()
	lockertest.LostThenRelease(t, sa, 5*time.Second, "after the cut")
	sb.Release(context.Background())
}
