package servers

import (
	"context"
	"github.com/locksuite/locksuite/internal/servercheck"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
)

// TestStartStop starts each server, checks it is healthy (Start waits for
// that), stops it, and checks that its process and directory are gone.
func TestStartStop(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real servers")
	}
	type started interface {
		Server
		Pid() int
	}
	for _, tc := range []struct {
		name  string
		start func(context.Context) (started, error)
		dir   func(Server) string
	}{
		{"redis", func(ctx context.Context) (started, error) { return StartRedis(ctx) }, func(s Server) string { return s.(*Redis).dir }},
		{"postgres", func(ctx context.Context) (started, error) { return StartPostgres(ctx) }, func(s Server) string { return s.(*Postgres).dir }},
		{"consul", func(ctx context.Context) (started, error) { return StartConsul(ctx) }, func(s Server) string { return s.(*Consul).dir }},
		{"zookeeper", func(ctx context.Context) (started, error) { return StartZooKeeper(ctx) }, func(s Server) string { return s.(*ZooKeeper).dir }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := servercheck.TimedStart(t, tc.start)
			servercheck.StopGone(t, s, tc.dir(s), s.Pid())
		})
	}
}

// TestRedisClockJump checks that the harness's redis-server runs under
// libfaketime and that its key expiry follows the wall clock: a key with a
// 30 s PX is gone once the server's clock jumps a minute, though only
// milliseconds passed.
func TestRedisClockJump(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := servercheck.MustStart(t, func() (*Redis, error) { return StartRedis(ctx) })
	if r.Clock() == nil {
		t.Fatal("redis-server is not under libfaketime: install Debian's faketime package (ci/setup.sh does)")
	}
	c := goredis.NewClient(&goredis.Options{Addr: r.Endpoint()})
	defer c.Close()
	before, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "k", "v", 30*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Clock().Jump(time.Minute); err != nil {
		t.Fatal(err)
	}
	after, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if d := after.Sub(before); d < time.Minute {
		t.Fatalf("the server's TIME moved %v after a one-minute jump", d)
	}
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("a key with 30s to live still exists after the clock jumped a minute (%d, %v)", n, err)
	}
}

// TestStopContinuesAStoppedServer: a server left stopped by a fault
// (SIGSTOP) is still stopped and removed by Stop.
func TestStopContinuesAStoppedServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real server")
	}
	r := servercheck.MustStart(t, func() (*Redis, error) { return StartRedis(context.Background()) })
	pid, dir := r.Pid(), r.dir
	if err := syscall.Kill(-pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	servercheck.StopGone(t, r, dir, pid)
}

// TestPostgresIdleTimeoutIgnoresClockJump measures what the clock-jump
// scenario's skip reason for Postgres says: with postgres under
// libfaketime, a session holding an advisory lock with a 2 s
// idle_session_timeout keeps it across a one-minute jump of the server's
// wall clock, and loses it once it has really been idle for the timeout.
func TestPostgresIdleTimeoutIgnoresClockJump(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := StartPostgres(ctx, withFakeClock())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	holder, err := pgx.Connect(ctx, s.Endpoint()+"&idle_session_timeout=2000")
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	other, err := pgx.Connect(ctx, s.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	var before, after time.Time
	if err := other.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&before); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now() // the session goes idle, arming its timeout, after this
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock(42)"); err != nil {
		t.Fatal(err)
	}
	if err := s.clock.Jump(time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := other.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&after); err != nil {
		t.Fatal(err)
	}
	if d := after.Sub(before); d < time.Minute {
		t.Fatalf("the server's clock moved %v after a one-minute jump", d)
	}
	held := func() bool {
		var n int
		if err := other.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 42 AND granted").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	time.Sleep(500 * time.Millisecond)
	if !held() {
		if time.Since(t0) < 2*time.Second {
			t.Fatalf("the lock was gone %v after the jump, before its 2s idle timeout: idle_session_timeout follows the wall clock", time.Since(t0).Round(time.Millisecond))
		}
		t.Skipf("the machine was too slow to look within the timeout (%v)", time.Since(t0))
	}
	for held() {
		if time.Since(t0) > 20*time.Second {
			t.Fatal("the idle session still holds its lock 20s later: idle_session_timeout never fired under libfaketime")
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("lock held across the jump, freed %v after it was taken (timeout 2s)", time.Since(t0).Round(time.Millisecond))
}

// secureVariants are the options a server test runs with: none, and an
// enforced password with TLS.
var secureVariants = []struct {
	name string
	opts []Option
}{{"plain", nil}, {"auth+tls", []Option{WithAuth(), WithTLS()}}}
