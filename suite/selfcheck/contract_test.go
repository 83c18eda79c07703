package selfcheck_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/role"
	"github.com/locksuite/locksuite/harness/servers/servertest"
	"github.com/locksuite/locksuite/suite"
	"github.com/locksuite/locksuite/suite/local/localtest"
)

// TestMain serves the roles this test binary is run again in (a cluster
// member, a Kubernetes node: harness/role) before any test.
func TestMain(m *testing.M) { os.Exit(role.Main(m)) }

// promiseBreaker wraps the Redis adapter and breaks one promise of the
// contract.
type promiseBreaker struct {
	backends.Locker
	breaks string
	lease  time.Duration
	closed atomic.Int32
}

func (p *promiseBreaker) Acquire(ctx context.Context) (backends.Lease, error) {
	if p.closed.Load() > 0 {
		switch p.breaks {
		case "retry-after-close": // ci/example's old Locker: tries until ctx ends
			<-ctx.Done()
			return nil, ctx.Err()
		case "wrong-error-after-close":
			return nil, errors.New("redis: client is closed")
		}
	}
	l, err := p.Locker.Acquire(ctx)
	if err != nil {
		if p.breaks == "slow-cancel" && ctx.Err() != nil {
			time.Sleep(3 * time.Second) // returns 3 s after its context ends
		}
		return nil, err
	}
	if p.breaks == "release-errors" {
		return erringLease{l, time.Now().Add(p.lease)}, nil
	}
	return l, nil
}

func (p *promiseBreaker) Close() error {
	if p.closed.Add(1) > 1 && p.breaks == "close-twice-errors" {
		return errors.New("already closed")
	}
	if p.closed.Load() > 1 {
		return nil
	}
	return p.Locker.Close()
}

func (p *promiseBreaker) Cleanup(ctx context.Context) error {
	return p.Locker.(backends.Cleaner).Cleanup(ctx)
}

// erringLease's Release fails once the lease has expired.
type erringLease struct {
	backends.Lease
	expires time.Time
}

func (e erringLease) Release(ctx context.Context) error {
	err := e.Lease.Release(ctx)
	if time.Now().After(e.expires) {
		return errors.New("lock not held")
	}
	return err
}

// TestContract: the contract spec keeps the Redis adapter, and finds each
// broken promise of a Locker that breaks one, with a message naming it.
func TestContract(t *testing.T) {
	ctx := servertest.Slow(t, "starts real servers", 2*time.Minute)
	env := localtest.Start(t, ctx, []string{"redis"})
	base := env.Config("redis", false)
	for _, tc := range []struct{ breaks, want string }{
		{"", ""},
		{"retry-after-close", "Acquire after Close did not return backends.ErrClosed: it was still trying when its context ended after 2s"},
		{"wrong-error-after-close", `Acquire after Close returned "redis: client is closed", which does not wrap backends.ErrClosed`},
		{"slow-cancel", "Acquire did not return within 2s of its context's cancel"},
		{"release-errors", `Release of an expired lease returned "lock not held" (it must return nil when the lock is no longer this lease's)`},
		{"close-twice-errors", `a second Close returned "already closed"`},
	} {
		t.Run(tc.breaks, func(t *testing.T) {
			cfg := base
			cfg.NewLocker = func(ctx context.Context, c suite.Client) (backends.Locker, error) {
				l, err := base.NewLocker(ctx, c)
				if err != nil {
					return nil, err
				}
				return &promiseBreaker{Locker: l, breaks: tc.breaks, lease: c.Lease}, nil
			}
			t0 := time.Now()
			row, err := suite.Run(ctx, cfg, suite.Contract)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%v: %s %s", time.Since(t0).Round(time.Millisecond), row.Verdict, row.Reason)
			switch {
			case tc.want == "" && row.Verdict != report.Kept:
				t.Errorf("verdict %s, want kept", row.Verdict)
			case tc.want != "" && (row.Verdict != report.Broken || !strings.Contains(row.Reason, tc.want)):
				t.Errorf("verdict %s, reason %q: want broken, naming %q", row.Verdict, row.Reason, tc.want)
			}
		})
	}
}
