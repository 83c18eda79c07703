package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/foreign"
	"github.com/locksuite/locksuite/harness/kuberun"
	"github.com/locksuite/locksuite/harness/machine"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/worker"
	"github.com/locksuite/locksuite/internal/tempdir"
	"github.com/locksuite/locksuite/suite"
	"github.com/locksuite/locksuite/suite/local"
)

// run is `locksuite run`: the servers from suite/local, a Config per
// backend and fencing mode, and suite.Execute, the entry point suite.Test
// runs through too; then the CLI's own outputs.
func run(args []string, stdout, stderr io.Writer) error {
	o, err := parseRun(args, stderr)
	if err != nil {
		return err
	}
	if _, isWorker, _ := worker.FromEnv(); isWorker {
		// One process writes the outputs, the driver: a chaos worker hands
		// it its events, never writes its files over the driver's.
		o.json, o.markdown, o.html, o.junit = "", "", "", ""
	}
	o = withReportFiles(o)
	if err := checkOutputs(outputsOf(o)); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	t0 := time.Now()
	var lopts []local.Option
	if o.store != "" {
		lopts = append(lopts, local.WithStore(o.store))
	}
	// The crash scenarios need crashable servers, which cost the others
	// time: only when one is selected.
	if slices.ContainsFunc(o.scenarios, func(s string) bool { return slices.Contains(suite.Names(suite.FamilyCrash), s) }) {
		lopts = append(lopts, local.WithCrash())
	}
	spec, isWorker, _ := worker.FromEnv()
	var kube *kuberun.Run
	if o.kubernetes && !isWorker {
		var kopts []local.Option
		if kube, kopts, err = startKube(ctx, o, stderr); err != nil {
			return err
		}
		defer closeKube(kube, stderr)
		lopts = append(lopts, kopts...)
	}
	if isWorker {
		// A chaos worker needs its own Config's backend only, and its
		// coordinator's counter store: not a probe of every named server.
		if name, _, ok := strings.Cut(spec.Target, "/fenced="); ok && slices.Contains(o.backends, name) {
			o.backends = []string{name}
		} else if ok && o.worker != nil && name == o.workerName {
			o.backends = nil
		}
		if s := os.Getenv(workerStoreEnv); s != "" {
			lopts = append(lopts, local.WithStore(s))
		}
	}
	names := o.backends
	if o.worker != nil {
		names = append(slices.Clone(names), o.service)
	}
	env, err := local.Start(ctx, names, lopts...)
	if err != nil {
		return err
	}
	defer env.Close()
	fmt.Fprintf(stderr, "locksuite: servers ready in %v; counter store: %s\n", time.Since(t0).Round(time.Millisecond), env.Store)

	art, err := newArtifacts(o)
	if err != nil {
		return err
	}
	defer art.abandon()
	res := newResults(o, art, stderr)
	libs := map[string]string{}
	for _, l := range env.Libraries() {
		libs[l[0]] = l[1]
		fmt.Fprintf(stderr, "locksuite: %s runs %s\n", l[0], l[1])
	}
	var newWorker func(context.Context, suite.Client) (backends.Locker, error)
	if o.worker != nil {
		if newWorker, err = startWorker(ctx, env, o, libs, stderr); err != nil {
			return err
		}
	}
	res.libraries = env.Libraries()
	if newWorker != nil {
		res.libraries = append(res.libraries, [2]string{o.workerName, libs[o.workerName]})
	}
	var (
		rows []report.Row // the backends that could not run
		cfgs []suite.Config
		prog *progress
	)
	// withRun is a backend's Config with run's flags, outputs and progress.
	withRun := func(cfg suite.Config) suite.Config {
		cfg = configure(cfg, o, art.dir)
		cfg.WorkerEnv = append(cfg.WorkerEnv, workerStoreEnv+"="+env.Store)
		if kube != nil {
			cfg.WorkerStarter = kube
		}
		cfg.Report = func(r report.Row) { // as each run ends, several at once
			r.Library = libs[r.Backend]
			res.add(r)
			if prog != nil {
				prog.end(r)
			}
		}
		name := fmt.Sprintf("%s fencing=%s", cfg.Name, onOff(cfg.Fenced))
		cfg.Progress = func(p report.Progress) { // from the runs, several at once
			if prog != nil {
				prog.update(name, p)
			}
		}
		return cfg
	}
	var down []suite.Line // the backends that cannot run, each fencing mode
	for _, n := range o.backends {
		if err := env.Unavailable[n]; err != nil {
			fmt.Fprintf(stderr, "locksuite: %v\n", err)
			for _, f := range o.fencing {
				down = append(down, suite.Line{Backend: n, Fenced: f})
			}
			continue
		}
		for _, f := range o.fencing {
			cfgs = append(cfgs, withRun(env.Config(n, f)))
		}
	}
	if newWorker != nil {
		for _, f := range o.fencing {
			cfg, err := env.ConfigFor(o.workerName, o.service, f, newWorker)
			if err != nil {
				return err
			}
			cfgs = append(cfgs, withRun(cfg))
		}
	}
	// The run plan, once: the skipped rows of the backends that cannot
	// run, the count of the rest, and what Execute registers (from the
	// same suite.Options).
	opts := suite.Options{Scenarios: o.scenarios, Repeat: o.repeat, JUnitReport: o.junit, Shard: o.shard}
	lines := slices.Clip(down) // appending below leaves down as it is
	for _, c := range cfgs {
		lines = append(lines, suite.Line{Backend: c.Name, Fenced: c.Fenced})
	}
	plan, err := opts.Plan(lines...)
	if err != nil {
		return err
	}
	for _, l := range down {
		rows = append(rows, plan.Of(l.Backend, l.Fenced).Skipped(env.Unavailable[l.Backend].Error())...)
	}
	planned := len(plan) - len(rows)
	if len(cfgs) == 0 {
		report.Sort(rows, suite.Order()...)
		res.write(rows, "")
		report.WriteMatrix(stdout, rows)
		return &usageError{"no backend could run (see the reasons above)"}
	}
	if ctx.Err() != nil {
		// Interrupted while the servers started: Ginkgo's own handler is not
		// installed yet, so stop here (the deferred Close ends the servers).
		return fmt.Errorf("interrupted")
	}
	parallel := o.parallel
	if parallel == 0 {
		parallel = suite.DefaultParallel()
	}
	shard := ""
	if o.shard.Total > 1 {
		shard = " in shard " + o.shard.String()
	}
	fmt.Fprintf(stderr, "locksuite: %d scenario runs%s, up to %d at once (--parallel; chaos runs one per CPU, more while a CPU idles)\n", planned, shard, parallel)
	if p := machine.Recent(); p > loaded {
		fmt.Fprintf(stderr, "locksuite: the machine is loaded: CPU pressure %.0f%% over the last 10 s (some task waiting for a CPU): a holder it stalls past its lease makes its row unknown, not broken; fewer runs at once (--parallel 2) leave it more room\n", 100*p)
	}
	if o.progress != "off" {
		every, _ := time.ParseDuration(o.progress)
		if o.progress == "auto" {
			every = 5 * time.Second
		}
		prog = newProgress(stderr, o.progress == "auto" && isTerminal(stderr), every, planned)
	}
	res.planned = len(rows) + planned
	res.begin(rows)
	specLog := ""
	if !isWorker { // a worker serves in Execute, and writes no spec log
		if specLog, err = specLogPath(specLogIn(o, art)); err != nil {
			return err
		}
	}
	opts.Parallel, opts.SpecLog = parallel, specLog
	out := suite.Execute(&tb{}, opts, cfgs...)
	if prog != nil {
		prog.close()
	}
	if out.Worker { // served: its coordinator has its events
		if !out.Passed {
			return errors.New(strings.Join(out.Unregistered, "; "))
		}
		return nil
	}
	for _, u := range out.Unregistered {
		fmt.Fprintf(stderr, "locksuite: %s\n", u)
	}
	for _, r := range out.Rows {
		r.Library = libs[r.Backend]
		rows = append(rows, r)
	}
	report.Sort(rows, suite.Order()...)
	art.finish(rows, env, specLog, stderr, ctx.Err() != nil)
	if err := res.finish(rows, cutShort(ctx, rows, res.planned), ctx.Err() == nil && len(findings(rows)) == 0, specLog, stdout); err != nil && ctx.Err() == nil {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted")
	}
	if l := machineLoad(rows); l != "" {
		fmt.Fprintf(stderr, "locksuite: machine load: %s\n", l)
	}
	if n := stalled(rows); n > 0 {
		fmt.Fprintf(stderr, "locksuite: %d of %d rows unknown: the machine stalled a holder past its lease with no fault to blame (their reasons say which, and for how long); no finding: rerun them with fewer runs at once (--parallel) or a longer --lease\n", n, len(rows))
	}
	if bad := findings(rows); len(bad) > 0 {
		for _, b := range bad {
			fmt.Fprintln(stderr, "locksuite: finding:", b)
		}
		return errFinding
	}
	return nil
}

// configure applies run's flags to a backend's Config: the sizes given
// (the backend's own otherwise), the artifacts directory, and ExpectLoss
// unfenced: a lease lock is expected to lose the stalled holder's update,
// and the spec asserts that.
func configure(cfg suite.Config, o options, artifacts string) suite.Config {
	override(&cfg.Lease, o.lease)
	cfg.Duration, cfg.Clients = o.duration, o.clients
	cfg.Artifacts = artifacts
	override(&cfg.Chaos.Workers, o.workers)
	override(&cfg.Chaos.Pause, o.pause)
	override(&cfg.Chaos.Pauses, o.pauses)
	override(&cfg.Chaos.Duration, o.chaosDuration)
	override(&cfg.Chaos.Interval, o.interval)
	override(&cfg.Chaos.StallEvery, o.stallEvery)
	override(&cfg.Chaos.LongLease, o.longLease)
	cfg.Chaos.Seed = o.seed
	cfg.ExpectLoss = !cfg.Fenced
	return cfg
}

// stalled counts the rows unknown because the machine stalled a holder
// (Row.MachineStall).
func stalled(rows []report.Row) int {
	n := 0
	for _, r := range rows {
		if r.Stalled() {
			n++
		}
	}
	return n
}

// findings lists results that make the exit status 1: a run whose verdict
// is not what its spec asserted (Row.Expected: kept or broken; a measured
// run asserts only that it reached a verdict), and a result that stayed
// unknown. The runs of one spec (--repeat) with the same verdict are one
// finding, which says in how many of the spec's runs it was seen and gives
// the first one's reason.
func findings(rows []report.Row) []string {
	type spec struct {
		backend, scenario string
		fencing           bool
	}
	type finding struct {
		s        spec
		id, text string // id: the spec and verdict; text: the rest
		n        int
	}
	runs := map[spec]int{}
	var out []*finding
	byID := map[string]*finding{}
	for _, r := range rows {
		s := spec{r.Backend, r.Scenario, r.Fencing}
		runs[s]++
		id := fmt.Sprintf("%s fencing=%v %s: %s", r.Backend, r.Fencing, r.Scenario, r.Verdict)
		var text string
		switch {
		case !r.Finding():
			continue
		case r.Verdict == report.Unknown:
			text = " (" + r.Reason + ")"
		case r.Scenario == suite.Control:
			text = ": the harness did not catch a lock that always grants"
		default:
			text = ", expected " + string(r.Expected) + " (" + r.Reason + ")"
		}
		if f := byID[id]; f != nil {
			f.n++
			continue
		}
		byID[id] = &finding{s: s, id: id, text: text, n: 1}
		out = append(out, byID[id])
	}
	lines := make([]string, len(out))
	for i, f := range out {
		lines[i] = f.id + f.text
		if m := runs[f.s]; m > 1 {
			lines[i] = fmt.Sprintf("%s in %d of %d runs%s", f.id, f.n, m, strings.Replace(f.text, " (", " (the first: ", 1))
		}
	}
	return lines
}

// tb is the GinkgoTestingT of an in-process run: the verdicts are in the
// rows, and Ginkgo's own in its report.
type tb struct{}

func (tb) Fail() {}

// specLogPath is where the spec log goes: --log's file, else a new
// temporary directory's spec.log, which names its owner: if this process is
// killed, the next run removes it (tempdir.RemoveStale).
func specLogPath(o options) (string, error) {
	if o.log != "" {
		return o.log, nil
	}
	dir, err := tempdir.New("", tempLogPrefix)
	if err != nil {
		return "", fmt.Errorf("spec log: %w", err)
	}
	return filepath.Join(dir, "spec.log"), nil
}

// override sets *dst to a flag's value v when the flag was given (v > 0;
// the flags' default 0 keeps the backend's own setting).
func override[T int | time.Duration](dst *T, v T) {
	if v > 0 {
		*dst = v
	}
}

var errFinding = errors.New("finding")

// workerStoreEnv tells a chaos worker (the CLI run again) which counter
// store its coordinator uses: the worker starts only its own backend, whose
// default store may be another.
const workerStoreEnv = "LOCKSUITE_CLI_STORE"

// startWorker makes --worker's NewLocker and starts one client of it, for
// what it says it is (libs[o.workerName]): a worker that cannot start, or
// breaks the protocol at once, is a clear error here, before any scenario.
func startWorker(ctx context.Context, env *local.Env, o options, libs map[string]string, stderr io.Writer) (func(context.Context, suite.Client) (backends.Locker, error), error) {
	newLocker, err := env.Worker(o.workerName, o.service, o.worker)
	if err != nil {
		return nil, &usageError{err.Error()}
	}
	if _, isWorker, _ := worker.FromEnv(); isWorker {
		return newLocker, nil
	}
	cfg, err := local.Defaults(o.service)
	if err != nil {
		return nil, err
	}
	override(&cfg.Lease, o.lease)
	l, err := newLocker(ctx, suite.Client{Key: "locksuite-probe", Lease: cfg.Lease, Dial: (&net.Dialer{}).DialContext})
	if err != nil {
		return nil, fmt.Errorf("--worker: %w", err)
	}
	defer l.Close()
	if f, ok := l.(interface{ Library() foreign.Library }); ok {
		libs[o.workerName] = f.Library().String()
		fmt.Fprintf(stderr, "locksuite: %s runs %s\n", o.workerName, libs[o.workerName])
	}
	return newLocker, nil
}
