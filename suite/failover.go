package suite

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/harness/checker"
	"github.com/locksuite/locksuite/harness/history"
	"github.com/locksuite/locksuite/harness/load"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/servers"
)

// Failover scenario names.
const (
	// Failover: holder A acquires and reads; the leader (the primary) is
	// killed before A writes; B tries to acquire while the service fails
	// over; A writes; the counter judges.
	Failover = "failover"
	// FailoverLoad: Clients clients increment for Chaos.Duration; halfway,
	// the leader is killed.
	FailoverLoad = "failover-load"
)

// FailoverScenarios lists the failover scenarios. They need Config.Servers
// implementing Leaderer, and are skipped otherwise.
var FailoverScenarios = []string{Failover, FailoverLoad}

// Lagger is an optional capability of Servers whose replication is
// asynchronous (a Redis primary and its replica). Lag makes the members that
// would take over from the leader fall behind from now on: writes the
// leader acknowledges after Lag returns exist on the leader only, as writes
// within an asynchronous replica's lag do, until resume is called. The
// failover scenario calls Lag before the holder acquires, kills the leader
// while the holder holds the lock, then calls resume: the grant is lost
// with the leader. A consensus-replicated service (etcd, Consul) has no
// such window (a write is acknowledged only once a quorum has it) and does
// not implement Lagger.
type Lagger interface {
	Lag(ctx context.Context) (resume func() error, err error)
}

// Restarter is an optional capability of Servers: Restart starts the
// members a scenario killed again and waits until the service is healthy
// with all of them, so that the next scenario finds the whole cluster.
// Without it, each failover leaves the service one member short.
type Restarter interface {
	Restart(ctx context.Context) error
}

// lagBeforeKill is how long before the kill the load variant makes the
// replicas lag.
const lagBeforeKill = 200 * time.Millisecond

// recoveryTimeout bounds how long a failover may take before the scenario
// reports the service as not recovered (an error, not a verdict).
const recoveryTimeout = 60 * time.Second

// failoverFault is one kill of the leader, as it happened.
type failoverFault struct {
	servers Servers
	victim  Member
	resume  func() error
	killed  time.Duration // recorder time of the kill
	healthy time.Duration // recorder time the service was healthy again; 0 if not yet
	mu      sync.Mutex
	ok      chan struct{} // closed once healthy again
	err     error         // not healthy within recoveryTimeout
	// resumed and restored say what is undone: cleanup undoes the rest
	// when a scenario ends early.
	resumed, restored bool
}

// prepareFailover checks the service, finds its leader and, where
// replication is asynchronous, makes the replicas lag.
func prepareFailover(ctx context.Context, cfg Config) (*failoverFault, error) {
	if cfg.Servers == nil {
		return nil, &skipError{"no Config.Servers: the failover scenarios need the lock service's processes"}
	}
	ld, ok := cfg.Servers.(Leaderer)
	if !ok {
		return nil, &skipError{"Config.Servers has no leader to kill (it does not implement suite.Leaderer): a single server cannot fail over"}
	}
	if err := servers.WaitHealthy(ctx, recoveryTimeout, cfg.Servers.Healthy); err != nil {
		return nil, fmt.Errorf("suite: %s: the lock service is not healthy before the fault: %w", cfg.Name, err)
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	victim, err := ld.Leader(lctx)
	if err != nil {
		return nil, fmt.Errorf("suite: %s: finding the leader: %w", cfg.Name, err)
	}
	return &failoverFault{servers: cfg.Servers, victim: victim, ok: make(chan struct{})}, nil
}

// lag makes the replicas fall behind, if the service replicates
// asynchronously.
func (f *failoverFault) lag(ctx context.Context) error {
	if lg, ok := f.servers.(Lagger); ok {
		resume, err := lg.Lag(ctx)
		if err != nil {
			return fmt.Errorf("suite: lag the replicas: %w", err)
		}
		f.resume = resume
	}
	return nil
}

// kill kills the leader, lets lagging replicas run again, and watches
// for the service to recover in the background.
func (f *failoverFault) kill(ctx context.Context, rec *history.Recorder) error {
	f.killed = rec.Now()
	err := f.victim.Kill()
	if f.resume != nil {
		f.resumed = true
		err = errors.Join(err, f.resume())
	}
	if err != nil {
		return fmt.Errorf("suite: kill the leader %s: %w", f.victim.Name(), err)
	}
	go func() {
		err := servers.WaitHealthy(ctx, recoveryTimeout, f.servers.Healthy)
		f.mu.Lock()
		f.healthy, f.err = rec.Now(), err
		f.mu.Unlock()
		close(f.ok)
	}()
	return nil
}

// recovered waits until the service is healthy again and returns when that
// was, in recorder time.
func (f *failoverFault) recovered(ctx context.Context) (time.Duration, error) {
	select {
	case <-f.ok:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.healthy, f.err
}

// restore brings the killed member back, where the service can.
func (f *failoverFault) restore(ctx context.Context) error {
	f.restored = true
	if rs, ok := f.servers.(Restarter); ok {
		rctx, cancel := context.WithTimeout(ctx, recoveryTimeout)
		defer cancel()
		if err := rs.Restart(rctx); err != nil {
			return fmt.Errorf("suite: restarting %s: %w", f.victim.Name(), err)
		}
	}
	return nil
}

// cleanup, deferred by each scenario, continues lagging replicas and
// restarts killed members that a scenario ending early left behind.
func (f *failoverFault) cleanup(ctx context.Context) {
	if f.resume != nil && !f.resumed {
		f.resumed = true
		_ = f.resume()
	}
	if f.killed != 0 && !f.restored {
		_ = f.restore(context.WithoutCancel(ctx))
	}
}

// describe is the fault's timing for the report, relative to t0.
func (f *failoverFault) describe(t0 time.Duration) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := fmt.Sprintf("killed leader %s@%.2fs", f.victim.Name(), (f.killed - t0).Seconds())
	if f.resume != nil {
		s += " (replicas lagging)"
	}
	if f.healthy > 0 && f.err == nil {
		s += fmt.Sprintf(", healthy again +%.2fs", (f.healthy - f.killed).Seconds())
	}
	return s
}

// retrying runs one critical section of client id until it is accepted or
// rejected as stale, or ctx is done, trying again after errors (a
// failover makes requests fail until the service has a new leader). It
// returns the last error when ctx ends first, and how many attempts failed.
func retrying(ctx context.Context, id int, l backends.Locker, s fencing.Store, rec *history.Recorder, work time.Duration) (int, error) {
	failed := 0
	for {
		err := load.Increment(ctx, id, l, s, rec, work, load.Hooks{})
		if err == nil || errors.Is(err, fencing.ErrStale) {
			return failed, nil
		}
		if ctx.Err() != nil {
			return failed, err
		}
		failed++
		select {
		case <-ctx.Done():
			return failed, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// runFailover: holder A acquires (after Lag, where replication is
// asynchronous) and reads; before A writes, the leader is killed; B tries to
// acquire, again and again through the failover. A waits until B's section
// is done, or until the service is healthy again and A's lease would have
// expired since (the Locker's expiry + 1 s): a lease that survived that
// long survived the failover. A writes the value it read and releases; B
// gets its turn if it has not had it. Unfenced, a grant lost with the
// leader loses B's update or A's; fenced, the store must reject the stale
// one. The service must be healthy before the fault and again after it;
// the killed member is restarted afterwards (Restarter).
func runFailover(ctx context.Context, cfg Config, runID string) (report.Row, error) {
	f, err := prepareFailover(ctx, cfg)
	if err != nil {
		return report.Row{}, err
	}
	defer f.cleanup(ctx)
	r := newRun(cfg, runID, Failover)
	defer r.close()
	if err := r.clients(ctx, 2, false); err != nil {
		return report.Row{}, err
	}
	a, b := r.lockers[0], r.lockers[1]
	if err := requireFence(ctx, cfg, a); err != nil {
		return report.Row{}, err
	}
	s, err := r.store(ctx, cfg.Fenced)
	if err != nil {
		return report.Row{}, err
	}
	if err := f.lag(ctx); err != nil {
		return report.Row{}, err
	}
	rec := r.recorder()
	t0 := rec.Now()
	_, expiry, ok := backends.TTLOf(a)
	if !ok {
		expiry = cfg.Lease
	}
	r.started(Failover, expiry+time.Second)
	var (
		wg        sync.WaitGroup
		errB      error
		failedB   int
		faultErr  error
		hooked    bool
		bDone     = make(chan struct{})
		bctx      context.Context
		cancelB   context.CancelFunc = func() {}
		waitedFor string
	)
	errA := load.Increment(ctx, 0, a, s, rec, 0, load.Hooks{BeforeWrite: func(ctx context.Context) {
		hooked = true
		if faultErr = f.kill(ctx, rec); faultErr != nil {
			close(bDone)
			return
		}
		bctx, cancelB = context.WithTimeout(ctx, recoveryTimeout+expiry+10*time.Second)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(bDone)
			failedB, errB = retrying(bctx, 1, b, s, rec, 0)
		}()
		// Wait for B, or for the lease to outlive the failover.
		select {
		case <-bDone:
			waitedFor = "B got in while A held its grant"
			return
		case <-f.ok:
		case <-ctx.Done():
			return
		}
		select {
		case <-bDone:
			waitedFor = "B got in while A held its grant"
		case <-time.After(expiry + time.Second):
			waitedFor = fmt.Sprintf("A's lease outlived the failover by %v: B waited", expiry+time.Second)
		case <-ctx.Done():
		}
	}})
	if faultErr != nil {
		return report.Row{}, faultErr
	}
	if !hooked {
		return report.Row{}, fmt.Errorf("holder A: %w", errA)
	}
	// A has released: B gets its turn now if it has not had it.
	select {
	case <-bDone:
	case <-ctx.Done():
		cancelB()
	}
	wg.Wait()
	cancelB()
	d := time.Duration(rec.Now() - t0)
	if errA != nil && !errors.Is(errA, fencing.ErrStale) {
		return report.Row{}, fmt.Errorf("holder A: %w", errA)
	}
	healthy, herr := f.recovered(ctx)
	if herr != nil {
		return report.Row{}, fmt.Errorf("suite: %s: the lock service did not recover after %s was killed: %w", cfg.Name, f.victim.Name(), herr)
	}
	r.fault(-1, f.killed, healthy, "leader killed")
	var res checker.Result
	if errB != nil {
		res = checker.Result{Verdict: checker.Unknown, Reason: fmt.Sprintf("B never completed a section after the failover (%d failed attempts): %v", failedB, errB)}
	} else {
		res = finish(ctx, s, rec)
		if waitedFor != "" {
			if fa, fb := fences(rec.Sections()); fa != 0 && fb != 0 && cfg.Fenced {
				waitedFor += fmt.Sprintf(" (fences: A %d, B %d)", fa, fb)
			}
			if res.Reason != "" {
				res.Reason += "; "
			}
			res.Reason += waitedFor
		}
	}
	if err := f.restore(ctx); err != nil {
		return report.Row{}, err
	}
	row := r.row(Failover, res, cfg.Fenced, d)
	row.Faults = 1
	row.Schedule = f.describe(t0)
	if failedB > 0 {
		row.Schedule += fmt.Sprintf(", B failed %d attempts", failedB)
	}
	return r.keep(row), nil
}

// fences are the fences of A's (client 0) and B's (client 1) first grants.
func fences(secs []history.Section) (a, b uint64) {
	for _, sec := range secs {
		switch {
		case sec.Client == 0 && a == 0:
			a = sec.Fence
		case sec.Client == 1 && b == 0:
			b = sec.Fence
		}
	}
	return a, b
}

// runFailoverLoad: Clients clients increment (each retrying through
// errors) for Chaos.Duration; halfway, the leader is killed (after Lag,
// where replication is asynchronous, 200 ms earlier: a replica stopped
// longer would no longer be eligible for promotion).
func runFailoverLoad(ctx context.Context, cfg Config, runID string) (report.Row, error) {
	f, err := prepareFailover(ctx, cfg)
	if err != nil {
		return report.Row{}, err
	}
	defer f.cleanup(ctx)
	r := newRun(cfg, runID, FailoverLoad)
	defer r.close()
	s, err := r.setup(ctx, cfg.Clients)
	if err != nil {
		return report.Row{}, err
	}
	rec := r.recorder()
	t0 := rec.Now()
	dur := cfg.Chaos.Duration
	r.started(FailoverLoad, dur)
	lctx, stop := context.WithTimeout(ctx, dur)
	defer stop()
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed int
	)
	for id, l := range r.lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for lctx.Err() == nil {
				n, _ := retrying(lctx, id, l, s, rec, cfg.Work)
				mu.Lock()
				failed += n
				mu.Unlock()
			}
		}()
	}
	var faultErr error
	select {
	case <-time.After(dur/2 - lagBeforeKill):
		faultErr = f.lag(ctx)
	case <-ctx.Done():
	}
	if faultErr == nil {
		select {
		case <-time.After(lagBeforeKill):
			faultErr = f.kill(ctx, rec)
		case <-ctx.Done():
		}
	}
	wg.Wait()
	if faultErr != nil {
		return report.Row{}, faultErr
	}
	d := time.Duration(rec.Now() - t0)
	healthy, err := f.recovered(ctx)
	if err != nil {
		return report.Row{}, fmt.Errorf("suite: %s: the lock service did not recover after %s was killed: %w", cfg.Name, f.victim.Name(), err)
	}
	r.fault(-1, f.killed, healthy, "leader killed")
	res := finish(ctx, s, rec)
	if err := f.restore(ctx); err != nil {
		return report.Row{}, err
	}
	row := r.row(FailoverLoad, res, cfg.Fenced, d)
	row.Faults = 1
	row.Schedule = f.describe(t0) + fmt.Sprintf(", %d failed attempts", failed)
	if d > 0 {
		row.WritesPerSec = float64(res.Writes) / d.Seconds()
	}
	var maxWait time.Duration
	for _, sec := range rec.Sections() {
		maxWait = max(maxWait, sec.Start-sec.Asked)
	}
	row.MaxWaitMS = maxWait.Milliseconds()
	return r.keep(row), nil
}

// failoverSpecs registers the failover scenarios (label "cluster"). What
// each asserts: with a consensus-replicated service (Servers without
// Lagger), the invariant holds, fenced or not: a leader's loss must not
// lose a grant. With asynchronous replication (Lagger), unfenced and
// ExpectLoss, the grant lost with the primary must lose an update
// (failover) or is measured and reported (failover-load); fenced, the
// invariant must hold.
func failoverSpecs(c *Config, runID string, record func(string, report.Row, error) report.Row) {
	text := map[string]string{
		Failover:     "keeps the invariant when the leader is killed while a holder is about to write",
		FailoverLoad: "keeps the invariant when the leader is killed under load",
	}
	for _, sc := range FailoverScenarios {
		It(text[sc], Label("cluster", sc), func(ctx SpecContext) {
			var (
				row report.Row
				err error
			)
			if sc == Failover {
				row, err = runFailover(ctx, *c, runID)
			} else {
				row, err = runFailoverLoad(ctx, *c, runID)
			}
			row = record(sc, row, err)
			GinkgoWriter.Printf("fault: %s\n", row.Schedule)
			_, async := c.Servers.(Lagger)
			switch {
			case async && !c.Fenced && c.ExpectLoss && sc == Failover:
				row.Expected = report.Broken
				publish(*c, row)
				Expect(row.Verdict).To(Equal(report.Broken), "ExpectLoss is set, but the grant lost with the primary lost no update: %d writes, counter %d (%s; %s)", row.Writes, row.Counter, row.Reason, row.Schedule)
			case async && !c.Fenced:
				publish(*c, row)
				Expect(row.Verdict).NotTo(Equal(report.Unknown), row.Reason)
			default:
				row.Expected = report.Kept
				publish(*c, row)
				Expect(row.Verdict).To(Equal(report.Kept), "%s (%s)", row.Reason, row.Schedule)
			}
		}, SpecTimeout(specTimeout))
	}
}
