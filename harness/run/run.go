// Package run is one scenario run, built once for every scenario (etcd's
// robustness layout): the clients and the counter are made, the run's
// fault or fault schedule is made for them and checked against its
// target, then the load, the schedule and the progress reports run under
// one errgroup, every fault is healed whatever happens (also when the run
// fails, is cancelled or panics), then the checkers judge the history, and
// the run's row and artifacts are written.
//
// What varies between scenarios is the Load (what the clients do, and at
// which moment they strike the run's fault) and the Nemesis (which fault,
// or which schedule of faults): harness/traffic drives the critical
// sections, harness/history records them, harness/faults makes and records
// the faults, harness/checker judges, harness/report writes.
package run

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/harness/checker"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/history"
	"github.com/locksuite/locksuite/harness/machine"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/traffic"
)

// Dialer connects to the lock service (suite.Client.Dial).
type Dialer = func(ctx context.Context, network, address string) (net.Conn, error)

// Setup is what a run is told: what to test, and how to make its clients
// and its counter.
type Setup struct {
	Backend  string // the backend's name, for rows and errors
	Scenario string // the scenario's name
	Key      string // the lock's and the counter's name, unique to the run
	Fenced   bool   // whether the counter checks fences
	Lease    time.Duration
	Work     time.Duration // each critical section's time between read and write
	// StallTimeout bounds how long a stalled holder waits for a second
	// client; 0: 3 × the Locker's expiry + 2 s, or 30 s without one.
	StallTimeout time.Duration
	// NewLocker makes client id's Locker, dialling the lock service with
	// dial and asking for lease.
	NewLocker func(ctx context.Context, id int, dial Dialer, lease time.Duration) (backends.Locker, error)
	// NewStore opens the counter name (see suite.Config.NewStore).
	NewStore func(ctx context.Context, name string, fenced bool) (fencing.Store, error)
	// Servers is the lock service's processes (suite.Config.Servers), or
	// nil.
	Servers faults.Service
	// Nodes, if not nil, starts the lock service anew on nodes, for the
	// node scenarios; nil: they are skipped.
	Nodes *NodeService
	// Artifacts, if not empty, is where the run leaves its history and
	// timeline (suite.Config.Artifacts).
	Artifacts string
	// Judge, if not nil, gives the finished row its final verdict before
	// the run writes its artifacts and returns it (the suite's: what its
	// spec expects, and whether the machine's stalls explain a loss), so
	// that the history and the timeline show the row the run reports.
	Judge func(report.Row) report.Row
	// Progress, if not nil, is told how the run goes every second.
	Progress func(report.Progress)
	// Explain, if not nil, rewrites an error that ends a run with an
	// unknown verdict into one that says what went wrong for the user.
	Explain func(error) error
}

// Load is what a scenario's clients do, and the moments at which they
// strike the run's fault. A load constructs no fault: it strikes the one
// it is given, or runs under the schedule that Execute plays.
type Load interface {
	// Prepare makes the run's clients and opens its counter
	// (Fixture.Clients, Fixture.Probe, Fixture.OpenStore), and starts
	// what the run's faults strike (a chaos load's worker processes),
	// before the Nemesis makes them.
	Prepare(ctx context.Context, fx *Fixture) error
	// Planned is how long the load expects to run, for progress reports.
	Planned(fx *Fixture) time.Duration
	// Run runs the clients and strikes f, the run's fault (nil: none),
	// through fx.Log at the moment the load defines, and heals it. A load
	// under a schedule (Fixture.Schedule) runs at least until the
	// schedule's end. It returns what the checks need, when the load is
	// over or ctx is done.
	Run(ctx context.Context, fx *Fixture, f faults.Fault) (Outcome, error)
}

// OptionalFault is implemented by a Load that runs whether or not its fault
// applies (the contract: a promise it cannot exercise is noted, not
// judged). Such a load checks Applies itself and strikes only a fault that
// applies; Execute skips a run whose fault does not apply unless its Load
// implements OptionalFault.
type OptionalFault interface {
	Load
	OptionalFault()
}

// Nemesis is what strikes a run (Jepsen's word), made from the Fixture
// once the load is prepared: Fault, one fault that the load strikes at the
// moment it defines (a holder about to write, halfway through a loop, a
// worker asking at its every-Nth section), or Schedule, faults over the
// run's time that Execute plays beside the load. The zero Nemesis strikes
// nothing.
type Nemesis struct {
	Fault    func(fx *Fixture) faults.Fault
	Schedule func(fx *Fixture) (faults.Schedule, error)
}

// Outcome is what a Load reports besides the history.
type Outcome struct {
	// Elapsed is how long the load ran.
	Elapsed time.Duration
	// Result, if not nil, is the verdict already (a load that judges
	// without the counter, or that failed mid-run): the checkers do not
	// run.
	Result *checker.Result
	// Amend, if not nil, amends the checkers' result (notes in the
	// reason).
	Amend func(*checker.Result)
	// Row, if not nil, adds the load's own figures to the row.
	Row func(*report.Row)
	// Note, if not empty, is appended to the verdict's reason: what the
	// load saw (when a client was granted, against whom).
	Note string
}

// Execute runs one scenario: l's clients under what n makes for them,
// then the checkers. A run that does not apply (a fault's Applies, a
// missing fence: ErrNoFence) returns an error wrapping
// faults.ErrNotApplicable, its text the reason; any other error that ends
// the run without a verdict is an *Error naming the backend and the
// scenario.
func Execute(ctx context.Context, s Setup, l Load, n Nemesis) (report.Row, error) {
	row, err := execute(ctx, s, l, n)
	if err != nil && !errors.Is(err, faults.ErrNotApplicable) {
		var e *Error
		if !errors.As(err, &e) {
			err = &Error{Backend: s.Backend, Scenario: s.Scenario, Err: err}
		}
	}
	return row, err
}

func execute(ctx context.Context, s Setup, l Load, n Nemesis) (row report.Row, err error) {
	began := time.Now()
	fx := &Fixture{Setup: s}
	defer fx.close()
	// Time zero: before the load is prepared, so that the worker
	// processes it starts record on the same clock.
	fx.Rec = history.NewRecorder()
	fx.Log = faults.NewLog(fx.Rec.Now)
	if err := l.Prepare(ctx, fx); err != nil {
		return report.Row{}, err
	}
	// Heal whatever struck, and put the target back, whatever happens.
	defer fx.Log.HealAll()
	f, restore, err := fx.fault(ctx, l, n)
	if err != nil {
		return report.Row{}, err
	}
	defer restore()
	if n.Schedule != nil {
		if fx.Schedule, err = n.Schedule(fx); err != nil {
			return report.Row{}, fmt.Errorf("the fault schedule: %w", err)
		}
		for _, st := range fx.Schedule.Steps {
			if err := st.Fault.Applies(ctx); err != nil {
				return report.Row{}, err
			}
		}
	}
	fx.T0 = fx.Rec.Now()
	setup, planned := time.Since(began), l.Planned(fx)
	stalls, pressure := fx.watchStalls(), machine.ReadPressure()
	defer stalls.Stop()

	var out Outcome
	done, played := make(chan struct{}), make(chan struct{})
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) { // the load, which strikes the fault
		defer close(done)
		defer func() {
			if p := recover(); p != nil {
				err = &traffic.PanicError{Value: p, Stack: debug.Stack()}
			}
		}()
		out, err = l.Run(gctx, fx, f)
		return err
	})
	g.Go(func() error { // the schedule, until the load is over
		defer close(played)
		pctx, cancel := context.WithCancel(gctx)
		defer cancel()
		go func() {
			select {
			case <-done:
			case <-pctx.Done():
			}
			cancel()
		}()
		return fx.Log.Play(pctx, fx.Schedule, fx.T0, fx.Holders)
	})
	g.Go(func() error { // every fault, healed once the load and the schedule are over
		select {
		case <-done:
		case <-gctx.Done():
		}
		<-played
		return fx.Log.HealAll()
	})
	g.Go(func() error { // the progress reports
		fx.progress(done, planned)
		return nil
	})
	if err := g.Wait(); err != nil {
		return report.Row{}, err
	}
	stalls.Stop()
	load := machine.ReadPressure().Since(pressure)
	if err := restore(); err != nil {
		return report.Row{}, err
	}
	var res checker.Result
	if out.Result != nil {
		res = *out.Result
	} else {
		res = judge(ctx, fx.Store, fx.Rec)
	}
	if out.Amend != nil {
		out.Amend(&res)
	}
	untested(&res, fx.Schedule, fx.Log)
	for _, n := range []string{out.Note, sessionNote(fx.Rec.Sections())} {
		if n != "" {
			res.Reason = strings.TrimPrefix(res.Reason+"; "+n, "; ")
		}
	}
	row = fx.row(res, out.Elapsed)
	fx.noteStalls(stalls, load, res, &row)
	row.SetupMS, row.PlannedMS = setup.Milliseconds(), planned.Milliseconds()
	if out.Row != nil {
		out.Row(&row)
	}
	if fx.Judge != nil {
		row = fx.Judge(row)
	}
	return fx.keep(row), nil
}

// untested makes a kept row unknown when its schedule had faults and none
// of them struck: nothing was tested (a loss stands, it needed no fault).
func untested(res *checker.Result, s faults.Schedule, l *faults.Log) {
	if res.Verdict != checker.Kept || len(s.Steps) == 0 || l.Injected() > 0 {
		return
	}
	why := ""
	if m := l.Missed(); len(m) > 0 {
		why = " (" + m[0] + ")"
	}
	res.Verdict = checker.Unknown
	res.Reason = fmt.Sprintf("none of the schedule's %d faults struck%s: nothing was tested; rerun with fewer runs at once (--parallel) on a busy machine", len(s.Steps), why)
}

// fault makes the run's fault (nil: none) and checks that it applies,
// unless l strikes it only where it applies (OptionalFault); restore puts
// its target back (faults.Restorer), once, and is never nil.
func (fx *Fixture) fault(ctx context.Context, l Load, n Nemesis) (f faults.Fault, restore func() error, err error) {
	restore = func() error { return nil }
	if n.Fault == nil {
		return nil, restore, nil
	}
	f = n.Fault(fx)
	if _, optional := l.(OptionalFault); !optional {
		if err := f.Applies(ctx); err != nil {
			return nil, restore, err
		}
	}
	if r, ok := f.(faults.Restorer); ok {
		restore = sync.OnceValue(func() error { return r.Restore(context.WithoutCancel(ctx)) })
	}
	return f, restore, nil
}

// judge reads the final counter and judges the history with both checkers
// (checker.Judge): the counter check, and linearizability.
func judge(ctx context.Context, s fencing.Store, rec *history.Recorder) checker.Result {
	counter, err := s.Value(ctx)
	if err != nil {
		return checker.Result{Verdict: checker.Unknown, Reason: fmt.Sprintf("reading the final counter: %v", err)}
	}
	res := checker.Judge(rec.Sections(), counter, checker.DefaultLinearizeTimeout)
	res.Rejected = int(s.Rejected())
	return res
}

// row fills the result's identity and figures, the faults as they
// happened, and the seed of the schedule they were drawn from.
func (fx *Fixture) row(res checker.Result, d time.Duration) report.Row {
	r := report.Row{
		Backend: fx.Backend, Fencing: fx.Fenced, Scenario: fx.Scenario,
		Writes: res.Writes, Counter: res.Counter, Lost: res.Lost, Overlaps: res.Overlaps, Rejected: res.Rejected,
		Verdict: report.Verdict(res.Verdict.String()), Reason: res.Reason, Linearizable: string(res.Linearizable),
		LeaseMS: fx.TTL().Milliseconds(), DurationMS: d.Milliseconds(), Seed: fx.Schedule.Seed,
	}
	if n := fx.Log.Injected(); n > 0 {
		r.Faults = n
		r.Schedule = fx.Log.Schedule(fx.T0)
	}
	return r
}
