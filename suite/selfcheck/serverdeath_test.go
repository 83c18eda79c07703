package selfcheck_test

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/harness/servers/servertest"
	"github.com/locksuite/locksuite/suite"
	"github.com/locksuite/locksuite/suite/local"
	"github.com/locksuite/locksuite/suite/local/localtest"
)

// TestServerDiesMidRun kills (SIGKILL) the lock's server, then the counter
// store's, one second into a Redis baseline of a minute, and checks that the
// run ends long before the minute with an error that names the service that
// went away, instead of hanging or giving a verdict.
func TestServerDiesMidRun(t *testing.T) {
	ctx := servertest.Slow(t, "starts real servers", 5*time.Minute)
	for _, tc := range []struct {
		name string
		want string
	}{
		{"redis", "the lock service (redis at 127.0.0.1:"},
		{"postgres", "the counter store"},
	} {
		t.Run(tc.name+" killed", func(t *testing.T) {
			r := servertest.Start(t, ctx, servers.StartRedis)
			pg := servertest.Start(t, ctx, servers.StartPostgres)
			t.Setenv("REDIS_URL", "redis://"+r.Endpoint()+"/0")
			t.Setenv("DATABASE_URL", pg.Endpoint())
			env := localtest.Start(t, ctx, []string{"redis"}, local.WithStore("postgres"))
			victim := r.Pid()
			if tc.name == "postgres" {
				victim = pg.Pid()
			}
			cfg := env.Config("redis", false)
			cfg.Duration = time.Minute
			kill := time.AfterFunc(time.Second, func() { syscall.Kill(victim, syscall.SIGKILL) })
			defer kill.Stop()
			t0 := time.Now()
			row, err := suite.Run(ctx, cfg, suite.Baseline)
			took := time.Since(t0)
			t.Logf("after %v: %v", took.Round(time.Millisecond), err)
			if err == nil {
				t.Fatalf("the run ended with a verdict (%s: %s), not an error", row.Verdict, row.Reason)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "went away") {
				t.Errorf("error %q does not say that %s went away", err, tc.want)
			}
			if took > 30*time.Second {
				t.Errorf("the error took %v: the run hung on the dead server", took)
			}
		})
	}
}
