package selfcheck_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/internal/wait"
	"github.com/locksuite/locksuite/suite"
	"github.com/locksuite/locksuite/suite/local/localtest"
)

// delRelease is the Redis lock with the classic release bug: DEL without
// the ownership compare, so a holder whose lease expired deletes the next
// holder's lock.
type delRelease struct {
	backends.Locker
	c   *goredis.Client
	key string
}

func (d *delRelease) Acquire(ctx context.Context) (backends.Lease, error) {
	l, err := d.Locker.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return &delLease{l, d}, nil
}

func (d *delRelease) Close() error { d.c.Close(); return d.Locker.Close() }

type delLease struct {
	backends.Lease
	d *delRelease
}

func (l *delLease) Release(ctx context.Context) error { return l.d.c.Del(ctx, l.d.key).Err() }

// constFence is a lock whose fencing token does not increase: every grant
// carries the same token, as a lock that reuses a counter value would.
type constFence struct{ backends.Locker }

func (c constFence) Acquire(ctx context.Context) (backends.Lease, error) {
	l, err := c.Locker.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return constLease{l}, nil
}

type constLease struct{ backends.Lease }

func (constLease) Fence() uint64 { return 7 }

// blindStore says it is fenced but writes (and reads) unconditionally.
type blindStore struct{ fencing.Store }

func (blindStore) Fenced() bool { return true }

// renewMode is how renewingRedis keeps its lease alive.
type renewMode int

const (
	noRenew      renewMode = iota
	renewCompare           // PEXPIRE only while the key holds this lease's token; stop when it does not
	renewBlind             // SET key token PX: renews, and takes the lock back after losing it
)

// renewingRedis is a small Redis lock for the mutants: SET NX PX (or, with
// nx false, SET PX: a grant without NX), an INCR fence, compare-and-delete
// release, and optionally a renewal every lease/3.
type renewingRedis struct {
	c     *goredis.Client
	key   string
	lease time.Duration
	nx    bool
	renew renewMode
}

var grantScript = goredis.NewScript(`
if ARGV[3] == "nx" then
  if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
else
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return redis.call('INCR', KEYS[2])`)

var renewScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`)

var cadScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)

func (r *renewingRedis) TTL() time.Duration { return r.lease }
func (r *renewingRedis) Renews() bool       { return r.renew != noRenew }
func (r *renewingRedis) Close() error       { return r.c.Close() }
func (r *renewingRedis) Cleanup(ctx context.Context) error {
	return r.c.Del(ctx, r.key+":fence").Err()
}

func (r *renewingRedis) Acquire(ctx context.Context) (backends.Lease, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	nx := "plain"
	if r.nx {
		nx = "nx"
	}
	for {
		fence, err := grantScript.Run(ctx, r.c, []string{r.key, r.key + ":fence"}, token, r.lease.Milliseconds(), nx).Int64()
		if err != nil {
			return nil, fmt.Errorf("acquire: %w", err)
		}
		if fence > 0 {
			l := &renewingLease{r: r, token: token, fence: uint64(fence), stop: make(chan struct{}), done: make(chan struct{})}
			go l.keepAlive()
			return l, nil
		}
		if err := wait.For(ctx, 5*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

type renewingLease struct {
	r          *renewingRedis
	token      string
	fence      uint64
	stop, done chan struct{}
	released   bool
}

func (l *renewingLease) Fence() uint64 { return l.fence }

func (l *renewingLease) keepAlive() {
	defer close(l.done)
	if l.r.renew == noRenew {
		return
	}
	every(l.stop, l.r.lease/3, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if l.r.renew == renewBlind {
			_ = l.r.c.Set(ctx, l.r.key, l.token, l.r.lease).Err()
			return true
		}
		n, err := renewScript.Run(ctx, l.r.c, []string{l.r.key}, l.token, l.r.lease.Milliseconds()).Int64()
		return err != nil || n != 0 // lost: a correct renewal gives up
	})
}

// every calls f every d until stop is closed or f returns false.
func every(stop <-chan struct{}, d time.Duration, f func() bool) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if !f() {
			return
		}
	}
}

// Release stops the renewal, waiting for one in flight, then deletes the
// lock if it still holds this lease's token.
func (l *renewingLease) Release(ctx context.Context) error {
	if !l.released {
		l.released = true
		close(l.stop)
		<-l.done
	}
	return cadScript.Run(ctx, l.r.c, []string{l.r.key}, l.token).Err()
}

// mutantRuns is how many times each mutant runs; it must be caught in every
// one.
const mutantRuns = 5

// TestMutantsAreCaught: the specs fail for locks and stores broken on
// purpose, every time, so that a "kept" means something; and each mutant's
// correct twin is kept every time, so that "broken" does too. The mutation
// table (mutant, scenario, runs, caught, linearizability) is logged.
func TestMutantsAreCaught(t *testing.T) {
	env := localtest.Start(t, context.Background(), []string{"redis"})
	if err := env.Unavailable["redis"]; err != nil {
		t.Fatal(err)
	}
	unfenced, fenced := env.Config("redis", false), env.Config("redis", true)
	addr := env.Endpoint("redis")
	unfenced.Duration, fenced.Duration = time.Second, time.Second
	wrap := func(base suite.Config, f func(l backends.Locker, c suite.Client) backends.Locker) suite.Config {
		cfg := base
		cfg.NewLocker = func(ctx context.Context, c suite.Client) (backends.Locker, error) {
			l, err := base.NewLocker(ctx, c)
			if err != nil {
				return nil, err
			}
			return f(l, c), nil
		}
		return cfg
	}
	own := func(base suite.Config, nx bool, mode renewMode) suite.Config {
		cfg := base
		cfg.NewLocker = func(ctx context.Context, c suite.Client) (backends.Locker, error) {
			return &renewingRedis{c: goredis.NewClient(&goredis.Options{Addr: addr, Dialer: c.Dial}), key: c.Key, lease: c.Lease, nx: nx, renew: mode}, nil
		}
		return cfg
	}
	delMutant := wrap(unfenced, func(l backends.Locker, c suite.Client) backends.Locker {
		return &delRelease{Locker: l, c: goredis.NewClient(&goredis.Options{Addr: addr, Dialer: c.Dial}), key: c.Key}
	})
	constMutant := wrap(fenced, func(l backends.Locker, _ suite.Client) backends.Locker { return constFence{l} })
	blindMutant := fenced
	blindMutant.NewStore = func(ctx context.Context, name string, _ bool) (fencing.Store, error) {
		s, err := fenced.NewStore(ctx, name, false)
		if err != nil {
			return nil, err
		}
		return blindStore{s}, nil
	}

	runMutants(t, []mutant{
		{"grant without NX (SET PX)", own(unfenced, false, noRenew), suite.Baseline, report.Broken},
		{"  twin: SET NX PX", own(unfenced, true, noRenew), suite.Baseline, report.Kept},
		{"release without the ownership compare (DEL)", delMutant, suite.ReleaseAfterExpiry, report.Broken},
		{"  twin: the redis adapter (compare-and-delete)", unfenced, suite.ReleaseAfterExpiry, report.Kept},
		{"fence that does not increase (always 7)", constMutant, suite.DeterministicPause, report.Broken},
		{"  twin: the redis adapter (INCR fence)", fenced, suite.DeterministicPause, report.Kept},
		{"renewal that ignores a lost lease (SET PX)", own(unfenced, true, renewBlind), suite.ReleaseAfterExpiry, report.Broken},
		{"  twin: renewal by compare, stops when lost", own(unfenced, true, renewCompare), suite.ReleaseAfterExpiry, report.Kept},
		{"fenced store that does not compare", blindMutant, suite.DeterministicPause, report.Broken},
		{"lock that grants everyone (the control)", unfenced, suite.Control, report.Broken},
	})
}

// mutant is a lock or store broken on purpose (or its correct twin), the
// scenario that must catch it, and the verdict every run must reach.
type mutant struct {
	name     string
	cfg      suite.Config
	scenario string
	want     report.Verdict
}

// runMutants runs each mutant mutantRuns times and fails a run whose
// verdict is not the one it wants; it logs the mutation table (mutant,
// scenario, runs, caught, linearizability).
func runMutants(t *testing.T, mutants []mutant) {
	type row struct{ name, scenario, want, lin string }
	var table []row
	for _, tc := range mutants {
		t.Run(strings.TrimSpace(tc.name), func(t *testing.T) {
			lins := map[string]int{}
			got := 0
			for i := range mutantRuns {
				r, err := suite.Run(context.Background(), tc.cfg, tc.scenario)
				if err != nil {
					t.Fatal(err)
				}
				if r.Verdict != tc.want {
					t.Errorf("run %d of %d: verdict %s, want %s (%s)", i+1, mutantRuns, r.Verdict, tc.want, r.Reason)
					continue
				}
				got++
				if r.Linearizable != "" {
					lins[r.Linearizable]++
				}
			}
			lin := "-"
			if len(lins) > 0 {
				var parts []string
				for k, n := range lins {
					parts = append(parts, fmt.Sprintf("%s %d/%d", k, n, mutantRuns))
				}
				lin = strings.Join(parts, ", ")
			}
			table = append(table, row{tc.name, tc.scenario, fmt.Sprintf("%s %d/%d", tc.want, got, mutantRuns), lin})
		})
	}
	var b strings.Builder
	b.WriteString("mutation table:\n| mutant | scenario | runs | verdict as expected | linearizability |\n|---|---|---|---|---|\n")
	for _, r := range table {
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s |\n", strings.TrimSpace(r.name), r.scenario, mutantRuns, r.want, r.lin)
	}
	t.Log(b.String())
}
