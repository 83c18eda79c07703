package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/servers"
)

// dsn is the server the tests use: MYSQL_URL (a DSN) if set, else a
// MariaDB the test starts (servers.StartMariaDB).
var dsn string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if dsn = os.Getenv("MYSQL_URL"); dsn == "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		t0 := time.Now()
		s, err := servers.StartMariaDB(ctx)
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer s.Stop()
		fmt.Fprintf(os.Stderr, "mariadb started in %v\n", time.Since(t0).Round(time.Millisecond))
		dsn = s.DSN()
	}
	return m.Run()
}

// newLocker returns a Locker of key, through proxy p if not nil, closed and
// (for cleanup true) cleaned up at the test's end.
func newLocker(t *testing.T, key string, p *faults.Proxy, cleanup bool) backends.Locker {
	t.Helper()
	cfg := Config{DSN: dsn, Key: key}
	if p != nil {
		cfg.Dial = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", p.Addr())
		}
	}
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cleanup {
			if err := l.(backends.Cleaner).Cleanup(context.Background()); err != nil {
				t.Error(err)
			}
		}
		l.Close()
	})
	return l
}

func acquire(t *testing.T, l backends.Locker, d time.Duration) backends.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	s, err := l.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
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

// TestExclusiveAndFences: while A holds the lock B cannot get it, and
// gets it once A releases; fences strictly increase across grants of
// either client; Acquire honours ctx while it waits.
func TestExclusiveAndFences(t *testing.T) {
	key := t.Name()
	a, b := newLocker(t, key, nil, true), newLocker(t, key, nil, false)
	var last uint64
	for i := range 3 {
		sa := acquire(t, a, 5*time.Second)
		if sa.Fence() <= last {
			t.Fatalf("grant %d: fence %d after %d", i, sa.Fence(), last)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		t0 := time.Now()
		_, err := b.Acquire(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("B acquired while A holds (err %v)", err)
		}
		if d := time.Since(t0); d > 2*time.Second {
			t.Errorf("Acquire with a 300ms ctx returned after %v", d)
		}
		done := make(chan backends.Lease)
		go func() {
			s, err := b.Acquire(context.Background())
			if err != nil {
				t.Error(err)
			}
			done <- s
		}()
		time.Sleep(50 * time.Millisecond)
		if err := sa.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		sb := <-done
		if sb == nil {
			return
		}
		if sb.Fence() <= sa.Fence() {
			t.Fatalf("B's fence %d not above A's %d", sb.Fence(), sa.Fence())
		}
		last = sb.Fence()
		if err := sb.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := sa.Release(context.Background()); err != nil {
			t.Errorf("second Release: %v", err)
		}
	}
}

// TestStalledHolderExpiry freezes the holder's connection (the fault
// proxy) ten times and measures, from the holder's last command to the
// server, when a second client gets the lock: never before the lease
// (wait_timeout), and within twice it. The holder learns of the loss
// (Lost) once it runs again, and its late Release leaves the new holder's
// lock alone.
func TestStalledHolderExpiry(t *testing.T) {
	key := t.Name()
	p, err := faults.NewProxy(serverAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() }) // after the lockers' cleanup, which dials through it
	a, b := newLocker(t, key, p, true), newLocker(t, key, nil, false)
	db := openDB(t)
	runs := 10
	if testing.Short() {
		runs = 1
	}
	var expiries []time.Duration
	for range runs {
		sa := acquire(t, a, 5*time.Second).(*lease)
		time.Sleep(500 * time.Millisecond) // a renewal or so
		p.Freeze()
		sb := acquire(t, b, 10*time.Second)
		got := time.Now()
		renewed := time.Unix(0, sa.renewed.Load())
		exp := got.Sub(renewed)
		expiries = append(expiries, exp)
		if exp < a.(*locker).lease {
			t.Errorf("the lock was free %v after the holder's last command, before its lease %v", exp, a.(*locker).lease)
		}
		if exp > 2*a.(*locker).lease {
			t.Errorf("the lock was free only %v after the holder's last command (lease %v)", exp, a.(*locker).lease)
		}
		if sb.Fence() <= sa.Fence() {
			t.Errorf("fence %d after %d", sb.Fence(), sa.Fence())
		}
		p.Thaw()
		select {
		case <-sa.Lost():
		case <-time.After(5 * time.Second):
			t.Error("Lost did not fire after the session ended")
		}
		if err := sa.Release(context.Background()); err != nil {
			t.Errorf("late Release: %v", err)
		}
		if h := holder(t, db, key); h != sb.(*lease).id {
			t.Errorf("after A's late Release the lock is held by %d, want B's session %d", h, sb.(*lease).id)
		}
		if err := sb.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	sort.Slice(expiries, func(i, j int) bool { return expiries[i] < expiries[j] })
	t.Logf("lease %v: expiry after the last command, %d runs: min %v median %v max %v", a.(*locker).lease, len(expiries),
		expiries[0].Round(time.Millisecond), expiries[len(expiries)/2].Round(time.Millisecond), expiries[len(expiries)-1].Round(time.Millisecond))
}

// TestTerminate: KILL CONNECTION from outside frees the lock at once (a
// second client gets it), the holder's Lost fires, and its Release is
// harmless.
func TestTerminate(t *testing.T) {
	key := t.Name()
	a, b := newLocker(t, key, nil, true), newLocker(t, key, nil, false)
	sa := acquire(t, a, 5*time.Second)
	if err := sa.(backends.Terminator).Terminate(context.Background()); err != nil {
		t.Fatal(err)
	}
	sb := acquire(t, b, 500*time.Millisecond)
	select {
	case <-sa.(backends.LossNotifier).Lost():
	case <-time.After(3 * time.Second):
		t.Error("Lost did not fire after KILL")
	}
	if err := sa.Release(context.Background()); err != nil {
		t.Errorf("Release after KILL: %v", err)
	}
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
	sa := acquire(t, a, 5*time.Second)
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
	s := acquire(t, l, 5*time.Second)
	db := openDB(t)
	if h := holder(t, db, lockName(key)); h != s.(*lease).id {
		t.Fatalf("hashed lock %q held by %d, want %d", lockName(key), h, s.(*lease).id)
	}
	if err := l.(backends.Cleaner).Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(context.Background()); !errors.Is(err, backends.ErrClosed) {
		t.Errorf("Acquire after Close: %v, want ErrClosed", err)
	}
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
		{Config{DSN: dsn, Key: "k", Lease: 500 * time.Millisecond}, "resolution"},
	} {
		_, err := New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%+v: error %v, want one with %q and no password", tc.cfg, err, tc.want)
		}
	}
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
