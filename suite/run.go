package suite

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/run"
	"github.com/locksuite/locksuite/harness/traffic"
	"github.com/locksuite/locksuite/harness/worker"
)

// alwaysGrant is the control: a "lock" that grants every Acquire at once,
// like SET without NX. It gives no fence.
type alwaysGrant struct{}

func (alwaysGrant) Acquire(ctx context.Context) (backends.Lease, error) { return grant{}, ctx.Err() }
func (alwaysGrant) Close() error                                        { return nil }

type grant struct{}

func (grant) Fence() uint64                 { return 0 }
func (grant) Release(context.Context) error { return nil }

var runSeq atomic.Int64

func newRunID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// setup is what the run of scenario sc is told about cfg.
func setup(cfg *Config, runID, scenario string) run.Setup {
	f := "unfenced"
	if cfg.Fenced {
		f = "fenced"
	}
	key := fmt.Sprintf("%s/%s/%s/%s/%s-%d", cfg.Prefix, runID, cfg.Name, f, scenario, runSeq.Add(1))
	return run.Setup{
		Backend: cfg.Name, Scenario: scenario, Fenced: cfg.Fenced, Key: key,
		Lease: cfg.Lease, Work: cfg.Work, StallTimeout: cfg.StallTimeout,
		NewLocker: func(ctx context.Context, id int, dial run.Dialer, lease time.Duration) (backends.Locker, error) {
			return cfg.NewLocker(ctx, Client{ID: id, Key: key, Dial: dial, Lease: lease, Endpoint: cfg.Endpoint})
		},
		NewStore: cfg.NewStore, Servers: cfg.Servers, Nodes: cfg.Nodes, Artifacts: cfg.Artifacts, Progress: cfg.Progress,
		Explain: func(err error) error { return explain(*cfg, scenario, err) },
	}
}

// run runs sc once for cfg: a skipped run returns an error wrapping
// faults.ErrNotApplicable. A spec's run (want not 0) has its row judged
// (judged) before its artifacts are written; Run's (0) asserts nothing.
func (sc *Scenario) run(ctx context.Context, cfg Config, runID string, want Expectation) (report.Row, error) {
	if cfg.Fenced && sc.unfenced != "" {
		return report.Row{}, faults.NotApplicable(sc.unfenced)
	}
	s := setup(&cfg, runID, sc.Name)
	if want != 0 {
		s.Judge = func(r report.Row) report.Row { return judged(cfg, want, r) }
	}
	l := sc.load(&cfg, &s)
	var n run.Nemesis
	if sc.fault != nil {
		n.Fault = func(fx *run.Fixture) faults.Fault { return sc.fault(&cfg, fx) }
	}
	if sc.schedule != nil {
		n.Schedule = func(fx *run.Fixture) (faults.Schedule, error) { return sc.schedule(&cfg, fx) }
	}
	return run.Execute(ctx, s, l, n)
}

// skipped is the row of a run that does not apply, and its reason; ok is
// false for any other error.
func skipped(cfg Config, scenario string, err error) (report.Row, bool) {
	if !errors.Is(err, faults.ErrNotApplicable) {
		return report.Row{}, false
	}
	return report.Row{Backend: cfg.Name, Fencing: cfg.Fenced, Scenario: scenario, Verdict: report.Skipped,
		Reason: err.Error(), LeaseMS: cfg.Lease.Milliseconds()}, true
}

// Run runs one scenario once for cfg outside Ginkgo and returns its result,
// judged but not asserted (Row.Expected is empty): for benchmarks and
// tools. A scenario that cannot run against this Locker returns a row
// whose Verdict is report.Skipped, with the reason, and a nil error. A run
// that ends without a verdict returns a *run.Error naming the backend and
// the scenario.
//
// In a chaos worker process started by Run, Run for the worker's Config
// serves as the worker and returns ErrWorker (wrapping the worker's error
// if it failed), with no row: the caller has nothing more to do, and
// returns (a tool ends, failing if the error wraps another; a test returns).
// In a test binary, the worker is run with -test.run narrowed to the
// top-level test whose goroutine calls Run.
// A tool that calls Run must build the same Config when it is run again as
// a worker.
//
// A panic of the Locker, Lease or Store under test, and an Acquire that
// does not return once its context is done, end the scenario with an error
// saying so (the scenario's clients, proxies and counter are removed
// first).
func Run(ctx context.Context, cfg Config, scenario string) (row report.Row, err error) {
	defer func() {
		if p := recover(); p != nil {
			row, err = report.Row{}, &run.Error{Backend: cfg.Name, Scenario: scenario, Err: &traffic.PanicError{Value: p, Stack: debug.Stack()}}
		}
	}()
	if served, err := serveWorker(false, &cfg); served {
		return report.Row{}, workerError(err)
	}
	if spec, ok, _ := worker.FromEnv(); ok {
		return report.Row{}, fmt.Errorf("suite: this process is a worker for %q, not for %q", spec.Target, target(&cfg))
	}
	if cfg.workerArgv == nil {
		cfg.workerArgv = testArgv()
	}
	if err := cfg.Validate(); err != nil {
		return report.Row{}, err
	}
	sc := scenarioNamed(scenario)
	if sc == nil {
		var names []string
		for _, s := range table {
			names = append(names, s.Name)
		}
		return report.Row{}, fmt.Errorf("suite: unknown scenario %q: choose from %s", scenario, strings.Join(names, ", "))
	}
	row, err = sc.run(ctx, cfg, newRunID(), 0)
	if r, ok := skipped(cfg, scenario, err); ok {
		r.LeaseMS = 0
		return r, nil
	}
	return row, explain(cfg, scenario, err)
}
