package suite

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/traffic"
)

// gate is a job that records when it runs and ends when released.
type gate struct {
	name    string
	release chan struct{}
	log     *runLog
}

type runLog struct {
	mu      sync.Mutex
	running map[string]bool
	max     int                 // most jobs at once
	beside  map[string][]string // what ran beside each job, as it started
	order   []string            // the order jobs started
}

func newRunLog() *runLog { return &runLog{running: map[string]bool{}, beside: map[string][]string{}} }

func (l *runLog) job(name string) (*gate, func(context.Context) (report.Row, error)) {
	g := &gate{name: name, release: make(chan struct{}), log: l}
	return g, func(ctx context.Context) (report.Row, error) {
		l.mu.Lock()
		for n := range l.running {
			l.beside[name] = append(l.beside[name], n)
			l.beside[n] = append(l.beside[n], name)
		}
		l.running[name] = true
		l.order = append(l.order, name)
		l.max = max(l.max, len(l.running))
		l.mu.Unlock()
		defer func() {
			l.mu.Lock()
			delete(l.running, name)
			l.mu.Unlock()
		}()
		select {
		case <-g.release:
			return report.Row{Scenario: name, Verdict: report.Kept}, nil
		case <-ctx.Done():
			return report.Row{}, ctx.Err()
		}
	}
}

type jobSpec struct {
	name     string
	class    class
	estimate time.Duration
	touches  *footprint // nil: a Config without a Service (everything)
}

// add queues a gated job on s for each spec.
func (l *runLog) add(s *scheduler, specs ...jobSpec) (gates []*gate, jobs []*job) {
	for _, j := range specs {
		g, run := l.job(j.name)
		gates = append(gates, g)
		f := footprint{uses: []string{everything}}
		if j.class == exclusive {
			f.faults, f.broad = f.uses, true
		}
		if j.touches != nil {
			f = *j.touches
		}
		jobs = append(jobs, s.add(run, j.class, f, j.estimate, []string{j.name}, nil))
	}
	return gates, jobs
}

// TestScheduler: at most parallel jobs at once; an exclusive job alone,
// and first; the others longest first; a spec that waits for a job not
// started moves it ahead; a cancelled wait cancels its job; a panic is an
// error of the job; a job Ginkgo would not run, or whose result a spec
// already took, runs in the spec.
func TestScheduler(t *testing.T) {
	l := newRunLog()
	s := newScheduler(2, types.SuiteConfig{})
	defer s.stop()
	gates, jobs := l.add(s, jobSpec{"short", waits, time.Second, nil}, jobSpec{"long", waits, 10 * time.Second, nil}, jobSpec{"stall", exclusive, time.Second, nil},
		jobSpec{"middle", waits, 5 * time.Second, nil}, jobSpec{"last", waits, time.Millisecond, nil})
	// The spec of "last" waits first: it moves ahead of the others that are
	// not exclusive, behind the exclusive one.
	last := make(chan error, 1)
	go func() { _, err := s.await(context.Background(), jobs[4]); last <- err }()
	started := func(n int) func() bool {
		return func() bool { l.mu.Lock(); defer l.mu.Unlock(); return len(l.order) >= n }
	}
	waitUntil(t, started(1))
	close(gates[2].release) // stall, alone; then last and long
	waitUntil(t, started(3))
	close(gates[4].release) // last; then middle
	if err := <-last; err != nil {
		t.Errorf("last: %v", err)
	}
	waitUntil(t, started(4))
	close(gates[1].release) // long; then short
	waitUntil(t, started(5))
	close(gates[3].release)
	close(gates[0].release)
	for _, i := range []int{0, 1, 2, 3} {
		if _, err := s.await(context.Background(), jobs[i]); err != nil {
			t.Errorf("%s: %v", gates[i].name, err)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// last and long start together, once stall is over.
	if len(l.order) != 5 || l.order[0] != "stall" || !slices.Equal(sorted(l.order[1:3]), []string{"last", "long"}) || l.order[3] != "middle" || l.order[4] != "short" {
		t.Errorf("started in the order %v, want stall, then last and long, middle, short", l.order)
	}
	if l.max > 2 {
		t.Errorf("%d jobs ran at once, parallel is 2", l.max)
	}
	if len(l.beside["stall"]) != 0 {
		t.Errorf("the exclusive job ran beside %v", l.beside["stall"])
	}
}

// TestSchedulerBusy: busy jobs run at most busySlots at once; a job that
// waits starts in a free slot ahead of a busy one held back.
func TestSchedulerBusy(t *testing.T) {
	l := newRunLog()
	s := newScheduler(3, types.SuiteConfig{})
	s.busySlots, s.meter = 1, nil
	defer s.stop()
	gates, jobs := l.add(s, jobSpec{"chaos1", busy, 10 * time.Second, nil}, jobSpec{"chaos2", busy, 9 * time.Second, nil}, jobSpec{"lease", waits, time.Second, nil})
	errs := make(chan error, len(jobs))
	for _, j := range jobs {
		go func() { _, err := s.await(context.Background(), j); errs <- err }()
	}
	started := func(n int) func() bool {
		return func() bool { l.mu.Lock(); defer l.mu.Unlock(); return len(l.order) >= n }
	}
	waitUntil(t, started(2))
	time.Sleep(50 * time.Millisecond) // a third start, if the bound failed
	l.mu.Lock()
	first := sorted(l.order)
	l.mu.Unlock()
	// The awaits promote their jobs in an order of their own: whichever
	// busy job started, its end lets the other start.
	busyFirst, busyNext := 0, 1
	if slices.Contains(first, "chaos2") {
		busyFirst, busyNext = 1, 0
	}
	close(gates[busyFirst].release)
	waitUntil(t, started(3))
	close(gates[busyNext].release)
	close(gates[2].release)
	for range jobs {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(first) != 2 || !slices.Contains(first, "lease") || !slices.Contains(first, gates[busyFirst].name) || len(l.order) != 3 || l.order[2] != gates[busyNext].name {
		t.Errorf("started %v first, then %v; want a busy job and lease, then the other busy job", first, l.order[len(first):])
	}
	if slices.Contains(l.beside["chaos1"], "chaos2") {
		t.Errorf("the two busy jobs ran at once, busySlots is 1")
	}
}

// TestSchedulerSpareCPU: beyond busySlots, a busy job starts only while
// the meter says the machine has CPU to spare, and not within the settle
// time of the last busy start.
func TestSchedulerSpareCPU(t *testing.T) {
	var mu sync.Mutex
	var now cpuTimes
	idle := 0.0 // the CPUs idle, of 2
	l := newRunLog()
	s := newScheduler(4, types.SuiteConfig{})
	s.busySlots, s.settle = 1, 50*time.Millisecond
	s.meter = &cpuMeter{cpus: 2, sampleTime: 10 * time.Millisecond, read: func() (cpuTimes, bool) {
		mu.Lock()
		defer mu.Unlock()
		now.total += 200 // a second of 2 CPUs per read
		now.idle += uint64(idle * 100)
		return now, true
	}}
	defer s.stop()
	if c, ok := readProcStat(); runtime.GOOS == "linux" && (!ok || c.idle > c.total || c.total == 0) {
		t.Errorf("/proc/stat: %+v, %v", c, ok)
	}
	gates, jobs := l.add(s, jobSpec{"chaos1", busy, 3 * time.Second, nil}, jobSpec{"chaos2", busy, 2 * time.Second, nil},
		jobSpec{"chaos3", busy, time.Second, nil})
	errs := make(chan error, len(jobs))
	for _, j := range jobs {
		go func() { _, err := s.await(context.Background(), j); errs <- err }()
	}
	count := func() int { l.mu.Lock(); defer l.mu.Unlock(); return len(l.order) }
	waitUntil(t, func() bool { return count() == 1 })
	time.Sleep(200 * time.Millisecond) // settle time and samples pass, with no CPU idle
	if n := count(); n != 1 {
		t.Errorf("%d busy jobs started with no CPU idle, want 1", n)
	}
	mu.Lock()
	idle = 1.5
	mu.Unlock()
	waitUntil(t, func() bool { return count() == 3 })
	for _, g := range gates {
		close(g.release)
	}
	for range jobs {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// crashable is a single server that can crash, as far as the scheduler
// asks: it is never faulted.
type crashable struct{ faults.Member }

func (crashable) Members() []faults.Member                         { return []faults.Member{crashable{}} }
func (crashable) Healthy(context.Context) error                    { return nil }
func (crashable) CanCrash(bool) error                              { return nil }
func (crashable) Crash(context.Context, bool) (CrashReport, error) { return CrashReport{}, nil }
func (crashable) Sync() error                                      { return nil }

// stoppable is a single server that can be stopped, not crashed.
type stoppable struct{ faults.Member }

func (stoppable) Members() []faults.Member      { return []faults.Member{stoppable{}} }
func (stoppable) Healthy(context.Context) error { return nil }

// TestSchedulerSkipsNeedNoExclusivity: an exclusive scenario that skips
// for a Config faults nothing, so it needs no service of its own.
func TestSchedulerSkipsNeedNoExclusivity(t *testing.T) {
	single := Config{Service: "redis", Servers: crashable{}}
	for _, c := range []struct {
		sc     string
		cfg    Config
		faults bool
	}{
		{ServerStall, single, true},
		{ServerStall, Config{Service: "etcd", Servers: stoppable{}}, true},
		{ServerCrash, single, true},
		{ServerStall, Config{Service: "redis"}, false},                      // no servers
		{ClusterCrash, single, false},                                       // not a cluster
		{Failover, single, false},                                           // no leader
		{SplitBrain, single, false},                                         // no Nodes
		{ServerCrash, Config{Service: "etcd", Servers: stoppable{}}, false}, // cannot crash
	} {
		f := footprintOf(scenarioNamed(c.sc), &c.cfg)
		if got := len(f.faults) > 0; got != c.faults {
			t.Errorf("%s on %s: faults %v, want faulting %v", c.sc, c.cfg.Service, f.faults, c.faults)
		}
	}
}

// TestSchedulerServices: an exclusive job runs alone on its service only:
// beside runs of other services (a crash beside another service's crash
// too), not beside a run on its service or one whose store is there; a
// job that faults the store's service goes first, alone.
func TestSchedulerServices(t *testing.T) {
	on := func(sc, service string) *footprint {
		f := footprintOf(scenarioNamed(sc), &Config{Service: service, StoreService: "postgres", Servers: crashable{}})
		return &f
	}
	l := newRunLog()
	s := newScheduler(6, types.SuiteConfig{})
	defer s.stop()
	gates, jobs := l.add(s,
		jobSpec{"stall-redis", exclusive, time.Second, on(ServerStall, "redis")},
		jobSpec{"crash-etcd", exclusive, time.Second, on(ServerCrash, "etcd")},
		jobSpec{"crash-redis", exclusive, time.Second, on(ServerCrash, "redis")},
		jobSpec{"baseline-redis", waits, 3 * time.Second, on(Baseline, "redis")},
		jobSpec{"baseline-etcd", waits, 2 * time.Second, on(Baseline, "etcd")},
		jobSpec{"baseline-consul", waits, time.Second, on(Baseline, "consul")},
		jobSpec{"stall-postgres", exclusive, time.Second, on(ServerStall, "postgres")})
	expect := l.expecter(t, s, jobs[0])
	expect("at first", "stall-postgres")
	close(gates[6].release)
	expect("after stall-postgres", "stall-postgres", "stall-redis", "crash-etcd", "baseline-consul")
	close(gates[0].release) // stall-redis: redis's crash, beside etcd's
	expect("after stall-redis", "stall-postgres", "stall-redis", "crash-etcd", "baseline-consul", "crash-redis")
	close(gates[1].release) // crash-etcd: etcd's baseline
	expect("after crash-etcd", "stall-postgres", "stall-redis", "crash-etcd", "baseline-consul", "crash-redis", "baseline-etcd")
	close(gates[2].release) // crash-redis: redis's baseline
	expect("after crash-redis", "stall-postgres", "stall-redis", "crash-etcd", "baseline-consul", "crash-redis", "baseline-etcd", "baseline-redis")
	for _, g := range gates[3:6] {
		close(g.release)
	}
	l.awaitAll(t, s, jobs[1:])
	if b := l.beside["stall-postgres"]; len(b) != 0 {
		t.Errorf("the store's service was stalled beside %v", b)
	}
}

// TestSchedulerDrains: an exclusive job that waits for a run on what it
// faults to end holds back the jobs queued behind it there (so that they
// do not keep it waiting forever); one that waits for another exclusive
// job does not.
func TestSchedulerDrains(t *testing.T) {
	l := newRunLog()
	s := newScheduler(6, types.SuiteConfig{})
	defer s.stop()
	gates, jobs := l.add(s,
		jobSpec{"e1", exclusive, time.Second, &footprint{faults: []string{"x"}, uses: []string{"x"}}},
		jobSpec{"e2", exclusive, time.Second, &footprint{faults: []string{"a"}, uses: []string{"a", "x"}}},
		jobSpec{"r", waits, 2 * time.Second, &footprint{uses: []string{"a"}}},
		jobSpec{"later", waits, time.Second, &footprint{uses: []string{"a"}}})
	expect := l.expecter(t, s, jobs[0])
	// e2 waits for e1, and holds nothing back: r starts; then e2 waits for
	// r too, and holds later back.
	expect("at first", "e1", "r")
	close(gates[0].release)
	expect("after e1", "e1", "r")
	close(gates[2].release)
	expect("after r", "e1", "r", "e2")
	close(gates[1].release)
	expect("after e2", "e1", "r", "e2", "later")
	close(gates[3].release)
	l.awaitAll(t, s, jobs[1:])
}

// expecter awaits first (in a goroutine; only one job is awaited while
// they run, since a spec's await moves its job ahead, which would make the
// order checked random) and returns a check of the jobs started so far.
func (l *runLog) expecter(t *testing.T, s *scheduler, first *job) func(step string, want ...string) {
	go func() { _, _ = s.await(context.Background(), first) }()
	started := func() []string { l.mu.Lock(); defer l.mu.Unlock(); return sorted(l.order) }
	return func(step string, want ...string) {
		t.Helper()
		waitUntil(t, func() bool { return len(started()) >= len(want) })
		time.Sleep(50 * time.Millisecond) // a start the rules forbid, if they failed
		if got := started(); !slices.Equal(got, sorted(want)) {
			t.Errorf("%s: started %v, want %v", step, got, sorted(want))
		}
	}
}

// awaitAll takes every job's result.
func (l *runLog) awaitAll(t *testing.T, s *scheduler, jobs []*job) {
	t.Helper()
	for _, j := range jobs {
		if _, err := s.await(context.Background(), j); err != nil {
			t.Error(err)
		}
	}
}

// TestSchedulerCancelAndPanic: a wait cancelled by its spec cancels its
// job and returns the context's error; a job that panics returns a
// traffic.PanicError; a second wait for the same job (Ginkgo's repeat)
// runs it anew, in the spec.
func TestSchedulerCancelAndPanic(t *testing.T) {
	l := newRunLog()
	s := newScheduler(2, types.SuiteConfig{})
	defer s.stop()
	_, hang := l.job("hang")
	hung := s.add(hang, waits, footprint{}, time.Second, nil, nil)
	boom := s.add(func(context.Context) (report.Row, error) { panic("boom") }, waits, footprint{}, time.Second, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := s.await(ctx, hung); done <- err }()
	waitUntil(t, func() bool { l.mu.Lock(); defer l.mu.Unlock(); return l.running["hang"] })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled wait: %v", err)
	}
	var pe *traffic.PanicError
	if _, err := s.await(context.Background(), boom); !errors.As(err, &pe) {
		t.Errorf("panicking job: %v, want a traffic.PanicError", err)
	}
	if _, err := s.await(context.Background(), boom); !errors.As(err, &pe) {
		t.Errorf("a second wait: %v, want the job run again in the spec", err)
	}
}

// TestWillRun: the scheduler runs ahead only the specs Ginkgo will run, by
// its label filter and focus and skip strings.
func TestWillRun(t *testing.T) {
	for _, tc := range []struct {
		sc     types.SuiteConfig
		labels []string
		want   bool
	}{
		{types.SuiteConfig{}, []string{"redis"}, true},
		{types.SuiteConfig{LabelFilter: "etcd"}, []string{"redis", "baseline"}, false},
		{types.SuiteConfig{LabelFilter: "redis && !chaos"}, []string{"redis", "baseline"}, true},
		{types.SuiteConfig{FocusStrings: []string{"etcd lock"}}, []string{"redis"}, false},
		{types.SuiteConfig{FocusStrings: []string{"redis lock"}}, []string{"redis"}, true},
		{types.SuiteConfig{SkipStrings: []string{"^locksuite redis"}}, []string{"redis"}, false},
	} {
		if got := willRun(tc.sc, []string{"redis lock, unfenced", "keeps the counter"}, tc.labels); got != tc.want {
			t.Errorf("%+v, labels %v: %v, want %v", tc.sc, tc.labels, got, tc.want)
		}
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting")
		}
	}
}

func sorted(a []string) []string {
	b := append([]string(nil), a...)
	slices.Sort(b)
	return b
}
