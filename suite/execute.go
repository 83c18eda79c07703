package suite

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	. "github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	. "github.com/onsi/gomega"

	"github.com/locksuite/locksuite/harness/report"
)

// Options says how Execute runs the suite. The zero value runs every
// scenario once, DefaultParallel runs at a time, with Ginkgo's own
// settings (its -ginkgo.* flags under go test).
type Options struct {
	// Scenarios are the names of the scenarios to register (Order lists
	// them). Empty: all.
	Scenarios []string
	// Repeat is how many times each spec is registered, and so run. 0
	// means 1.
	Repeat int
	// Parallel is how many scenario runs may go at once. Ginkgo runs the
	// specs one after another; with Parallel above 1, the runs of the
	// specs still to come go on while an earlier spec waits for its own
	// (a run is mostly waiting: for a lease to expire, for a chaos run's
	// seconds, for a server). A scenario that faults a service's servers
	// (Scenario.Exclusive) runs alone on that service: beside no run whose
	// lock or counter store is there (Config.Service, Config.StoreService),
	// and first when it faults the store's service; the node scenarios, or
	// one of a Config without a Service, alone. Chaos runs (worker processes)
	// go one per CPU, more only while the machine has 0.4 CPUs idle
	// (measured each second). Each spec still reports, asserts and
	// times out as its own. 0 means DefaultParallel(); 1 runs each
	// scenario inside its spec, as GinkgoTest does. A negative value is an
	// error. Under Ginkgo's own parallel processes (ginkgo -p), or with
	// -ginkgo.focus-file or -ginkgo.skip-file, every spec runs its own
	// scenario (1).
	Parallel int
	// SpecLog, if not empty, is a file (created or truncated, its
	// directory made if missing) that gets
	// Ginkgo's report, verbose and without colour, instead of standard
	// output: the CLI's spec log, so that its standard output carries only
	// its own table. Default: standard output, as Ginkgo's flags say.
	SpecLog string
	// JUnitReport, if not empty, is where Ginkgo writes its JUnit XML
	// report. Default: as -ginkgo.junit-report says.
	JUnitReport string
	// Shard, if set, runs only its share of the runs (see Shard); Results
	// then holds only that share's rows. Default: the whole run.
	Shard Shard
	_     struct{}
}

// ParallelEnv, if set to a positive number, is the default of
// Options.Parallel (DefaultParallel), for Test, which takes no Options.
const ParallelEnv = "LOCKSUITE_PARALLEL"

// DefaultParallel is how many scenario runs Execute lets go at once when
// Options.Parallel is 0: ParallelEnv if it is set to a positive number,
// else four times the number of CPUs this process may use, at least 2 and
// at most 8. A run spends most of its time waiting (for a lease to expire,
// for a chaos schedule, for a server), not computing; many more runs than
// that would crowd a small machine's CPUs, and a holder starved of CPU for
// longer than its lease would be a false alarm of the harness's own making:
// so the chaos runs, whose worker processes keep the CPUs busy, go one per
// CPU beside the runs that wait, and more only while the machine has 0.4
// CPUs idle (docs/measurements.md has the default run's times with each
// bound).
func DefaultParallel() int {
	if n, err := strconv.Atoi(os.Getenv(ParallelEnv)); err == nil && n > 0 {
		return n
	}
	return min(max(4*runtime.GOMAXPROCS(0), 2), 8)
}

// Results is what Execute returns.
type Results struct {
	// Rows holds one row per scenario run, skipped ones included, in the
	// order of report.Sort by Order(); for a fenced Config whose lock
	// gives no fencing token, one skipped row per scenario, whose reason
	// is NoFence (its specs are not registered).
	Rows []report.Row
	// Passed reports whether every spec passed (Ginkgo's verdict).
	Passed bool
	// Unregistered says, for each Config that Execute did not register,
	// which and why ("mylock lock, fenced: not registered: ...").
	Unregistered []string
	// Worker: this process is a chaos worker, and Execute served as the
	// worker instead of running the suite (Rows is empty; see Execute).
	Worker bool
}

// Execute registers the specs of every cfg, runs them as one Ginkgo suite
// (Ginkgo allows one RunSpecs per process: pass every Config here) and
// returns their rows. Test and the locksuite CLI both run the suite
// through it; t is a *testing.T, or any GinkgoTestingT.
//
// Before registering a fenced Config, Execute asks its lock for one grant
// and reads its fencing token: a lock that gives none
// (Fence() is 0) is not registered in fenced mode, since every fenced spec
// would skip; its rows say so instead (Results.Unregistered, and skipped
// rows whose reason is NoFence). A Config that cannot be probed (its
// server is down, it is invalid) is registered as it is: its specs then say
// what is wrong.
//
// Each Config's Report, if set, is still called with each row as its spec
// ends.
//
// In a chaos worker process (this binary run again by a chaos scenario:
// see harness/worker), Execute registers and runs nothing: it serves as
// the worker of the Config among cfgs that the process was started for,
// and returns once the worker is done, with Results.Worker set, Passed
// whether the worker ran to its end, and Unregistered saying why not (a
// Config not among cfgs, or the worker's error); then it has called
// t.Fail. The caller returns too, and the process ends as a test or a
// command ends: the worker's coordinator reads its outcome from its events
// and its end. The worker of a test is run with -test.run narrowed to t's
// test.
func Execute(t GinkgoTestingT, o Options, cfgs ...Config) Results {
	ptrs := make([]*Config, len(cfgs))
	for i := range cfgs {
		ptrs[i] = &cfgs[i]
	}
	if served, err := serveWorker(true, ptrs...); served {
		res := Results{Worker: true, Passed: err == nil}
		if err != nil {
			res.Unregistered = []string{workerError(err).Error()}
			t.Fail()
		}
		return res
	}
	if o.Parallel < 0 || o.Repeat < 0 || o.Shard.Total > 1 && (o.Shard.Index < 1 || o.Shard.Index > o.Shard.Total) {
		return Results{Unregistered: []string{fmt.Sprintf("suite: Options.Parallel %d and Repeat %d must not be negative, and Shard %d of %d must be between 1 and its Total",
			o.Parallel, o.Repeat, o.Shard.Index, o.Shard.Total)}}
	}
	lines := make([]Line, len(cfgs))
	for i, c := range cfgs {
		lines[i] = Line{c.Name, c.Fenced}
	}
	plan, err := o.Plan(lines...)
	if err != nil {
		return Results{Unregistered: []string{err.Error()}}
	}
	sc, rc := GinkgoConfiguration()
	sc.RandomizeAllSpecs = false
	if o.JUnitReport != "" {
		rc.JUnitReport = o.JUnitReport
	}
	if o.SpecLog != "" {
		rc.NoColor, rc.Verbose, rc.Succinct = true, true, false
	}
	parallel := o.Parallel
	if parallel == 0 {
		parallel = DefaultParallel()
	}
	if sc.ParallelTotal > 1 || len(sc.FocusFiles) > 0 || len(sc.SkipFiles) > 0 {
		parallel = 1
	}
	name := ""
	if n, ok := t.(interface{ Name() string }); ok {
		name = n.Name()
	}
	var (
		mu    sync.Mutex
		res   Results
		sizes []string // each registered Config's, printed before the specs
	)
	var sched *scheduler
	if parallel > 1 {
		sched = newScheduler(parallel, sc)
		defer sched.stop()
	}
	for i := range cfgs {
		cfg := &cfgs[i]
		next := cfg.Report
		cfg.Report = func(r report.Row) {
			r.Shard = o.Shard.String()
			mu.Lock()
			res.Rows = append(res.Rows, r)
			mu.Unlock()
			if next != nil {
				next(r)
			}
		}
		if cfg.workerArgv == nil {
			cfg.workerArgv = workerArgv(name, false)
		}
		sizes = append(sizes, fmt.Sprintf("locksuite: %s: %s", describe(cfg), cfg.Sizes()))
		if cfg.Fenced {
			if reason := cannotFence(*cfg); reason != "" {
				res.Unregistered = append(res.Unregistered, describe(cfg)+": not registered: "+reason)
				sizes = sizes[:len(sizes)-1]
				for _, r := range plan.Of(cfg.Name, true).Skipped(reason) {
					cfg.Report(r)
				}
				continue
			}
		}
		mine := make([][]Scenario, max(o.Repeat, 1)) // by run number
		for _, r := range plan.Of(cfg.Name, cfg.Fenced) {
			mine[r.Run] = append(mine[r.Run], *scenarioNamed(r.Scenario))
		}
		for _, m := range mine {
			if len(m) > 0 {
				register(cfg, m, sched)
			}
		}
	}
	RegisterFailHandler(Fail)
	restore := func() {}
	if o.SpecLog != "" {
		var err error
		if restore, err = stdoutTo(o.SpecLog); err != nil {
			res.Unregistered = append(res.Unregistered, fmt.Sprintf("suite: spec log: %v", err))
			return res
		}
	}
	// Where Ginkgo reports: standard output, or the spec log.
	for _, u := range res.Unregistered {
		logf("locksuite: %s", u)
	}
	for _, l := range sizes {
		logf("%s", l)
	}
	passed := RunSpecs(t, "locksuite", sc, rc)
	restore()
	if sched != nil {
		sched.stop()
	}
	mu.Lock()
	defer mu.Unlock()
	res.Passed = passed
	report.Sort(res.Rows, Order()...)
	return res
}

// selectScenarios returns the scenarios named (all when none is), in table
// order, or an error naming an unknown one and the choice.
func selectScenarios(names []string) ([]Scenario, error) {
	var out []Scenario
	for _, sc := range table {
		if len(names) == 0 || slices.Contains(names, sc.Name) {
			out = append(out, sc)
		}
	}
	for _, n := range names {
		if scenarioNamed(n) == nil {
			return nil, fmt.Errorf("suite: unknown scenario %q: choose from %s", n, strings.Join(Order(), ", "))
		}
	}
	return out, nil
}

// stdoutTo sends this process's standard output (descriptor 1, where
// Ginkgo writes its report) into the file path until restore is called.
func stdoutTo(path string) (restore func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	saved, err := syscall.Dup(1)
	if err != nil {
		f.Close()
		return nil, err
	}
	if err := syscall.Dup2(int(f.Fd()), 1); err != nil {
		syscall.Close(saved)
		f.Close()
		return nil, err
	}
	return func() {
		_ = syscall.Dup2(saved, 1)
		syscall.Close(saved)
		f.Close()
	}, nil
}

// containerLabels are the labels of cfg's container, and specLabels those
// of sc's spec, as register gives them: Ginkgo's label filter reads their
// union.
func containerLabels(cfg *Config) []string {
	l := []string{cfg.Name, fencedLabel(cfg)}
	if cfg.Service != "" && cfg.Service != cfg.Name {
		l = append(l, cfg.Service)
	}
	return l
}

func specLabels(sc *Scenario) []string {
	l := []string{sc.Name}
	if sc.Family != "" {
		l = append(l, sc.Family)
	}
	return l
}

// willRun reports whether Ginkgo, configured by sc, runs the spec with
// these texts (its container's, then its own) and labels: its label
// filter, focus and skip strings, as Ginkgo applies them to the suite
// described "locksuite".
func willRun(sc types.SuiteConfig, texts []string, labels []string) bool {
	if sc.LabelFilter != "" {
		f, err := types.ParseLabelFilter(sc.LabelFilter)
		if err == nil && !f(labels) {
			return false
		}
	}
	full := "locksuite " + strings.Join(texts, " ")
	match := func(res []string) bool {
		for _, r := range res {
			if m, err := regexp.MatchString(r, full); err == nil && m {
				return true
			}
		}
		return false
	}
	if len(sc.FocusStrings) > 0 && !match(sc.FocusStrings) {
		return false
	}
	return !match(sc.SkipStrings)
}
