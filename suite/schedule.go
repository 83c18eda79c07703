package suite

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/run"
	"github.com/locksuite/locksuite/harness/traffic"
)

// scheduler runs the scenario runs of Execute's specs ahead of the specs
// that report them, at most parallel at once. Ginkgo runs specs one after
// another, and a scenario run is mostly waiting, so the runs of the specs
// still to come go on while an earlier spec waits for its own. A job that
// faults a service's servers (exclusive) runs alone on that service:
// beside no run whose lock or counter store is there (Config.Service,
// Config.StoreService), while runs on the other services go on; one whose
// Config names no Service, or that starts services on network namespaces
// of its own (the node scenarios), runs alone. A job
// that keeps processes busy (busy: a chaos run's worker
// processes, whose verdict depends on their getting the CPU when its
// schedule says) runs beside at most busySlots-1 others of its kind, one
// per CPU, while the jobs that mostly wait fill the other slots; more
// start only while the machine has CPU to spare (spareCPUs idle over the
// last second, measured in /proc/stat, and the last busy job started at
// least busySettle ago, so that its load shows), up to parallel. Measured
// on a quiet 2-core machine (the default run, 420 runs): one chaos run at a
// time took 11 m 35 s, one per CPU 6 m 46 s, six at once 4 m 15 s, all
// three with the same verdicts wherever a spec asserts one (only measured
// cells and the number of updates lost moved); with other processes
// loading the machine, six at once lost updates with no fault on a 200 ms
// lease, so the fixed bound keeps a margin, and the runs beyond it wait
// for idle CPU. With exclusive runs alone on their service only and the
// idle-CPU rule (half a CPU idle, 900 ms apart), the default run took 3 m
// 9 s to 3 m 21 s; with the counter store on a server of its own and a
// Postgres session per client, 2 m 42 s to 3 m 1 s; with 0.4 CPUs idle
// and 500 ms apart (the worker processes' start shows within a sample),
// 2 m 31 s to 2 m 54 s in five runs, the same verdicts in every asserted
// cell (docs/measurements.md).
// Exclusive jobs go first, those that fault what every run uses (the
// store's service) ahead, when no run has started yet to wait for; then
// the rest, the longest first (by their estimate: the longest-processing-time rule,
// which leaves the fewest slots idle at the end); a spec that waits for a
// job not started yet moves it ahead of the other jobs that are not
// exclusive, so that no spec waits for more than a slot to free and its own
// run (Ginkgo runs the specs in an order of its own).
//
// The dispatcher starts at the first await, so that registering specs
// (a dry run, a worker process) runs nothing.
type scheduler struct {
	parallel  int
	busySlots int // busy jobs at most at once
	suite     types.SuiteConfig
	ctx       context.Context
	cancel    context.CancelFunc
	start     sync.Once
	end       sync.Once
	wg        sync.WaitGroup

	mu      sync.Mutex
	changed *sync.Cond // a job ended, was queued or promoted, or the scheduler stopped
	queue   []*job     // not started, in the order they start
	running map[*job]bool
	busy    int // busy jobs running
	// meter, if not nil, measures the idle CPUs, for the busy jobs beyond
	// busySlots; lastBusy is when the last busy job started.
	meter    *cpuMeter
	lastBusy time.Time
	settle   time.Duration // busySettle; shorter in tests
}

const (
	// spareCPUs is how many CPUs must have been idle over the last second
	// for a busy job beyond busySlots to start.
	spareCPUs = 0.4
	// busySettle is how long after a busy job starts the next one beyond
	// busySlots may: the worker processes a chaos run starts take that
	// long to show in the idle time.
	busySettle = 500 * time.Millisecond
)

// everything is the resource of a job that may touch anything: one
// whose Config names no Service, or that faults more than its service.
const everything = "*"

// footprint is what a job's run touches: the services its lock and store
// are on (uses), and, for an exclusive job, what it faults (faults), which
// no other running job may use or fault.
type footprint struct {
	uses, faults []string
	// broad says the job faults what every run uses: the store's service
	// (Config.StoreService), or everything. Such jobs go first, when no
	// run has started yet to wait for.
	broad bool
}

// footprintOf is what the runs of sc for cfg touch.
func footprintOf(sc *Scenario, cfg *Config) footprint {
	var f footprint
	if cfg.Service == "" {
		f.uses = []string{everything}
	} else {
		f.uses = []string{cfg.Service}
		if cfg.StoreService != "" && cfg.StoreService != cfg.Service {
			f.uses = append(f.uses, cfg.StoreService)
		}
	}
	if !sc.Exclusive || skips(sc, cfg) {
		return f
	}
	if cfg.Service == "" || sc.Family == FamilyNodes {
		f.faults = []string{everything}
	} else {
		f.faults = []string{cfg.Service}
	}
	f.broad = cfg.Service == "" || sc.Family == FamilyNodes || cfg.Service == cfg.StoreService
	return f
}

// skips says whether the exclusive scenario sc surely skips for cfg, so
// that its run faults nothing: a fenced Config of an unfenced-only
// scenario, a node scenario without Config.Nodes, a failover without a
// leader (the first condition of faults.LeaderKill's Applies, whose rest
// waits for the service's health), or a scenario whose fault's own
// Applies says it does not apply (a server fault without server
// processes, a crash the service cannot take or not of its kind: those
// Applies read the Config alone).
func skips(sc *Scenario, cfg *Config) bool {
	switch {
	case cfg.Fenced && sc.unfenced != "":
		return true
	case sc.Family == FamilyNodes:
		return cfg.Nodes == nil
	case sc.Family == FamilyCluster:
		_, ok := cfg.Servers.(Leaderer)
		return !ok
	case sc.fault == nil:
		return false
	}
	return errors.Is(sc.fault(cfg, &run.Fixture{}).Applies(context.Background()), faults.ErrNotApplicable)
}

// overlaps says whether a resource of a is one of b (everything overlaps
// every resource).
func overlaps(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y || x == everything || y == everything {
				return true
			}
		}
	}
	return false
}

// conflicts says whether a and b may not run at once: one faults what the
// other uses.
func (a footprint) conflicts(b footprint) bool {
	return overlaps(a.faults, b.uses) || overlaps(b.faults, a.uses)
}

// class is what a job may run beside.
type class int

const (
	waits     class = iota // mostly waits (for a lease, a step, a server)
	busy                   // keeps processes busy: at most busySlots at once
	exclusive              // faults what other runs share: alone on what it faults (its footprint)
)

// classOf is the class of the runs of sc: its Exclusive flag, or busy for
// the chaos family (worker processes).
func classOf(sc *Scenario) class {
	switch {
	case sc.Exclusive:
		return exclusive
	case sc.Family == FamilyChaos:
		return busy
	}
	return waits
}

// job is one scenario run.
type job struct {
	run      func(ctx context.Context) (report.Row, error)
	class    class
	touches  footprint
	estimate time.Duration // how long it is expected to take
	queued   bool          // in the scheduler's queue (Ginkgo was expected to run its spec)
	started  bool
	consumed bool // a spec took its result: another attempt (Ginkgo's repeats) runs anew
	done     chan struct{}
	cancel   context.CancelFunc
	row      report.Row
	err      error
}

func newScheduler(parallel int, sc types.SuiteConfig) *scheduler {
	s := &scheduler{parallel: parallel, busySlots: min(parallel, runtime.NumCPU()), suite: sc, running: map[*job]bool{}, meter: newCPUMeter(), settle: busySettle}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.changed = sync.NewCond(&s.mu)
	return s
}

// add makes a job of run, touching f, expected to take about estimate,
// for a spec with these texts and labels; it is queued only if Ginkgo is
// to run the spec (willRun): a spec Ginkgo runs anyway runs its job itself.
func (s *scheduler) add(run func(context.Context) (report.Row, error), c class, f footprint, estimate time.Duration, texts, labels []string) *job {
	j := &job{run: run, class: c, touches: f, estimate: estimate, done: make(chan struct{})}
	if !willRun(s.suite, texts, labels) {
		return j
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j.queued = true
	// The exclusive jobs first, those that fault what every run uses
	// (broad) ahead, in the order they came; then the others, the longest
	// first, in the order they came among equals.
	rank := func(c class, f footprint) int {
		switch {
		case c == exclusive && f.broad:
			return 0
		case c == exclusive:
			return 1
		}
		return 2
	}
	r := rank(c, f)
	i := slices.IndexFunc(s.queue, func(q *job) bool {
		qr := rank(q.class, q.touches)
		return qr > r || qr == 2 && r == 2 && q.estimate < estimate
	})
	if i < 0 {
		i = len(s.queue)
	}
	s.queue = slices.Insert(s.queue, i, j)
	return j
}

// await returns j's result: run ahead by the scheduler, or run now within
// ctx for a job it has not queued or whose result a previous attempt took.
// If ctx ends first, j is cancelled (its faults healed, its clients
// closed) before await returns ctx's error.
func (s *scheduler) await(ctx context.Context, j *job) (report.Row, error) {
	s.mu.Lock()
	inline := !j.queued || j.consumed
	j.consumed = true
	if !inline && !j.started {
		s.promote(j)
	}
	s.mu.Unlock()
	if inline {
		return protect(ctx, j.run)
	}
	s.start.Do(func() {
		s.wg.Add(2)
		done := make(chan struct{})
		go func() { defer close(done); s.dispatch() }()
		go s.measure(done)
	})
	select {
	case <-j.done:
		return j.row, j.err
	case <-ctx.Done():
	}
	s.mu.Lock()
	if !j.started { // never started: take it off the queue
		s.queue = slices.DeleteFunc(s.queue, func(q *job) bool { return q == j })
		s.mu.Unlock()
		return report.Row{}, ctx.Err()
	}
	s.mu.Unlock()
	j.cancel()
	<-j.done
	return report.Row{}, ctx.Err()
}

// promote moves the queued job j ahead of the queued jobs that are not
// exclusive. Called with s.mu held.
func (s *scheduler) promote(j *job) {
	if j.class == exclusive {
		return
	}
	s.queue = slices.DeleteFunc(s.queue, func(q *job) bool { return q == j })
	i := slices.IndexFunc(s.queue, func(q *job) bool { return q.class != exclusive })
	if i < 0 {
		i = len(s.queue)
	}
	s.queue = slices.Insert(s.queue, i, j)
	s.changed.Broadcast()
}

// dispatch starts queued jobs as slots free, until the queue is empty or
// the scheduler stops.
func (s *scheduler) dispatch() {
	defer s.wg.Done()
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		for s.ctx.Err() == nil {
			i := s.next()
			if i < 0 {
				break
			}
			j := s.queue[i]
			s.queue = slices.Delete(s.queue, i, i+1)
			s.launch(j)
		}
		if len(s.queue) == 0 || s.ctx.Err() != nil {
			return
		}
		s.changed.Wait()
	}
}

// measure samples the idle CPUs every second until done or the scheduler
// stops, and wakes the dispatcher after each sample.
func (s *scheduler) measure(done <-chan struct{}) {
	defer s.wg.Done()
	if s.meter == nil {
		return
	}
	t := time.NewTicker(s.meter.sampleTime)
	defer t.Stop()
	s.meter.sample()
	for {
		select {
		case <-done:
			return
		case <-s.ctx.Done():
			return
		case <-t.C:
			s.meter.sample()
			s.mu.Lock()
			s.changed.Broadcast()
			s.mu.Unlock()
		}
	}
}

// busyFree says whether a busy job may start now: fewer than busySlots
// run, or the machine has CPU to spare (see scheduler). Called with s.mu
// held.
func (s *scheduler) busyFree() bool {
	if s.busy < s.busySlots {
		return true
	}
	if s.meter == nil || time.Since(s.lastBusy) < s.settle {
		return false
	}
	idle, ok := s.meter.idleCPUs()
	return ok && idle >= spareCPUs
}

// next is the index of the first queued job that may start now, or -1:
// with a slot free, the first job in the queue that conflicts with no
// running job, is not held back by the busy jobs' bound, and conflicts with
// no exclusive job ahead of it that waits for the runs on its service to
// end (so that the runs queued behind it do not keep its service busy
// forever; one that waits only for another exclusive job holds nothing
// back).
// Called with s.mu held.
func (s *scheduler) next() int {
	if len(s.running) >= s.parallel {
		return -1
	}
	var draining []footprint // the exclusive jobs ahead that wait for runs on their service to end
	busyFree := s.busyFree()
	for i, q := range s.queue {
		ok, drain := q.class != busy || busyFree, false
		for r := range s.running {
			if q.touches.conflicts(r.touches) {
				ok, drain = false, drain || r.class != exclusive
			}
		}
		for _, w := range draining {
			ok = ok && !q.touches.conflicts(w)
		}
		if ok {
			return i
		}
		if q.class == exclusive && drain {
			draining = append(draining, q.touches)
		}
	}
	return -1
}

// launch starts j, bounded by specTimeout. Called with s.mu held.
func (s *scheduler) launch(j *job) {
	ctx, cancel := context.WithTimeout(s.ctx, specTimeout)
	j.started, j.cancel = true, cancel
	s.running[j] = true
	if j.class == busy {
		s.busy++
		s.lastBusy = time.Now()
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer cancel()
		j.row, j.err = protect(ctx, j.run)
		s.mu.Lock()
		delete(s.running, j)
		if j.class == busy {
			s.busy--
		}
		s.changed.Broadcast()
		s.mu.Unlock()
		close(j.done)
	}()
}

// stop cancels the jobs still running, drops those not started and waits
// until every started job has ended (healed its faults, closed its
// clients). Idempotent.
func (s *scheduler) stop() {
	s.end.Do(func() {
		s.cancel()
		s.mu.Lock()
		s.queue = nil
		s.changed.Broadcast()
		s.mu.Unlock()
		s.wg.Wait()
	})
}

// protect runs run, turning a panic of the code under test into an error
// (a spec body's panic is Ginkgo's to report; a job's is not in a spec).
func protect(ctx context.Context, run func(context.Context) (report.Row, error)) (row report.Row, err error) {
	defer func() {
		if p := recover(); p != nil {
			row, err = report.Row{}, fmt.Errorf("suite: %w", &traffic.PanicError{Value: p, Stack: debug.Stack()})
		}
	}()
	return run(ctx)
}

// estimate is how long a run of sc for cfg is expected to take, to order
// the scheduler's queue: the chaos scenarios' schedule, the baseline's and
// the failover load's durations, the node scenarios' cuts, else a few
// leases (the holder scenarios wait for one to expire).
func estimate(sc *Scenario, cfg *Config) time.Duration {
	ch := cfg.Chaos
	switch {
	case sc.Family == FamilyChaos:
		return max(ch.Duration, time.Duration(ch.Pauses)*(ch.Pause+ch.Interval))
	case sc.Name == Baseline || sc.Name == Control:
		return cfg.Duration
	case sc.Name == FailoverLoad:
		return ch.Duration
	case sc.Family == FamilyNodes || sc.Family == FamilyCluster:
		return 10 * time.Second
	}
	return 3 * cfg.Lease
}
