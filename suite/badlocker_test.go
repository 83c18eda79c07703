package suite_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/suite"
	"github.com/locksuite/locksuite/suite/local"
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
	if testing.Short() {
		t.Skip("starts real servers")
	}
	ctx := context.Background()
	env, err := local.Start(ctx, []string{"redis"})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	vars := map[string]string{}
	for _, kv := range env.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	ro, _ := goredis.ParseURL(vars["REDIS_URL"])
	rc := goredis.NewClient(ro)
	defer rc.Close()
	ec, err := clientv3.New(clientv3.Config{Endpoints: []string{vars["ETCDCTL_ENDPOINTS"]}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()

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
