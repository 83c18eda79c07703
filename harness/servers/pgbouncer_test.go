package servers

import (
	"context"
	"github.com/locksuite/locksuite/internal/servercheck"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/internal/wait"
)

// waitFor polls cond every 10 ms until it holds or ctx is done.
func waitFor(ctx context.Context, cond func() bool) error {
	for !cond() {
		if err := wait.For(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// TestPgBouncer starts PgBouncer in front of its Postgres in each pool mode
// and asks it what a session advisory lock relies on: that a client's
// statements run in one server session. Client 1 takes the lock; client 2,
// on a connection of its own, tries for it. In session pooling client 2 is
// refused, as without the pooler. In transaction pooling client 2's
// statement runs on the one idle server connection, the one client 1's ran
// on and that holds the lock, and is granted it at once (advisory locks are
// re-entrant per session); client 1's unlock then runs there too. A
// pgbouncer that exits on its own is restarted (PgBouncer.Restarts). Stop
// leaves neither process nor directory behind.
func TestPgBouncer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real servers")
	}
	for _, tc := range []struct {
		mode    PoolMode
		granted bool // client 2's try while client 1 holds the lock
	}{{PoolSession, false}, {PoolTransaction, true}} {
		t.Run(string(tc.mode), func(t *testing.T) {
			s := servercheck.TimedStart(t, func(ctx context.Context) (*PgBouncer, error) { return StartPgBouncer(ctx, tc.mode, 0) })
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			connect := func() *pgx.Conn {
				c, err := pgx.Connect(ctx, s.Endpoint())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close(context.Background()) })
				return c
			}
			one, two := connect(), connect()
			var pid1, pid2 int32
			if err := one.QueryRow(ctx, "SELECT pg_backend_pid() FROM (SELECT pg_advisory_lock(4242)) l").Scan(&pid1); err != nil {
				t.Fatal(err)
			}
			var got bool
			if err := two.QueryRow(ctx, "SELECT pg_try_advisory_lock(4242), pg_backend_pid()").Scan(&got, &pid2); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s pooling: client 1's lock on backend %d; client 2's try on backend %d: granted %v", tc.mode, pid1, pid2, got)
			if got != tc.granted {
				t.Errorf("%s pooling: client 2's pg_try_advisory_lock while client 1 holds the lock returned %v, want %v", tc.mode, got, tc.granted)
			}
			if got != (pid1 == pid2) {
				t.Errorf("granted %v, but the backends were %d and %d", got, pid1, pid2)
			}
			// A pgbouncer that exits on its own is restarted.
			pid := s.Pid()
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if err := waitFor(ctx, func() bool { return s.Restarts() == 1 && s.Pid() != pid }); err != nil {
				t.Fatalf("pgbouncer killed from outside was not restarted: %d restarts", s.Restarts())
			}
			if err := faults.WaitHealthy(ctx, 10*time.Second, func(ctx context.Context) error {
				c, err := pgx.Connect(ctx, s.Endpoint())
				if err == nil {
					c.Close(ctx)
				}
				return err
			}); err != nil {
				t.Fatalf("pgbouncer restarted but not serving: %v", err)
			}
			pg := s.Postgres()
			servercheck.StopGone(t, s, s.dir, s.Pid(), pg.Pid())
			if _, err := os.Stat(pg.dir); !os.IsNotExist(err) {
				t.Errorf("Postgres's directory %s still exists after Stop (%v)", pg.dir, err)
			}
		})
	}
}
