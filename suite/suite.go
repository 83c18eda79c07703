// Package suite is locksuite's conformance suite: Ginkgo v2 specs that tell
// whether a distributed lock keeps the data it protects safe when its holder
// pauses past its lease. The specs are written once against
// backends.Locker; a Config names the Locker, the protected counter, the
// lease and whether the counter checks fencing tokens.
//
// Four entry points; the first two as in csi-sanity:
//
//   - Test(t, cfg) registers the specs for cfg and runs them: one call in a
//     lock library's own go test.
//   - GinkgoTest(&cfg) only registers them, inside an existing Ginkgo suite;
//     the suite reads *cfg when each spec runs, so a BeforeEach may change it.
//   - Execute(t, opts, cfgs...) is Test with Options (scenarios, repeat,
//     runs at once, shard, spec log) and the rows returned: the CLI's.
//   - Run(ctx, cfg, scenario) runs one scenario outside Ginkgo and returns
//     its row, asserting nothing.
//
// Every spec judges the counter invariant (each acknowledged write is in
// the counter exactly once), not that a lock was acquired, and its text says
// what it asserts: "keeps …" or "does not …" (the invariant must hold),
// "loses …" (it must break: the control, and ExpectLoss), or "measures …"
// (the verdict is reported, not asserted). The scenarios are one table
// (Scenarios); each run is built by harness/run. Labels: the Config's Name
// and its Service (the kind of lock service, "redis": a renamed Config
// keeps it), "fenced" or "unfenced", the scenario's name, and its family
// ("chaos", "fault", "cluster", "nodes", "crash", "pitfall").
package suite

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/run"
	"github.com/locksuite/locksuite/harness/worker"
)

// Test registers the specs for each cfg and runs them as one Ginkgo suite
// (Ginkgo allows one RunSpecs per test binary: pass every Config here),
// through Execute with Options{}: every scenario, DefaultParallel runs at
// a time (ParallelEnv sets it). t is a *testing.T, or any
// ginkgo.GinkgoTestingT. It reports whether all specs passed; in a chaos
// worker process, whether the worker ran to its end (see Execute: Test
// serves as the worker and returns, and the test should return too).
//
// A fenced Config whose lock gives no fencing token is not registered
// (see Execute), and Test says so in one line of its output. Before the
// specs, Test prints the sizes each Config runs with (Config.Sizes); after
// them, the matrix of the results: a line per Config (backend and
// fencing), a column per scenario, each cell kept, BROKEN n lost, unknown
// or – (skipped), the reasons as numbered notes. With LOCKSUITE_REPORT_DIR
// set (ReportDirEnv), it also writes the rows as JSON and the matrix as
// Markdown there.
func Test(t GinkgoTestingT, cfgs ...Config) bool {
	res := Execute(t, Options{}, cfgs...)
	if res.Worker {
		return res.Passed
	}
	writeMatrix(res.Rows, res.Unregistered)
	ok := res.Passed
	if dir := os.Getenv(ReportDirEnv); dir != "" {
		name := ""
		if n, isNamed := t.(interface{ Name() string }); isNamed {
			name = n.Name()
		}
		if err := writeReports(dir, name, res.Rows, res.Unregistered); err != nil {
			fmt.Fprintf(os.Stderr, "locksuite: %s: %v\n", ReportDirEnv, err)
			ok = false
		}
	}
	return ok
}

// ReportDirEnv names a directory (created if missing) where Test writes its
// results when the specs have run: locksuite-TEST.json, the rows as a JSON
// array (as locksuite run --json writes them, for locksuite diff), and
// locksuite-TEST.md, the matrix as Markdown (for a CI job's summary); TEST
// is the test's name.
const ReportDirEnv = "LOCKSUITE_REPORT_DIR"

// writeMatrix prints the matrix of rows (a line per Config, a column per
// scenario) on standard output, after Ginkgo's report, and the Configs not
// registered.
func writeMatrix(rows []report.Row, unregistered []string) {
	if len(rows) == 0 && len(unregistered) == 0 {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nlocksuite: %d runs\n", len(rows))
	if len(rows) > 0 {
		_ = report.WriteMatrix(&b, rows)
	}
	for _, u := range unregistered {
		fmt.Fprintf(&b, "%s\n", u)
	}
	fmt.Fprint(os.Stdout, b.String())
}

// writeReports writes rows into dir (ReportDirEnv).
func writeReports(dir, test string, rows []report.Row, unregistered []string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	base := "locksuite"
	if test != "" {
		base += "-" + strings.NewReplacer("/", "_", " ", "_").Replace(test)
	}
	if err := report.WriteJSON(filepath.Join(dir, base+".json"), rows); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "### locksuite: %s\n\n", cmp.Or(test, "suite.Test"))
	if len(rows) > 0 {
		if err := report.WriteMatrixMarkdown(&b, rows); err != nil {
			return err
		}
	}
	for _, u := range unregistered {
		fmt.Fprintf(&b, "\n- %s\n", u)
	}
	return os.WriteFile(filepath.Join(dir, base+".md"), []byte(b.String()), 0o644)
}

// NoFence says why a fenced Config whose lock gives no token is not
// registered by Execute (and Test): the text of run.ErrNoFence, which a
// fenced run of such a lock is skipped with.
var NoFence = run.ErrNoFence.Error()

// cannotFence acquires cfg's lock once, on a key of its own, and returns
// NoFence if the grant's Fence() is 0; "" if it has a token, or if the probe
// could not tell (an invalid Config, an Acquire that failed: the specs
// report those).
func cannotFence(cfg Config) (reason string) {
	if cfg.Validate() != nil {
		return ""
	}
	defer func() {
		if recover() != nil { // a panicking Locker: its specs say so
			reason = ""
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	key := fmt.Sprintf("%s/%s/%s/fence-probe", cfg.Prefix, newRunID(), cfg.Name)
	l, err := cfg.NewLocker(ctx, Client{ID: 0, Key: key, Dial: directDial, Lease: cfg.Lease, Endpoint: cfg.Endpoint})
	if err != nil || l == nil {
		return ""
	}
	defer func() {
		if c, ok := l.(backends.Cleaner); ok {
			_ = c.Cleanup(context.WithoutCancel(ctx))
		}
		_ = l.Close()
	}()
	if errors.Is(run.ProbeFence(ctx, l), run.ErrNoFence) {
		return NoFence
	}
	return ""
}

// logf writes a line to standard output, where Ginkgo writes its own
// report: go test shows it where it shows the specs' (with -v, or for a
// package in the current directory).
func logf(format string, args ...any) { fmt.Fprintf(os.Stdout, format+"\n", args...) }

// GinkgoTest registers the specs for *cfg in the current Ginkgo suite
// without running them. It may be called several times, for several
// backends or fencing modes, before one RunSpecs. cfg's Name, Fenced,
// ExpectLoss and Servers are read now: they decide what each spec asserts,
// and so its text; the rest is read when each spec runs. Each spec runs its
// scenario itself, one after another (Execute can run them ahead, several at
// once).
//
// In a chaos worker process (see harness/worker), GinkgoTest registers
// nothing: for the worker's Config it serves as the worker, and returns
// once the worker is done (a worker that fails says why on its standard
// error; its coordinator reads the failure from its events). The worker
// is run with -test.run narrowed to the test that runs the Ginkgo suite
// (the one whose goroutine calls GinkgoTest, as a container's body within
// RunSpecs does), and with -ginkgo.dry-run, so that its RunSpecs then runs
// no spec.
func GinkgoTest(cfg *Config) {
	if _, isWorker, _ := worker.FromEnv(); isWorker {
		_, _ = serveWorker(false, cfg)
		return
	}
	if cfg.workerArgv == nil {
		cfg.workerArgv = testArgv()
	}
	register(cfg, Scenarios(), nil)
}

// register registers cfg's specs of the given scenarios: run by sched
// ahead of their specs, or, with sched nil, each inside its spec.
func register(cfg *Config, scenarios []Scenario, sched *scheduler) {
	runID := newRunID()
	var frozen Config // what sched's jobs run: cfg as registered
	if sched != nil {
		frozen = *cfg
	}
	outer := containerLabels(cfg)
	Describe(describe(cfg), Label(outer...), func() {
		var c Config
		BeforeEach(func() {
			c = *cfg
			Expect(c.Validate()).To(Succeed())
		})
		for i := range scenarios {
			sc := &scenarios[i]
			want := sc.Expect(cfg)
			labels := specLabels(sc)
			var j *job
			// reported: the job gave its row to Report as it ended (the CLI
			// writes its outputs then, not when Ginkgo reaches the spec).
			var reported atomic.Bool
			if sched != nil {
				j = sched.add(func(ctx context.Context) (report.Row, error) {
					if err := frozen.Validate(); err != nil {
						return report.Row{}, err // the spec's BeforeEach fails with it
					}
					row, err := protect(ctx, func(ctx context.Context) (report.Row, error) { return sc.timed(ctx, frozen, runID, want) })
					if frozen.Report != nil {
						r, _ := settle(frozen, sc.Name, want, row, err, ctx.Err() != nil)
						frozen.Report(r)
					}
					reported.Store(true)
					return row, err
				}, classOf(sc), footprintOf(sc, cfg), estimate(sc, cfg), []string{describe(cfg), sc.Text.For(want)}, slices.Concat(outer, labels))
			}
			It(sc.Text.For(want), Label(labels...), func(ctx SpecContext) {
				var row report.Row
				var err error
				if j != nil {
					row, err = sched.await(ctx, j)
				} else {
					row, err = sc.timed(ctx, c, runID, want)
				}
				row, skip := settle(c, sc.Name, want, row, err, ctx.Err() != nil)
				AddReportEntry("locksuite", row)
				if c.Report != nil && (j == nil || !reported.Load()) {
					c.Report(row)
				}
				if skip || row.Stalled() {
					Skip(row.Reason)
				}
				if err != nil {
					Fail(row.Reason)
				}
				if row.Schedule != "" {
					GinkgoWriter.Printf("seed %d, faults: %s; health: %s; %s\n", row.Seed, row.Schedule, row.Health, row.Reason)
				}
				assertVerdict(row, want)
				if sc.check != nil && want != Measures {
					sc.check(row)
				}
			}, SpecTimeout(specTimeout))
		}
	})
}

// timed is sc.run for a spec that expects want, with the row's WallMS.
func (sc *Scenario) timed(ctx context.Context, cfg Config, runID string, want Expectation) (report.Row, error) {
	t0 := time.Now()
	row, err := sc.run(ctx, cfg, runID, want)
	if row.Verdict != report.Skipped {
		row.WallMS = time.Since(t0).Milliseconds()
	}
	return row, err
}

// describe is the text of cfg's container: "redis lock, fenced".
func describe(cfg *Config) string { return fmt.Sprintf("%s lock, %s", cfg.Name, fencedLabel(cfg)) }

func fencedLabel(cfg *Config) string {
	if cfg.Fenced {
		return "fenced"
	}
	return "unfenced"
}

// assertVerdict fails the spec when row is a finding (report.Row.Finding,
// the rule the CLI's exit status and the matrix's "!" follow too), saying
// what want expected of it.
func assertVerdict(row report.Row, want Expectation) {
	GinkgoHelper()
	why := fmt.Sprintf("%s (seed %d, faults %s)", row.Reason, row.Seed, row.Schedule)
	switch {
	case row.Verdict == report.Unknown:
		why = "no verdict: " + row.Reason
	case want == Loses:
		why = fmt.Sprintf("the run was expected to lose an update (the control, or ExpectLoss unfenced), but it lost none: %d writes, counter %d (%s; seed %d, faults %s)",
			row.Writes, row.Counter, row.Reason, row.Seed, row.Schedule)
	}
	Expect(row.Finding()).To(BeFalse(), "%s %s, expected %s: %s", row.Scenario, row.Verdict, want.Verdict(), why)
}

// checkBaseline: with no faults, clients wrote, no acknowledged sections
// overlapped, and the history is linearizable: otherwise the harness
// measures itself.
func checkBaseline(row report.Row) {
	GinkgoHelper()
	Expect(row.Writes).To(BeNumerically(">", 0), "no client wrote anything")
	Expect(row.Overlaps).To(BeZero(), "with no faults, %d acknowledged critical sections overlapped another: the lock was not exclusive, or the harness measures itself", row.Overlaps)
	Expect(row.Linearizable).To(Equal("ok"), "with no faults, the history must be linearizable")
}

// checkControl: the second checker catches the control too.
func checkControl(row report.Row) {
	GinkgoHelper()
	Expect(row.Linearizable).To(Equal("illegal"), "the linearizability check did not catch a lock that always grants")
}

const specTimeout = 5 * 60e9 // 5 minutes: a bound for a hung server, not a target

// settle is the row a spec reports for its run's (row, err): the skip, with
// skip true, of a scenario that does not apply; an unknown row saying why
// (interrupted: the run was cut short) when the run ended without a
// verdict; else row, as its run judged it (judged: unknown where the
// machine's stalls explain the loss of a run unfenced that expected to keep
// the invariant, Row.MachineStall; the spec then skips, saying so).
func settle(c Config, scenario string, want Expectation, row report.Row, err error, interrupted bool) (report.Row, bool) {
	if r, ok := skipped(c, scenario, err); ok {
		return r, true
	}
	if interrupted && err == nil && row.Verdict != report.Skipped {
		// The run returned with its context ended: whatever it found (most
		// often no final counter) was cut short with it.
		err = errors.New(cmp.Or(row.Reason, "it returned after its context ended"))
	}
	if err != nil {
		// No verdict: the row says why, so that a report (and the CLI's
		// exit status) shows the run as unknown, not missing.
		err = explain(c, scenario, err)
		if interrupted {
			err = fmt.Errorf("cut short before its verdict: the run was interrupted (%w)", err)
		}
		return report.Row{Backend: c.Name, Fencing: c.Fenced, Scenario: scenario, Verdict: report.Unknown,
			Reason: err.Error(), LeaseMS: c.Lease.Milliseconds(), Expected: want.Verdict()}, false
	}
	return row, false // judged by its run (judged, as run.Setup.Judge)
}

// judged is the finished row of a run of c whose spec expects want: with
// what the spec expects (Row.Expected), a broken row of a lock unsafe by
// design saying so (Config.Unsafe), and unknown where the machine's stalls
// explain the loss of a run unfenced that expected the invariant kept
// (Row.MachineStall). The run applies it before it writes its artifacts.
func judged(c Config, want Expectation, row report.Row) report.Row {
	row.Expected = want.Verdict()
	if row.Verdict == report.Broken && c.Unsafe != "" {
		row.Reason += "; unsafe by design: " + c.Unsafe
	}
	if row.MachineStall != "" && row.Verdict == report.Broken && want == Keeps && !c.Fenced {
		// The machine, not the lock, lost the update: no verdict (a fenced
		// run must keep it under any pause; an expected loss is broken).
		row.Verdict, row.Reason = report.Unknown, row.MachineStall+" ("+row.Reason+")"
	}
	return row
}
