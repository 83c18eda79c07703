// Package suite is locksuite's conformance suite: Ginkgo v2 specs that tell
// whether a distributed lock keeps the data it protects safe when its holder
// pauses past its lease. The specs are written once against
// backends.Locker; a Config names the Locker, the protected counter, the
// lease and whether the counter checks fencing tokens.
//
// Two entry points, as in csi-sanity:
//
//   - Test(t, cfg) registers the specs for cfg and runs them: one call in a
//     lock library's own go test.
//   - GinkgoTest(&cfg) only registers them, inside an existing Ginkgo suite;
//     the suite reads *cfg when each spec runs, so a BeforeEach may change it.
//
// Every spec judges the counter invariant (each acknowledged write is in
// the counter exactly once), not that a lock was acquired, and its text says
// what it asserts: "keeps …" or "does not …" (the invariant must hold),
// "loses …" (it must break: the control, and ExpectLoss), or "measures …"
// (the verdict is reported, not asserted). The scenarios are one table
// (Scenarios); each run is built by harness/run. Labels: the Config's Name
// and its Service (the kind of lock service, "redis": a renamed Config
// keeps it), "fenced" or "unfenced", the scenario's name, and its family
// ("chaos", "fault", "cluster", "nodes").
package suite

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/run"
	"github.com/locksuite/locksuite/harness/worker"
)

// Test registers the specs for each cfg and runs them as one Ginkgo suite
// (ginkgo allows one RunSpecs per test binary: pass every Config here). t is
// a *testing.T, or any ginkgo.GinkgoTestingT. It reports whether all specs
// passed.
//
// A fenced Config whose lock gives no fencing token is not registered:
// before registering it, Test acquires its lock once and reads the grant's
// Lease.Fence(); if it is 0, fenced mode does not apply to this lock (every
// fenced spec would skip), and Test says so in one line of its output
// instead. A Config that cannot be probed (its server is down, its Config
// is invalid) is registered as it is: its specs then say what is wrong.
//
// Before the specs, Test prints the sizes each Config runs with
// (Config.Sizes); after them, the matrix of the results: a line per Config
// (backend and fencing), a column per scenario, each cell kept, BROKEN n
// lost, unknown or – (skipped), the reasons as numbered notes. With
// LOCKSUITE_REPORT_DIR set (ReportDirEnv), it also writes the rows as JSON
// and the matrix as Markdown there.
func Test(t GinkgoTestingT, cfgs ...Config) bool {
	name := ""
	if n, ok := t.(interface{ Name() string }); ok {
		name = n.Name()
	}
	_, isWorker, _ := worker.FromEnv()
	var (
		mu           sync.Mutex
		rows         []report.Row
		unregistered []string
	)
	for i := range cfgs {
		if next := cfgs[i].Report; !isWorker {
			cfgs[i].Report = func(r report.Row) {
				mu.Lock()
				rows = append(rows, r)
				mu.Unlock()
				if next != nil {
					next(r)
				}
			}
		}
		if cfgs[i].workerArgv == nil {
			cfgs[i].workerArgv = workerArgv(name)
		}
		if !isWorker && cfgs[i].Fenced {
			if reason := cannotFence(cfgs[i]); reason != "" {
				logf("locksuite: %s: not registered: %s", describe(&cfgs[i]), reason)
				unregistered = append(unregistered, describe(&cfgs[i])+": not registered: "+reason)
				continue
			}
		}
		if !isWorker {
			logf("locksuite: %s: %s", describe(&cfgs[i]), cfgs[i].Sizes())
		}
		GinkgoTest(&cfgs[i])
	}
	if spec, ok, _ := worker.FromEnv(); ok {
		// A worker process whose Config is not among cfgs: say so, and end.
		fmt.Fprintf(os.Stderr, "locksuite worker: no Config named %q in this test\n", spec.Target)
		os.Exit(3)
	}
	RegisterFailHandler(Fail)
	ok := RunSpecs(t, "locksuite")
	mu.Lock()
	defer mu.Unlock()
	report.Sort(rows, Order()...)
	writeMatrix(rows, unregistered)
	if dir := os.Getenv(ReportDirEnv); dir != "" {
		if err := writeReports(dir, name, rows, unregistered); err != nil {
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
// registered by Test.
const NoFence = "the lock gives no fencing token (Lease.Fence() is 0), so a fenced store has nothing to compare and every fenced spec would skip; leave the fenced Config out, or return from Fence a token that increases with every grant"

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
// and so its text; the rest is read when each spec runs.
//
// In a chaos worker process (see harness/worker), GinkgoTest for the
// worker's Config runs the worker and exits the process instead.
func GinkgoTest(cfg *Config) {
	serveIfWorker(cfg)
	if _, ok, _ := worker.FromEnv(); ok {
		return // a worker for another Config: register nothing
	}
	runID := newRunID()
	labels := []string{cfg.Name, fencedLabel(cfg)}
	if cfg.Service != "" && cfg.Service != cfg.Name {
		labels = append(labels, cfg.Service)
	}
	Describe(describe(cfg), Label(labels...), func() {
		var c Config
		BeforeEach(func() {
			c = *cfg
			Expect(c.Validate()).To(Succeed())
		})
		for i := range table {
			sc := &table[i]
			want := sc.Expect(cfg)
			labels := []string{sc.Name}
			if sc.Family != "" {
				labels = append(labels, sc.Family)
			}
			It(sc.Text.For(want), Label(labels...), func(ctx SpecContext) {
				row, err := sc.run(ctx, c, runID)
				if r, ok := skipped(c, sc.Name, err); ok {
					publish(c, r)
					Skip(r.Reason)
				}
				if err != nil {
					// No verdict: the row says why, so that a report (and
					// the CLI's exit status) shows the run as unknown, not
					// missing.
					err = explain(c, sc.Name, err)
					publish(c, report.Row{Backend: c.Name, Fencing: c.Fenced, Scenario: sc.Name, Verdict: report.Unknown,
						Reason: err.Error(), LeaseMS: c.Lease.Milliseconds(), Expected: want.Verdict()})
					Fail(err.Error())
				}
				row.Expected = want.Verdict()
				publish(c, row)
				if row.Schedule != "" {
					GinkgoWriter.Printf("seed %d, faults: %s; health: %s; %s\n", row.Seed, row.Schedule, row.Health, row.Reason)
				}
				assertVerdict(row, want)
				if sc.check != nil {
					sc.check(row)
				}
			}, SpecTimeout(specTimeout))
		}
	})
}

// describe is the text of cfg's container: "redis lock, fenced".
func describe(cfg *Config) string { return fmt.Sprintf("%s lock, %s", cfg.Name, fencedLabel(cfg)) }

func fencedLabel(cfg *Config) string {
	if cfg.Fenced {
		return "fenced"
	}
	return "unfenced"
}

// assertVerdict asserts what want says of row's verdict.
func assertVerdict(row report.Row, want Expectation) {
	GinkgoHelper()
	switch want {
	case Keeps:
		Expect(row.Verdict).To(Equal(report.Kept), "%s (seed %d, faults %s)", row.Reason, row.Seed, row.Schedule)
	case Loses:
		Expect(row.Verdict).To(Equal(report.Broken), "the run was expected to lose an update (the control, or ExpectLoss unfenced), but it lost none: %d writes, counter %d (%s; seed %d, faults %s)",
			row.Writes, row.Counter, row.Reason, row.Seed, row.Schedule)
	default:
		Expect(row.Verdict).NotTo(Equal(report.Unknown), row.Reason)
	}
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

func publish(c Config, row report.Row) {
	AddReportEntry("locksuite", row)
	if c.Report != nil {
		c.Report(row)
	}
}
