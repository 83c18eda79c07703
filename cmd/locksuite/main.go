// Command locksuite runs the conformance suite against the lock backends it
// can start or reach, with fencing off and on, and prints one row per result.
//
//	locksuite run [--backends etcd,redis,...] [--scenarios ...] [--fencing off,on] [--json FILE]
//
// It is a thin layer over suite.GinkgoTest and suite/local: the specs, the
// servers and the verdicts are the same as in `go test ./suite/`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/internal/tempdir"
	"github.com/locksuite/locksuite/suite"
	"github.com/locksuite/locksuite/suite/local"
)

func main() {
	// go-redis logs every Sentinel failover it follows on stderr, which
	// carries the CLI's own messages; the rows report the failover.
	goredis.SetLogger(&logging.VoidLogger{})
	os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr))
}

// usageError is bad input: exit status 2.
type usageError struct{ msg string }

func (u *usageError) Error() string { return u.msg }

func cli(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return 2
	}
	switch args[0] {
	case "run", "sweep", "diff":
		var err error
		switch args[0] {
		case "run":
			err = run(args[1:], stdout, stderr)
		case "sweep":
			err = sweep(args[1:], stdout, stderr)
		default:
			err = diffCmd(args[1:], stdout, stderr)
		}
		var ue *usageError
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.As(err, &ue):
			fmt.Fprintln(stderr, "locksuite:", err)
			return 2
		case errors.Is(err, errFinding):
			return 1
		default:
			fmt.Fprintln(stderr, "locksuite:", err)
			return 2
		}
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage())
		return 0
	default:
		fmt.Fprintf(stderr, "locksuite: unknown command %q: use 'locksuite run' (see 'locksuite help')\n", args[0])
		return 2
	}
}

var errFinding = errors.New("finding")

// options are run's parsed flags.
type options struct {
	backends  []string
	scenarios []string
	fencing   []bool
	json      string
	markdown  string
	junit     string
	html      string
	rows      bool
	repeat    int
	lease     time.Duration
	duration  time.Duration
	clients   int
	log       string

	artifacts     string
	keepBroken    string
	progress      string
	set           [][2]string // the flags given, as name and value, in order
	store         string
	interval      time.Duration
	stallEvery    int
	longLease     time.Duration
	workers       int
	pause         time.Duration
	pauses        int
	seed          uint64
	chaosDuration time.Duration
}

func parseList(flagName, v string, allowed []string) ([]string, error) {
	var out []string
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if s == "all" {
			return allowed, nil
		}
		if !slices.Contains(allowed, s) {
			return nil, &usageError{fmt.Sprintf("--%s: unknown %q: choose from %s (or all)", flagName, s, strings.Join(allowed, ","))}
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, &usageError{fmt.Sprintf("--%s is empty: choose from %s (or all)", flagName, strings.Join(allowed, ","))}
	}
	return out, nil
}

// parseBackends parses --backends: names from local.Names,
// local.Libraries, local.Clusters and local.WhenNamed; "all" is every name
// of local.Names, "libraries" every one of local.Libraries.
func parseBackends(v string) ([]string, error) {
	var parts []string
	for _, s := range strings.Split(v, ",") {
		switch strings.TrimSpace(s) {
		case "all":
			parts = append(parts, local.Names...)
		case "libraries":
			parts = append(parts, local.Libraries...)
		default:
			parts = append(parts, s)
		}
	}
	allowed := slices.Concat(local.Names, local.Libraries, local.Clusters, local.WhenNamed)
	return parseList("backends", strings.Join(parts, ","), allowed)
}

func parseRun(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("locksuite run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	backends := fs.String("backends", "all", backendsHelp())
	scenarios := fs.String("scenarios", "all", "comma-separated scenarios: "+strings.Join(suite.Names(""), ",")+"; chaos (worker processes): "+strings.Join(suite.Names(suite.FamilyChaos), ",")+"; network and server faults: "+strings.Join(suite.Names(suite.FamilyFault), ",")+"; on clusters: "+strings.Join(suite.Names(suite.FamilyCluster), ",")+"; on clusters partitioned on network namespaces (root): "+strings.Join(suite.Names(suite.FamilyNodes), ","))
	fencing := fs.String("fencing", "off,on", "fencing modes to run: off, on, or off,on")
	fs.StringVar(&o.json, "json", "", "also write the rows as a JSON array to `FILE`, rewritten (atomically) after every run, so that an interrupted or killed run keeps the rows it finished; read by locksuite diff (default: not written)")
	fs.StringVar(&o.markdown, "markdown", "", "also write the matrix, its notes and every row (folded) as Markdown to `FILE`, for a pull-request comment (default: not written)")
	fs.StringVar(&o.html, "html", "", "also write a self-contained HTML report to `FILE`: the matrix coloured, each cell linked to its runs' timelines and histories (kept in --artifacts, default FILE's name with _files for .html), how to reproduce each run, the environment (default: not written)")
	fs.BoolVar(&o.rows, "rows", false, "print every row (one per run) above the matrix; with --repeat, one line per backend, fencing and scenario with the counts (default: the matrix only)")
	fs.StringVar(&o.junit, "junit", "", "also write Ginkgo's JUnit XML report to `FILE` (default: not written)")
	fs.IntVar(&o.repeat, "repeat", 1, "run each scenario `N` times and summarize the verdicts")
	fs.DurationVar(&o.lease, "lease", 0, leaseHelp())
	fs.DurationVar(&o.duration, "duration", 2*time.Second, "how long the baseline and the control run")
	fs.IntVar(&o.clients, "clients", 3, "concurrent clients in the baseline and the control")
	fs.StringVar(&o.artifacts, "artifacts", "", "keep every run's history (JSON) and HTML timeline in `DIR`, with the servers' logs and how to reproduce each run (reproduce.txt) (default: none; broken runs are kept anyway, see --keep-broken)")
	fs.StringVar(&o.keepBroken, "keep-broken", "auto", "when a run comes out broken or unknown, keep its history, timeline, the servers' logs, its seed and the command to reproduce it in `DIR`: auto is a new directory under $TMPDIR, named on stderr; off keeps nothing")
	fs.StringVar(&o.store, "store", "", storeHelp())
	fs.DurationVar(&o.interval, "interval", 0, "time between chaos pauses (default 500ms)")
	fs.IntVar(&o.stallEvery, "stall-every", 0, "every Nth critical section stalls in the stall scenarios (default 10)")
	fs.DurationVar(&o.longLease, "long-lease", 0, "lease of the long-lease scenario (default 2.5 × --pause)")
	fs.IntVar(&o.workers, "workers", 0, "chaos worker processes (default 3)")
	fs.DurationVar(&o.pause, "pause", 0, pauseHelp())
	fs.IntVar(&o.pauses, "pauses", 0, pausesHelp())
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the fault schedule (default random; every row prints its seed)")
	fs.DurationVar(&o.chaosDuration, "chaos-duration", 0, chaosDurationHelp())
	fs.StringVar(&o.progress, "progress", "auto", "progress on stderr (the scenario, its elapsed and planned time, violations so far): auto rewrites one line on a terminal and prints a line every 5s otherwise; a `DURATION` prints a line that often; off")
	fs.StringVar(&o.log, "log", "", "write the Ginkgo spec log to `FILE` (default: a temporary file, named at the end)")
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: locksuite run [flags]

Runs the suite's scenarios for each backend, with fencing off and on, against
real servers, and prints the matrix: a line per backend and fencing mode, a
column per scenario, each cell kept, BROKEN n lost, unknown or – (skipped), the
reasons as numbered notes below (--rows: every run's writes, counter, lost,
overlaps, rejected and verdict too). Compare two runs' --json with locksuite diff.

Example:
  locksuite run --backends etcd --scenarios deterministic-pause --json r.json
  locksuite run --backends etcd --html r.html     (open r.html: the matrix, linked to every run's timeline)
  locksuite run --backends redis --scenarios pause-targeted --fencing off --seed 42

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, &usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return o, &usageError{fmt.Sprintf("unexpected argument %q: flags only (see locksuite run --help)", fs.Arg(0))}
	}
	fs.Visit(func(f *flag.Flag) { o.set = append(o.set, [2]string{f.Name, f.Value.String()}) })
	if o.progress != "auto" && o.progress != "off" {
		if d, err := time.ParseDuration(o.progress); err != nil || d <= 0 {
			return o, &usageError{fmt.Sprintf("--progress %q: choose auto, off or a positive duration such as 5s", o.progress)}
		}
	}
	if o.keepBroken == "" {
		return o, &usageError{"--keep-broken is empty: give a directory, auto (a new one under $TMPDIR) or off"}
	}
	var err error
	if o.backends, err = parseBackends(*backends); err != nil {
		return o, err
	}
	if strings.TrimSpace(*backends) == "all" {
		o.backends = local.Names // clusters only when named
	}
	if o.scenarios, err = parseList("scenarios", *scenarios, suite.Order()); err != nil {
		return o, err
	}
	modes, err := parseList("fencing", *fencing, []string{"off", "on"})
	if err != nil {
		return o, err
	}
	for _, m := range modes {
		o.fencing = append(o.fencing, m == "on")
	}
	switch {
	case o.repeat < 1:
		return o, &usageError{fmt.Sprintf("--repeat %d: it must be at least 1", o.repeat)}
	case o.lease < 0:
		return o, &usageError{fmt.Sprintf("--lease %v: it must be positive", o.lease)}
	case o.duration <= 0:
		return o, &usageError{fmt.Sprintf("--duration %v: it must be positive", o.duration)}
	case o.clients < 2:
		return o, &usageError{fmt.Sprintf("--clients %d: at least 2 clients are needed to contend", o.clients)}
	case o.workers < 0 || o.workers == 1:
		return o, &usageError{fmt.Sprintf("--workers %d: at least 2 workers are needed to contend", o.workers)}
	case o.pause < 0:
		return o, &usageError{fmt.Sprintf("--pause %v: it must be positive", o.pause)}
	case o.pauses < 0:
		return o, &usageError{fmt.Sprintf("--pauses %d: it must not be negative", o.pauses)}
	case o.store != "" && o.store != "postgres" && o.store != "etcd":
		return o, &usageError{fmt.Sprintf("--store %q: choose postgres or etcd", o.store)}
	case o.interval < 0 || o.stallEvery < 0:
		return o, &usageError{fmt.Sprintf("--interval %v and --stall-every %d must not be negative", o.interval, o.stallEvery)}
	case o.longLease < 0:
		return o, &usageError{fmt.Sprintf("--long-lease %v: it must be positive", o.longLease)}
	case o.chaosDuration < 0:
		return o, &usageError{fmt.Sprintf("--chaos-duration %v: it must be positive", o.chaosDuration)}
	}
	return o, nil
}

func run(args []string, stdout, stderr io.Writer) error {
	o, err := parseRun(args, stderr)
	if err != nil {
		return err
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
	env, err := local.Start(ctx, o.backends, lopts...)
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
	var rows []report.Row
	var prog *progress
	collect := func(r report.Row) {
		rows = append(rows, r)
		res.add(r)
		if prog != nil {
			prog.end(r)
		}
	}
	ran := 0
	for _, n := range o.backends {
		if err := env.Unavailable[n]; err != nil {
			fmt.Fprintf(stderr, "locksuite: %v\n", err)
			for _, f := range o.fencing {
				for _, s := range o.scenarios {
					rows = append(rows, report.Row{Backend: n, Fencing: f, Scenario: s, Verdict: report.Skipped, Reason: err.Error()})
				}
			}
			continue
		}
		for _, f := range o.fencing {
			cfg := env.Config(n, f)
			override(&cfg.Lease, o.lease)
			cfg.Duration, cfg.Clients = o.duration, o.clients
			cfg.Artifacts = art.dir
			override(&cfg.Chaos.Workers, o.workers)
			override(&cfg.Chaos.Pause, o.pause)
			override(&cfg.Chaos.Pauses, o.pauses)
			override(&cfg.Chaos.Duration, o.chaosDuration)
			override(&cfg.Chaos.Interval, o.interval)
			override(&cfg.Chaos.StallEvery, o.stallEvery)
			override(&cfg.Chaos.LongLease, o.longLease)
			cfg.Chaos.Seed = o.seed
			// Unfenced, a lease lock is expected to lose the stalled holder's
			// update: the spec asserts that, and the table shows it.
			cfg.ExpectLoss = !f
			cfg.Report = collect
			name := fmt.Sprintf("%s fencing=%s", n, onOff(f))
			cfg.Progress = func(p report.Progress) {
				if prog != nil {
					prog.update(name, p)
				}
			}
			for range o.repeat {
				c := cfg
				suite.GinkgoTest(&c)
			}
			ran++
		}
	}
	if ran == 0 {
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
	if o.progress != "off" {
		every, _ := time.ParseDuration(o.progress)
		if o.progress == "auto" {
			every = 5 * time.Second
		}
		total := ran * len(o.scenarios) * o.repeat
		prog = newProgress(stderr, o.progress == "auto" && isTerminal(stderr), every, total)
	}
	res.planned = len(rows) + ran*len(o.scenarios)*o.repeat
	res.begin(rows)
	specLog, err := runSpecs(specLogIn(o, art))
	if prog != nil {
		prog.close()
	}
	if err != nil {
		return err
	}
	report.Sort(rows, suite.Order()...)
	art.finish(rows, env, specLog, stderr, ctx.Err() != nil)
	if err := res.finish(rows, cutShort(ctx, rows, res.planned), ctx.Err() == nil && len(findings(rows)) == 0, specLog, stdout); err != nil && ctx.Err() == nil {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted")
	}
	if bad := findings(rows); len(bad) > 0 {
		for _, b := range bad {
			fmt.Fprintln(stderr, "locksuite: finding:", b)
		}
		return errFinding
	}
	return nil
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
		case r.Verdict == report.Skipped:
			continue
		case r.Verdict == report.Unknown:
			text = " (" + r.Reason + ")"
		case r.Expected != report.Kept && r.Expected != report.Broken, r.Verdict == r.Expected:
			continue
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

// tb is the GinkgoTestingT for an in-process run.
type tb struct{ failed bool }

func (t *tb) Fail() { t.failed = true }

// runSpecs runs the registered specs with Ginkgo's own output going to a log
// file, so that stdout carries only the table.
func runSpecs(o options) (string, error) {
	logPath := o.log
	var lf *os.File
	var err error
	if logPath == "" {
		// In a directory of its own that names its owner: if this process
		// is killed, the next run removes it (tempdir.RemoveStale).
		var dir string
		if dir, err = tempdir.New("", tempLogPrefix); err == nil {
			logPath = filepath.Join(dir, "spec.log")
		}
	}
	if err == nil {
		lf, err = os.Create(logPath)
	}
	if err != nil {
		return "", fmt.Errorf("spec log: %w", err)
	}
	defer lf.Close()
	saved, err := syscall.Dup(1)
	if err != nil {
		return "", err
	}
	if err := syscall.Dup2(int(lf.Fd()), 1); err != nil {
		return "", err
	}
	sc, rc := ginkgo.GinkgoConfiguration()
	var labels []string
	for _, s := range o.scenarios {
		labels = append(labels, s)
	}
	sc.LabelFilter = strings.Join(labels, " || ")
	sc.RandomizeAllSpecs = false
	rc.NoColor = true
	rc.JUnitReport = o.junit
	rc.Verbose = true
	gomega.RegisterFailHandler(ginkgo.Fail)
	t := &tb{}
	ginkgo.RunSpecs(t, "locksuite", sc, types.ReporterConfig(rc))
	_ = syscall.Dup2(saved, 1)
	syscall.Close(saved)
	return lf.Name(), nil // results.finish names it, or removes it
}

// override sets *dst to a flag's value v when the flag was given (v > 0;
// the flags' default 0 keeps the backend's own setting).
func override[T int | time.Duration](dst *T, v T) {
	if v > 0 {
		*dst = v
	}
}
