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
// Every spec checks the counter invariant (each acknowledged write is in the
// counter exactly once), not that a lock was acquired. Labels: the backend's
// Name, "fenced" or "unfenced", and the scenario (Scenarios).
package suite

import (
	"errors"
	"fmt"
	"os"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/worker"
)

// Test registers the specs for each cfg and runs them as one Ginkgo suite
// (ginkgo allows one RunSpecs per test binary: pass every Config here). t is
// a *testing.T, or any ginkgo.GinkgoTestingT. It reports whether all specs
// passed.
func Test(t GinkgoTestingT, cfgs ...Config) bool {
	name := ""
	if n, ok := t.(interface{ Name() string }); ok {
		name = n.Name()
	}
	for i := range cfgs {
		if cfgs[i].workerArgv == nil {
			cfgs[i].workerArgv = workerArgv(name)
		}
		GinkgoTest(&cfgs[i])
	}
	if spec, ok, _ := worker.FromEnv(); ok {
		// A worker process whose Config is not among cfgs: say so, and end.
		fmt.Fprintf(os.Stderr, "locksuite worker: no Config named %q in this test\n", spec.Target)
		os.Exit(3)
	}
	RegisterFailHandler(Fail)
	return RunSpecs(t, "locksuite")
}

// GinkgoTest registers the specs for *cfg in the current Ginkgo suite
// without running them. It may be called several times, for several
// backends or fencing modes, before one RunSpecs.
//
// In a chaos worker process (see harness/worker), GinkgoTest for the
// worker's Config runs the worker and exits the process instead.
func GinkgoTest(cfg *Config) {
	serveIfWorker(cfg)
	if _, ok, _ := worker.FromEnv(); ok {
		return // a worker for another Config: register nothing
	}
	runID := newRunID()
	fenced := "unfenced"
	if cfg.Fenced {
		fenced = "fenced"
	}
	Describe(fmt.Sprintf("%s lock, %s", cfg.Name, fenced), Label(cfg.Name, fenced), func() {
		var c Config
		BeforeEach(func() {
			c = *cfg
			Expect(c.Validate()).To(Succeed())
		})
		// record reports a row, attaches it to the Ginkgo report, and skips
		// or fails by the scenario's outcome.
		record := func(scenario string, row report.Row, err error) report.Row {
			GinkgoHelper()
			var skip *skipError
			if errors.As(err, &skip) {
				row = report.Row{Backend: c.Name, Fencing: c.Fenced, Scenario: scenario, Verdict: report.Skipped,
					Reason: skip.reason, LeaseMS: c.Lease.Milliseconds()}
				publish(c, row)
				Skip(skip.reason)
			}
			if err != nil {
				// No verdict: the row says why, so that a report (and the
				// CLI's exit status) shows the run as unknown, not missing.
				err = explain(c, scenario, err)
				publish(c, report.Row{Backend: c.Name, Fencing: c.Fenced, Scenario: scenario, Verdict: report.Unknown,
					Reason: err.Error(), LeaseMS: c.Lease.Milliseconds()})
				Fail(err.Error())
			}
			return row
		}

		It("keeps the counter equal to the acknowledged writes with no faults", Label(Baseline), func(ctx SpecContext) {
			row, err := runBaseline(ctx, c, runID)
			row = record(Baseline, row, err)
			row.Expected = report.Kept
			publish(c, row)
			Expect(row.Writes).To(BeNumerically(">", 0), "no client wrote anything in %v", c.Duration)
			Expect(row.Verdict).To(Equal(report.Kept), "with no faults: %s", row.Reason)
			Expect(row.Overlaps).To(BeZero(), "with no faults, %d acknowledged critical sections overlapped another: the lock was not exclusive, or the harness measures itself", row.Overlaps)
			Expect(row.Linearizable).To(Equal("ok"), "with no faults, the history must be linearizable")
		}, SpecTimeout(specTimeout))

		It("catches a lock that grants to everyone (the harness's own control)", Label(Control), func(ctx SpecContext) {
			row, err := runControl(ctx, c, runID)
			row = record(Control, row, err)
			row.Expected = report.Broken
			publish(c, row)
			Expect(row.Verdict).To(Equal(report.Broken),
				"a lock that always grants came out %s (%d writes, counter %d): the harness cannot see lost updates", row.Verdict, row.Writes, row.Counter)
			Expect(row.Linearizable).To(Equal("illegal"), "the linearizability check did not catch a lock that always grants")
		}, SpecTimeout(specTimeout))

		It("does not lose an update when a holder stalls past its lease", Label(DeterministicPause), func(ctx SpecContext) {
			row, err := runDeterministicPause(ctx, c, runID)
			row = record(DeterministicPause, row, err)
			if c.ExpectLoss {
				row.Expected = report.Broken
				publish(c, row)
				Expect(row.Verdict).To(Equal(report.Broken), "ExpectLoss is set, but the stalled holder lost no update: %d writes, counter %d (%s)", row.Writes, row.Counter, row.Reason)
				return
			}
			row.Expected = report.Kept
			publish(c, row)
			Expect(row.Verdict).To(Equal(report.Kept), row.Reason)
		}, SpecTimeout(specTimeout))

		It("does not let an expired holder's Release remove the next holder's lock", Label(ReleaseAfterExpiry), func(ctx SpecContext) {
			row, err := runReleaseAfterExpiry(ctx, c, runID)
			row = record(ReleaseAfterExpiry, row, err)
			row.Expected = report.Kept
			publish(c, row)
			Expect(row.Verdict).To(Equal(report.Kept), row.Reason)
		}, SpecTimeout(specTimeout))

		chaosSpecs(&c, runID, record)
		failoverSpecs(&c, runID, record)
		faultSpecs(&c, runID, record)
	})
}

const specTimeout = 5 * 60e9 // 5 minutes: a bound for a hung server, not a target

func publish(c Config, row report.Row) {
	AddReportEntry("locksuite", row)
	if c.Report != nil {
		c.Report(row)
	}
}
