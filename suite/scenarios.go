package suite

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/harness/checker"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/history"
	"github.com/locksuite/locksuite/harness/load"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/worker"
)

// Scenario names, as used in labels, results and the CLI's --scenarios.
const (
	Baseline           = "baseline"
	Control            = "control"
	DeterministicPause = "deterministic-pause"
	ReleaseAfterExpiry = "release-after-expiry"
)

// Scenarios lists the scenario names in the order the suite defines them.
var Scenarios = []string{Baseline, Control, DeterministicPause, ReleaseAfterExpiry}

// skipError is returned by a scenario that cannot run against this Locker.
type skipError struct{ reason string }

func (s *skipError) Error() string { return s.reason }

// run is one scenario's resources; close releases all of them.
type run struct {
	cfg     Config
	key     string
	lockers []backends.Locker
	paths   []*faults.Path // each client's way to the lock service; nil if it dials directly
	stores  []fencing.Store

	// What the run's timeline shows: its sections and its faults.
	rec    *history.Recorder
	mu     sync.Mutex
	faults []report.Fault

	progress     chan struct{} // closed to stop the Progress reports
	progressDone sync.WaitGroup
}

var runSeq atomic.Int64

func newRunID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newRun names a fresh lock and counter for one scenario of cfg.
func newRun(cfg Config, runID, scenario string) *run {
	f := "unfenced"
	if cfg.Fenced {
		f = "fenced"
	}
	return &run{cfg: cfg, key: fmt.Sprintf("%s/%s/%s/%s/%s-%d", cfg.Prefix, runID, cfg.Name, f, scenario, runSeq.Add(1))}
}

// directDial dials without a fault path.
func directDial(ctx context.Context, network, address string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, network, address)
}

// clients makes n Lockers; with proxied, each dials through a fault path
// of its own.
func (r *run) clients(ctx context.Context, n int, proxied bool) error {
	for id := range n {
		dial := directDial
		if proxied {
			p := faults.NewPath()
			r.paths = append(r.paths, p)
			dial = p.Dial
		} else {
			r.paths = append(r.paths, nil)
		}
		l, err := r.cfg.NewLocker(ctx, Client{ID: id, Key: r.key, Dial: dial, Lease: r.cfg.Lease})
		if err != nil {
			return fmt.Errorf("suite: %s: NewLocker for client %d: %w", r.cfg.Name, id, err)
		}
		r.lockers = append(r.lockers, l)
	}
	return nil
}

func (r *run) store(ctx context.Context, fenced bool) (fencing.Store, error) {
	s, err := r.cfg.NewStore(ctx, r.key, fenced)
	if err != nil {
		return nil, fmt.Errorf("suite: %s: NewStore: %w", r.cfg.Name, err)
	}
	r.stores = append(r.stores, s)
	return s, nil
}

func (r *run) close() {
	if r.progress != nil {
		close(r.progress)
		r.progressDone.Wait()
	}
	for _, p := range r.paths {
		if p != nil {
			p.Heal()
		}
	}
	// What the lock left on the server (fence counters, keys, sequences):
	// the first client cleans for all, once the others are closed.
	for i := len(r.lockers) - 1; i >= 0; i-- {
		if c, ok := r.lockers[i].(backends.Cleaner); ok && i == 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = c.Cleanup(ctx)
			cancel()
		}
		_ = r.lockers[i].Close()
	}
	for _, p := range r.paths {
		if p != nil {
			_ = p.Close()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range r.stores {
		_ = s.Close(ctx)
	}
}

// started reports the scenario's progress to Config.Progress now and every
// second until the run closes.
func (r *run) started(scenario string, planned time.Duration) {
	if r.cfg.Progress == nil || r.rec == nil {
		return
	}
	t0 := time.Now()
	report1 := func() {
		p := report.Progress{Scenario: scenario, Elapsed: time.Since(t0), Planned: planned}
		secs := r.rec.Sections()
		in := map[int]bool{}
		for _, o := range checker.Overlaps(secs) {
			in[o.A], in[o.B] = true, true
		}
		p.Sections, p.Overlaps = len(secs), len(in)
		for _, s := range secs {
			if s.Outcome == history.Rejected {
				p.Rejected++
			}
		}
		r.cfg.Progress(p)
	}
	report1()
	r.progress = make(chan struct{})
	r.progressDone.Add(1)
	go func() {
		defer r.progressDone.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				report1()
			case <-r.progress:
				return
			}
		}
	}()
}

// expiry is how long a stalled holder's lease takes to run out, as far as
// the Locker says, else the stall bound.
func expiry(cfg Config, l backends.Locker) time.Duration {
	if _, e, ok := backends.TTLOf(l); ok {
		return e
	}
	return stallTimeout(cfg, l)
}

// recorder starts the run's history.
func (r *run) recorder() *history.Recorder {
	r.rec = history.NewRecorder()
	return r.rec
}

// fault records that client could not run from start to end (recorder time).
func (r *run) fault(client int, start, end time.Duration, kind string) {
	r.mu.Lock()
	r.faults = append(r.faults, report.Fault{Client: client, Start: start, End: end, Kind: kind})
	r.mu.Unlock()
}

// keep writes the run's history (a report.Timeline as JSON) and its HTML
// timeline into Config.Artifacts, if set, and names them in the row.
func (r *run) keep(row report.Row) report.Row {
	dir := r.cfg.Artifacts
	if dir == "" || r.rec == nil {
		return row
	}
	r.mu.Lock()
	t := report.Timeline{Row: row, Key: r.key, Sections: r.rec.Sections(), Faults: append([]report.Fault(nil), r.faults...)}
	r.mu.Unlock()
	base := filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_").Replace(r.key))
	for _, f := range []struct {
		ext   string
		write func(io.Writer) error
	}{{".json", t.WriteJSON}, {".html", func(w io.Writer) error { return report.WriteHTML(w, t) }}} {
		if err := writeFile(base+f.ext, f.write); err != nil {
			fmt.Fprintf(os.Stderr, "locksuite: keeping the run's %s: %v\n", f.ext, err)
			continue
		}
		row.Artifacts = append(row.Artifacts, base+f.ext)
	}
	return row
}

func writeFile(path string, write func(io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// row fills the result's identity and figures.
func (r *run) row(scenario string, res checker.Result, fenced bool, d time.Duration) report.Row {
	lease := r.cfg.Lease
	if len(r.lockers) > 0 {
		if t, _, ok := backends.TTLOf(r.lockers[0]); ok {
			lease = t
		}
	}
	return report.Row{
		Backend: r.cfg.Name, Fencing: fenced, Scenario: scenario,
		Writes: res.Writes, Counter: res.Counter, Lost: res.Lost, Overlaps: res.Overlaps, Rejected: res.Rejected,
		Verdict: res.Verdict.String(), Reason: res.Reason, Linearizable: string(res.Linearizable), LeaseMS: lease.Milliseconds(), DurationMS: d.Milliseconds(),
	}
}

// probeTimeout bounds the first Acquire of a free lock.
const probeTimeout = 10 * time.Second

// setup makes n clients dialling the lock service directly, skips a fenced
// run whose Locker gives no token, and opens the run's counter.
func (r *run) setup(ctx context.Context, n int) (fencing.Store, error) {
	if err := r.clients(ctx, n, false); err != nil {
		return nil, err
	}
	if err := requireFence(ctx, r.cfg, r.lockers[0]); err != nil {
		return nil, err
	}
	return r.store(ctx, r.cfg.Fenced)
}

// requireFence skips a fenced scenario for a Locker that gives no token.
func requireFence(ctx context.Context, cfg Config, l backends.Locker) error {
	if !cfg.Fenced {
		return nil
	}
	// A free lock: a bound, for a Locker that never grants.
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	lease, err := load.Acquire(pctx, l)
	if err != nil {
		return fmt.Errorf("suite: %s: the first Acquire of a free lock (a probe for its fence): %w", cfg.Name, err)
	}
	defer lease.Release(context.WithoutCancel(ctx))
	if lease.Fence() == 0 {
		return &skipError{"the backend gives no fencing token (Lease.Fence() is 0)"}
	}
	return nil
}

// finish reads the final counter and judges the history with both
// checkers (checker.Judge): the counter check, and linearizability.
func finish(ctx context.Context, s fencing.Store, rec *history.Recorder) checker.Result {
	counter, err := s.Value(ctx)
	if err != nil {
		return checker.Result{Verdict: checker.Unknown, Reason: fmt.Sprintf("reading the final counter: %v", err)}
	}
	res := checker.Judge(rec.Sections(), counter, checker.DefaultLinearizeTimeout)
	res.Rejected = int(s.Rejected())
	return res
}

// runBaseline: Clients clients increment for Duration with no faults. The
// invariant must hold and no accepted sections may overlap: otherwise the
// harness is measuring itself.
func runBaseline(ctx context.Context, cfg Config, runID string) (report.Row, error) {
	r := newRun(cfg, runID, Baseline)
	defer r.close()
	s, err := r.setup(ctx, cfg.Clients)
	if err != nil {
		return report.Row{}, err
	}
	rec := r.recorder()
	r.started(Baseline, cfg.Duration)
	t0 := time.Now()
	if err := load.Run(ctx, r.lockers, s, rec, cfg.Work, cfg.Duration); err != nil {
		return report.Row{}, err
	}
	return r.keep(r.row(Baseline, finish(ctx, s, rec), cfg.Fenced, time.Since(t0))), nil
}

// alwaysGrant is the control: a "lock" that grants every Acquire at once,
// like SET without NX. It gives no fence.
type alwaysGrant struct{}

func (alwaysGrant) Acquire(ctx context.Context) (backends.Lease, error) { return grant{}, ctx.Err() }
func (alwaysGrant) Close() error                                        { return nil }

type grant struct{}

func (grant) Fence() uint64                 { return 0 }
func (grant) Release(context.Context) error { return nil }

// runControl runs the baseline's load with a lock that always grants, on an
// unfenced counter of the backend's store: the checker must call it broken.
func runControl(ctx context.Context, cfg Config, runID string) (report.Row, error) {
	if cfg.Fenced {
		return report.Row{}, &skipError{"the control runs with fencing off: fencing rescues even a lock that always grants"}
	}
	r := newRun(cfg, runID, Control)
	defer r.close()
	lockers := make([]backends.Locker, cfg.Clients)
	for i := range lockers {
		lockers[i] = alwaysGrant{}
	}
	s, err := r.store(ctx, false)
	if err != nil {
		return report.Row{}, err
	}
	rec := r.recorder()
	r.started(Control, cfg.Duration)
	t0 := time.Now()
	work := max(cfg.Work, time.Millisecond)
	if err := load.Run(ctx, lockers, s, rec, work, cfg.Duration); err != nil {
		return report.Row{}, err
	}
	row := r.row(Control, finish(ctx, s, rec), false, time.Since(t0))
	row.LeaseMS = 0
	return r.keep(row), nil
}

// stallTimeout is how long a stalled holder waits for the second client.
func stallTimeout(cfg Config, l backends.Locker) time.Duration {
	if cfg.StallTimeout > 0 {
		return cfg.StallTimeout
	}
	if _, e, ok := backends.TTLOf(l); ok {
		return 3*e + 2*time.Second
	}
	return 30 * time.Second
}

// path returns client i's fault path if the client has dialled through it
// (call it once the client has acquired once); nil otherwise.
func (r *run) path(i int) *faults.Path {
	if p := r.paths[i]; p != nil && p.Dials() > 0 {
		return p
	}
	return nil
}

// noDial is the reason a network fault skips a Locker that dials nothing
// through Client.Dial.
const noDial = "the Locker made no connection through Client.Dial, so its network cannot be faulted: pass Client.Dial to the client library's dialer hook, or implement backends.Freezer"

// freezer returns how to stall client i with its renewals: its fault path,
// or the Locker's own Freezer; a skip when there is neither. Call it once
// client i has acquired once.
func (r *run) freezer(i int) (freeze func() (thaw func()), err error) {
	if p := r.path(i); p != nil {
		return func() func() { p.Freeze(); return p.Thaw }, nil
	}
	if f, ok := r.lockers[i].(backends.Freezer); ok {
		return f.Freeze, nil
	}
	return nil, &skipError{noDial}
}

// warm lets client i acquire and release the free lock once, so that it
// has connected (and a fault path knows whether it is used), and skips a
// fenced run whose Locker gives no token.
func (r *run) warm(ctx context.Context, i int) error {
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	lease, err := load.Acquire(pctx, r.lockers[i])
	if err != nil {
		return fmt.Errorf("suite: %s: the first Acquire of a free lock: %w", r.cfg.Name, err)
	}
	fence := lease.Fence()
	if err := lease.Release(ctx); err != nil {
		return fmt.Errorf("suite: %s: releasing the first lease: %w", r.cfg.Name, err)
	}
	if r.cfg.Fenced && fence == 0 {
		return &skipError{"the backend gives no fencing token (Lease.Fence() is 0)"}
	}
	return nil
}

// runDeterministicPause is the guide's deterministic test. Holder A acquires
// and reads, then stalls: its connections to the lock service freeze, so its
// renewals stop as in a GC or VM stall. B's Acquire returning is the signal
// that A's lease is gone; B reads and writes. Then A resumes and writes the
// value it read before the stall. Unfenced, B's update is lost; fenced, the
// store rejects A's write.
func runDeterministicPause(ctx context.Context, cfg Config, runID string) (report.Row, error) {
	r := newRun(cfg, runID, DeterministicPause)
	defer r.close()
	if err := r.clients(ctx, 2, true); err != nil {
		return report.Row{}, err
	}
	if err := r.warm(ctx, 0); err != nil {
		return report.Row{}, err
	}
	freeze, err := r.freezer(0)
	if err != nil {
		return report.Row{}, err
	}
	a, b := r.lockers[0], r.lockers[1]
	s, err := r.store(ctx, cfg.Fenced)
	if err != nil {
		return report.Row{}, err
	}
	rec := r.recorder()
	r.started(DeterministicPause, expiry(cfg, a))
	t0 := time.Now()
	var (
		wg      sync.WaitGroup
		errB    error
		timeout = stallTimeout(cfg, a)
	)
	// A bound on the whole, for a Locker that never grants a free lock.
	ctx, cancel := context.WithTimeout(ctx, 2*probeTimeout+timeout)
	defer cancel()
	errA := load.Increment(ctx, 0, a, s, rec, 0, load.Hooks{BeforeWrite: func(ctx context.Context) {
		frozen := rec.Now()
		thaw := freeze()
		defer func() { thaw(); r.fault(0, frozen, rec.Now(), "freeze") }()
		bctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		wg.Add(1)
		go func() {
			defer wg.Done()
			errB = load.Increment(bctx, 1, b, s, rec, 0, load.Hooks{})
		}()
		// Wait for B's section to end, or the stall bound to pass: a
		// lease that never expires keeps B out, which is safe.
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-bctx.Done():
		}
	}})
	wg.Wait()
	d := time.Since(t0)
	if errA != nil && !errors.Is(errA, fencing.ErrStale) {
		return report.Row{}, fmt.Errorf("holder A: %w", errA)
	}
	secs := rec.Sections()
	if cfg.Fenced && len(secs) > 0 && secs[0].Fence == 0 {
		return report.Row{}, &skipError{"the backend gives no fencing token (Lease.Fence() is 0)"}
	}
	if errB != nil && !errors.Is(errB, context.DeadlineExceeded) {
		return report.Row{}, fmt.Errorf("holder B: %w", errB)
	}
	res := finish(ctx, s, rec)
	if errB != nil { // B never got in: the lease outlived the stall bound
		// B gets its turn now that A released, so the counter shows both.
		if err := load.Increment(ctx, 1, b, s, rec, 0, load.Hooks{}); err != nil && !errors.Is(err, fencing.ErrStale) {
			return report.Row{}, fmt.Errorf("holder B after the stall: %w", err)
		}
		res = finish(ctx, s, rec)
		if res.Verdict == checker.Kept {
			res.Reason = fmt.Sprintf("the lease did not expire within the %v stall: B waited", timeout)
		}
	}
	return r.keep(r.row(DeterministicPause, res, cfg.Fenced, d)), nil
}

// Run runs one scenario once for cfg outside Ginkgo and returns its result,
// judged but not asserted: for benchmarks and tools. A scenario that cannot
// run against this Locker returns a row whose Verdict is report.Skipped, with
// the reason, and a nil error.
//
// In a chaos worker process started by Run, Run for the worker's Config
// serves as the worker and exits the process: a tool that calls Run must
// build the same Config when it is run again as a worker.
//
// A panic of the Locker, Lease or Store under test, and an Acquire that
// does not return once its context is done, end the scenario with an error
// saying so (the scenario's clients, proxies and counter are removed first).
func Run(ctx context.Context, cfg Config, scenario string) (row report.Row, err error) {
	defer func() {
		if p := recover(); p != nil {
			row, err = report.Row{}, fmt.Errorf("suite: %s: %s: %w", cfg.Name, scenario, &load.PanicError{Value: p, Stack: debug.Stack()})
		}
	}()
	serveIfWorker(&cfg)
	if spec, ok, _ := worker.FromEnv(); ok {
		return report.Row{}, fmt.Errorf("suite: this process is a worker for %q, not for %q", spec.Target, target(&cfg))
	}
	if err := cfg.Validate(); err != nil {
		return report.Row{}, err
	}
	switch scenario {
	case Baseline:
		row, err = runBaseline(ctx, cfg, newRunID())
	case Control:
		row, err = runControl(ctx, cfg, newRunID())
	case DeterministicPause:
		row, err = runDeterministicPause(ctx, cfg, newRunID())
	case ReleaseAfterExpiry:
		row, err = runReleaseAfterExpiry(ctx, cfg, newRunID())
	case Failover:
		row, err = runFailover(ctx, cfg, newRunID())
	case FailoverLoad:
		row, err = runFailoverLoad(ctx, cfg, newRunID())
	default:
		switch {
		case isChaos(scenario):
			row, err = runChaos(ctx, cfg, newRunID(), scenario)
		case isFault(scenario):
			row, err = runFault(ctx, cfg, newRunID(), scenario)
		default:
			return report.Row{}, fmt.Errorf("suite: unknown scenario %q: choose from %v, %v, %v or %v", scenario, Scenarios, ChaosScenarios, FaultScenarios, FailoverScenarios)
		}
	}
	var skip *skipError
	if errors.As(err, &skip) {
		return report.Row{Backend: cfg.Name, Fencing: cfg.Fenced, Scenario: scenario, Verdict: report.Skipped, Reason: skip.reason}, nil
	}
	err = explain(cfg, scenario, err)
	if err != nil && !strings.HasPrefix(err.Error(), "suite: ") {
		err = fmt.Errorf("suite: %s: %s: %w", cfg.Name, scenario, err)
	}
	return row, err
}

// runReleaseAfterExpiry checks the Lease contract that makes a stall
// survivable at all: a holder whose lease expired must not, when it wakes
// and releases, remove the next holder's lock. A acquires and stalls until B
// gets the lock; A resumes and calls Release; then C tries to acquire for a
// quarter of the lease, while B still holds it. C getting in means A's
// Release deleted B's lock (release without the ownership compare).
func runReleaseAfterExpiry(ctx context.Context, cfg Config, runID string) (report.Row, error) {
	if cfg.Fenced {
		return report.Row{}, &skipError{"release does not involve the store: this runs with fencing off"}
	}
	r := newRun(cfg, runID, ReleaseAfterExpiry)
	defer r.close()
	if err := r.clients(ctx, 3, true); err != nil {
		return report.Row{}, err
	}
	if err := r.warm(ctx, 0); err != nil {
		return report.Row{}, err
	}
	freeze, err := r.freezer(0)
	if err != nil {
		return report.Row{}, err
	}
	a, b, c := r.lockers[0], r.lockers[1], r.lockers[2]
	// The timeline: each client's hold, from Acquire returning to Release
	// (or the scenario's end), none of them writing.
	rec := r.recorder()
	hold := func(id int, asked, start time.Duration) {
		rec.Add(history.Section{Client: id, Asked: asked, Start: start, End: rec.Now(), Outcome: history.Aborted})
	}
	r.started(ReleaseAfterExpiry, expiry(cfg, a))
	t0 := time.Now()
	askedA := rec.Now()
	// A bound, for a Locker that never grants; long enough for the whole
	// scenario, in case the Lease depends on Acquire's context.
	actx, cancelA := context.WithTimeout(ctx, 2*probeTimeout+stallTimeout(cfg, a))
	defer cancelA()
	la, err := load.Acquire(actx, a)
	if err != nil {
		return report.Row{}, fmt.Errorf("holder A: %w", err)
	}
	startA, frozen := rec.Now(), rec.Now()
	thaw := freeze()
	bctx, cancel := context.WithTimeout(ctx, stallTimeout(cfg, a))
	askedB := rec.Now()
	lb, err := load.Acquire(bctx, b)
	startB := rec.Now()
	cancel()
	thaw()
	r.fault(0, frozen, rec.Now(), "freeze")
	if err != nil {
		_ = la.Release(ctx)
		if errors.Is(err, context.DeadlineExceeded) {
			return report.Row{}, &skipError{"the lease did not expire while its holder stalled, so no second holder got in"}
		}
		return report.Row{}, fmt.Errorf("holder B: %w", err)
	}
	defer lb.Release(context.WithoutCancel(ctx))
	if err := la.Release(ctx); err != nil {
		return report.Row{}, fmt.Errorf("holder A's late Release returned an error (it must return nil for a lease that is no longer its own): %w", err)
	}
	hold(0, askedA, startA)
	lease := cfg.Lease
	if t, _, ok := backends.TTLOf(a); ok {
		lease = t
	}
	cctx, cancel := context.WithTimeout(ctx, max(lease/4, 20*time.Millisecond))
	askedC := rec.Now()
	lc, err := load.Acquire(cctx, c)
	cancel()
	row := report.Row{Backend: cfg.Name, Scenario: ReleaseAfterExpiry, LeaseMS: lease.Milliseconds(), Verdict: report.Kept}
	switch {
	case err == nil:
		startC := rec.Now()
		_ = lc.Release(ctx)
		hold(2, askedC, startC)
		row.Verdict = report.Broken
		row.Reason = "the expired holder's Release removed the next holder's lock: a third client acquired it while the second held it"
	case !errors.Is(err, context.DeadlineExceeded):
		return report.Row{}, fmt.Errorf("client C: %w", err)
	}
	hold(1, askedB, startB)
	row.DurationMS = time.Since(t0).Milliseconds()
	return r.keep(row), nil
}
