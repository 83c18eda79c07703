package servertest

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/internal/servercheck"
)

// FailoverCase is a row of Failover: start starts the cluster and returns
// it, its directory, and its processes that are not Members.
type FailoverCase struct {
	Name  string
	Start func(context.Context) (servers.Cluster, string, []int, error)
}

// Failover runs each case as a subtest: it starts the cluster, checks it
// is healthy with a leader, kills the leader, waits until a new one
// serves, restarts the killed member, and stops the cluster: no member
// process and no directory may be left.
func Failover(t *testing.T, cases []FailoverCase) {
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			ctx := Slow(t, "starts real clusters", 2*time.Minute)
			t0 := time.Now()
			c, dir, pids, err := tc.Start(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Stop()
			t.Logf("healthy at %s in %v", c.Endpoint(), time.Since(t0).Round(time.Millisecond))
			for _, m := range c.Members() {
				pids = append(pids, m.Pid())
			}
			if err := c.Healthy(ctx); err != nil {
				t.Fatalf("healthy after start: %v", err)
			}
			old, t1 := KillLeader(t, ctx, c)
			l, err := c.Leader(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if l == old {
				t.Fatalf("the killed member %s still leads", old.Name())
			}
			t.Logf("killed %s; %s leads, healthy after %v", old.Name(), l.Name(), time.Since(t1).Round(time.Millisecond))
			t2 := time.Now()
			if err := c.Restart(ctx); err != nil {
				t.Fatalf("restart %s: %v", old.Name(), err)
			}
			t.Logf("%s restarted, healthy with every member after %v", old.Name(), time.Since(t2).Round(time.Millisecond))
			pids = append(pids, old.Pid())
			servercheck.StopGone(t, c, dir, pids...)
		})
	}
}

// KillLeader kills c's leader and waits (a minute at most) until c is
// healthy again; it fails the test if it cannot. It returns the killed
// member and when it was killed.
func KillLeader(t testing.TB, ctx context.Context, c servers.Cluster) (*servers.Member, time.Time) {
	t.Helper()
	old, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := faults.WaitHealthy(ctx, time.Minute, c.Healthy); err != nil {
		t.Fatalf("after killing the leader %s: %v", old.Name(), err)
	}
	return old, killed
}

// Three is a FailoverCase's Start: a three-member cluster started with
// start, its directory dir's.
func Three[C servers.Cluster](start func(context.Context, int, ...servers.Option) (C, error), dir func(C) string) func(context.Context) (servers.Cluster, string, []int, error) {
	return func(ctx context.Context) (servers.Cluster, string, []int, error) {
		c, err := start(ctx, 3)
		if err != nil {
			return nil, "", nil, err
		}
		return c, dir(c), nil, nil
	}
}

// Attempt is a client's try at a secured server: err is what it got, want
// what the error must contain ("": it must succeed).
type Attempt struct {
	Name string
	Err  error
	Want string
}

// Report fails t for each attempt whose error is not what it wants.
func Report(t *testing.T, as []Attempt) {
	t.Helper()
	for _, a := range as {
		switch {
		case a.Want == "" && a.Err != nil:
			t.Errorf("%s: %v", a.Name, a.Err)
		case a.Want != "" && a.Err == nil:
			t.Errorf("%s: succeeded, want an error containing %q", a.Name, a.Want)
		case a.Want != "" && !strings.Contains(a.Err.Error(), a.Want):
			t.Errorf("%s: error %q does not contain %q", a.Name, a.Err, a.Want)
		}
	}
}

// CrashMode is a subtest of a secured server's test: the server started
// with Opts, or crashable (WithCrash) and crashed once before the checks
// (the credentials and TLS survive the restart).
type CrashMode struct {
	Name  string
	Opts  []servers.Option
	Crash bool
}

// CrashModes are the two modes of the server name with opts: as it is, and
// crashed (", crashed").
func CrashModes(name string, opts []servers.Option) []CrashMode {
	return []CrashMode{{name, opts, false}, {name + ", crashed", append(opts[:len(opts):len(opts)], servers.WithCrash()), true}}
}

// StartMode starts a server for t with start and mode's options (as
// servercheck.MustStart: it stops when t ends), and crashes it once if
// mode says so.
func StartMode[S Crashable](t *testing.T, ctx context.Context, mode CrashMode, start func(context.Context, ...servers.Option) (S, error)) S {
	t.Helper()
	s := servercheck.MustStart(t, func() (S, error) { return start(ctx, mode.Opts...) })
	if mode.Crash {
		if _, err := s.Crash(ctx, false); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// MustTLS is a client TLS configuration that trusts sec's CA.
func MustTLS(t *testing.T, sec servers.Secrets) *tls.Config {
	t.Helper()
	tc, err := sec.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	return tc
}
