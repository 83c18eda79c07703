package selfcheck_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/harness/servers/servertest"
	"github.com/locksuite/locksuite/suite"
	"github.com/locksuite/locksuite/suite/local/localtest"
)

// badLocker wraps the Redis adapter with a fault of the code under test.
type badLocker struct {
	backends.Locker
	fault  string // "panic-acquire", "panic-release", "hang-acquire"
	closed chan struct{}
	once   sync.Once
}

func (b *badLocker) Acquire(ctx context.Context) (backends.Lease, error) {
	switch b.fault {
	case "panic-acquire":
		panic("boom in Acquire")
	case "hang-acquire":
		<-b.closed // ignores ctx; only Close ends it
		return nil, backends.ErrClosed
	}
	l, err := b.Locker.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return panicLease{l}, nil
}

func (b *badLocker) Close() error {
	b.once.Do(func() { close(b.closed) })
	return b.Locker.Close()
}

func (b *badLocker) Cleanup(ctx context.Context) error {
	return b.Locker.(backends.Cleaner).Cleanup(ctx)
}

type panicLease struct{ backends.Lease }

func (panicLease) Release(context.Context) error { panic("boom in Release") }

// TestBadLocker: a Locker that panics, or whose Acquire never returns
// (ignoring its context), ends each scenario with an error saying so,
// within a bound, and leaves nothing on the servers.
func TestBadLocker(t *testing.T) {
	ctx := servertest.Slow(t, "starts real servers", 8*time.Minute)
	env := localtest.Start(t, ctx, []string{"redis"})
	rc, ec := localtest.Redis(t, env), localtest.Etcd(t, env)

	base := env.Config("redis", false)
	base.Duration = time.Second
	bad := func(fault string) suite.Config {
		cfg := base
		cfg.NewLocker = func(ctx context.Context, c suite.Client) (backends.Locker, error) {
			if fault == "panic-newlocker" {
				panic("boom in NewLocker")
			}
			l, err := base.NewLocker(ctx, c)
			if err != nil {
				return nil, err
			}
			return &badLocker{Locker: l, fault: fault, closed: make(chan struct{})}, nil
		}
		return cfg
	}
	for _, tc := range []struct {
		fault, scenario, want string
	}{
		{"panic-acquire", suite.Baseline, "panic: boom in Acquire"},
		{"panic-acquire", suite.DeterministicPause, "panic: boom in Acquire"},
		{"panic-acquire", suite.ReleaseAfterExpiry, "panic: boom in Acquire"},
		{"panic-release", suite.Baseline, "panic: boom in Release"},
		{"panic-release", suite.DeterministicPause, "panic: boom in Release"},
		{"panic-newlocker", suite.Baseline, "panic: boom in NewLocker"},
		{"hang-acquire", suite.Baseline, "Locker.Acquire did not return after its context was done"},
	} {
		t.Run(tc.fault+"/"+tc.scenario, func(t *testing.T) {
			t0 := time.Now()
			row, err := suite.Run(ctx, bad(tc.fault), tc.scenario)
			took := time.Since(t0)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("row %+v, err %v: want an error containing %q", row, err, tc.want)
			}
			t.Logf("%v: %.300s", took.Round(time.Millisecond), err)
			if took > time.Minute {
				t.Errorf("took %v: the error must come within a bound", took)
			}
			// Nothing left: no Redis key once the leases expire (a lease
			// whose Release panicked expires), no counter in the etcd store.
			var keys []string
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				if keys, _ = rc.Keys(ctx, "*").Result(); len(keys) == 0 || time.Now().After(deadline) {
					break
				}
			}
			if len(keys) > 0 {
				t.Errorf("left in Redis: %v", keys)
			}
			if r, err := ec.Get(ctx, "locksuite/", clientv3.WithPrefix(), clientv3.WithKeysOnly()); err != nil || len(r.Kvs) > 0 {
				t.Errorf("left in the etcd store: %v %v", r.Kvs, err)
			}
		})
	}
}

// TestBadLockerInGinkgo runs suite.Test with a Locker whose Acquire panics
// in a child process (this test binary again, so that the failing specs do
// not fail this test), for the baseline and chaos-none (worker processes):
// each spec fails with the panic, the child exits within a bound, and no
// process of it is left.
func TestBadLockerInGinkgo(t *testing.T) {
	if os.Getenv("LOCKSUITE_BAD_GINKGO") == "1" {
		env := localtest.Start(t, context.Background(), []string{"redis"})
		cfg := env.Config("redis", false)
		base := cfg.NewLocker
		cfg.Duration, cfg.Chaos.Duration = time.Second, time.Second
		cfg.NewLocker = func(ctx context.Context, c suite.Client) (backends.Locker, error) {
			l, err := base(ctx, c)
			if err != nil {
				return nil, err
			}
			return &badLocker{Locker: l, fault: "panic-acquire", closed: make(chan struct{})}, nil
		}
		suite.Test(t, cfg)
		return
	}
	if testing.Short() {
		t.Skip("starts real servers")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestBadLockerInGinkgo$", "-ginkgo.label-filter=baseline || chaos-none", "-ginkgo.no-color")
	cmd.Env = append(os.Environ(), "LOCKSUITE_BAD_GINKGO=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		t.Fatalf("suite.Test with a panicking Locker still running after 2 minutes:\n%s", out.String())
	}
	took := time.Since(t0)
	o := out.String()
	t.Logf("%v, %v; %d specs mention the panic", took.Round(time.Millisecond), err, strings.Count(o, "panic: boom in Acquire"))
	if i := strings.Index(o, "Summarizing"); i >= 0 {
		t.Logf("%s", o[i:])
	}
	if err == nil {
		t.Errorf("suite.Test passed with a Locker that panics:\n%s", o)
	}
	for _, want := range []string{"[FAIL] redis lock, unfenced [It] keeps the counter equal to the acknowledged writes with no faults", "[FAIL] redis lock, unfenced [It] keeps the invariant with worker processes and no faults", "panic: boom in Acquire"} {
		if !strings.Contains(o, want) {
			t.Errorf("the child's output lacks %q:\n%s", want, o)
		}
	}
	if left := childrenOf(cmd.Process.Pid); len(left) > 0 {
		t.Errorf("processes of the child left: %v", left)
	}
}

// childrenOf lists processes whose parent is pid.
func childrenOf(pid int) []string {
	var out []string
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		s := string(b)
		fs := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fs) > 1 && fs[1] == strconv.Itoa(pid) {
			out = append(out, strings.TrimSpace(s))
		}
	}
	return out
}
