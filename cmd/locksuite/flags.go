package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/locksuite/locksuite/suite"
	"github.com/locksuite/locksuite/suite/local"
)

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
	parallel  int
	shard     suite.Shard
	lease     time.Duration
	duration  time.Duration
	clients   int
	log       string

	artifacts  string
	keepBroken string
	progress   string
	set        [][2]string // the flags given, as name and value, in order
	// worker is --worker's command line (workerCommand), run on
	// --service as the backend workerName (--worker-name).
	worker        []string
	service       string
	workerName    string
	store         string
	interval      time.Duration
	stallEvery    int
	longLease     time.Duration
	workers       int
	pause         time.Duration
	pauses        int
	seed          uint64
	chaosDuration time.Duration

	kubernetes bool   // --kubernetes: the service and the workers as pods
	namespace  string // --namespace
	image      string // --image
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

// parseBackends parses --backends: names from local.Backends; "all" is
// every name of local.Names, "libraries" every one of local.Libraries,
// "languages" every one of local.Languages.
func parseBackends(v string) ([]string, error) {
	var parts []string
	for _, s := range strings.Split(v, ",") {
		switch strings.TrimSpace(s) {
		case "all":
			parts = append(parts, local.Names...)
		case "libraries":
			parts = append(parts, local.Libraries...)
		case "languages":
			parts = append(parts, local.Languages...)
		default:
			parts = append(parts, s)
		}
	}
	allowed := local.Backends()
	return parseList("backends", strings.Join(parts, ","), allowed)
}

func parseRun(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("locksuite run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	backends := fs.String("backends", "all", backendsHelp())
	scenarios := fs.String("scenarios", "all", "comma-separated scenarios: "+strings.Join(suite.Names(""), ",")+"; chaos (worker processes): "+strings.Join(suite.Names(suite.FamilyChaos), ",")+"; network and server faults: "+strings.Join(suite.Names(suite.FamilyFault), ",")+"; on clusters: "+strings.Join(suite.Names(suite.FamilyCluster), ",")+"; on clusters partitioned on network namespaces (root): "+strings.Join(suite.Names(suite.FamilyNodes), ",")+"; the lock service crashed and restarted (its servers then start crashable): "+strings.Join(suite.Names(suite.FamilyCrash), ",")+"; the pitfalls users report: "+strings.Join(suite.Names(suite.FamilyPitfall), ","))
	fencing := fs.String("fencing", "off,on", "fencing modes to run: off, on, or off,on")
	shard := fs.String("shard", "", "run only share `I/N` of the runs (1 <= I <= N), for a run split over N machines or CI jobs; every shard of the same flags agrees on the split, and locksuite merge joins the shards' --json. In a pod of a Kubernetes Indexed Job, job/N takes I from JOB_COMPLETION_INDEX, plus one (default: the whole run)")
	fs.StringVar(&o.json, "json", "", "also write the rows as a JSON array to `FILE`, rewritten (atomically) after every run, so that an interrupted or killed run keeps the rows it finished; read by locksuite diff (default: not written)")
	fs.StringVar(&o.markdown, "markdown", "", "also write the matrix, its notes and every row (folded) as Markdown to `FILE`, for a pull-request comment (default: not written)")
	fs.StringVar(&o.html, "html", "", "also write a self-contained HTML report to `FILE`: the matrix coloured, each cell linked to its runs' timelines and histories (kept in --artifacts, default FILE's name with _files for .html), how to reproduce each run, the environment (default: not written)")
	fs.BoolVar(&o.rows, "rows", false, "print every row (one per run) above the matrix; with --repeat, one line per backend, fencing and scenario with the counts (default: the matrix only)")
	fs.StringVar(&o.junit, "junit", "", "also write Ginkgo's JUnit XML report to `FILE` (default: not written)")
	fs.IntVar(&o.repeat, "repeat", 1, "run each scenario `N` times and summarize the verdicts")
	fs.IntVar(&o.parallel, "parallel", 0, fmt.Sprintf("run up to `N` scenario runs at once; a run that faults a server runs alone on that service; 1: one after another (default %d here: four times the CPUs, 2 to 8, or %s)", suite.DefaultParallel(), suite.ParallelEnv))
	fs.DurationVar(&o.lease, "lease", 0, leaseHelp())
	fs.DurationVar(&o.duration, "duration", 2*time.Second, "how long the baseline and the control run")
	fs.IntVar(&o.clients, "clients", 3, "concurrent clients in the baseline and the control")
	fs.StringVar(&o.artifacts, "artifacts", "", "keep every run's history (JSON) and HTML timeline in `DIR`, with the servers' logs and how to reproduce each run (reproduce.txt) (default: none; findings are kept anyway, see --keep-broken)")
	fs.StringVar(&o.keepBroken, "keep-broken", "auto", "when a run comes out other than its spec expected (a finding: broken where kept was expected, or kept where a loss was) or unknown, keep its history, timeline, the servers' logs, its seed and the command to reproduce it in `DIR`: auto is a new directory under $TMPDIR, named on stderr; off keeps nothing")
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
	fs.BoolVar(&o.kubernetes, "kubernetes", false, "run the lock service (etcd, redis or nats, for now) and the chaos workers as pods of the Kubernetes cluster of your kubeconfig (KUBECONFIG, or ~/.kube/config); this process stays outside the cluster and must reach the pods' addresses; needs --image (see docs/kubernetes.md; default: the services and workers on this machine)")
	fs.StringVar(&o.namespace, "namespace", "", "with --kubernetes: the `NAMESPACE` of the pods (default: the kubeconfig context's, else default)")
	fs.StringVar(&o.image, "image", "", "with --kubernetes: the locksuite `IMAGE` the pods run, of this binary's version (built from the repository's Dockerfile, or written with harness/kubeimage; default: none, --kubernetes needs it)")
	fs.StringVar(&o.log, "log", "", "write the Ginkgo spec log to `FILE` (default: a temporary file, named at the end)")
	workerCmd := fs.String("worker", "", "also run every scenario against a lock library of any language: its worker's `COMMAND` (run by /bin/sh, one process per client), speaking the worker protocol of docs/protocol.md; needs --service; with --worker alone, --backends defaults to none (default: no worker)")
	fs.StringVar(&o.service, "service", "", "with --worker: the lock `SERVICE` the worker's lock runs on: "+strings.Join(local.WorkerServices(), ", ")+"; started here, or taken from its variable (REDIS_URL, ...)")
	fs.StringVar(&o.workerName, "worker-name", "worker", "with --worker: the `NAME` its rows carry")
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
	if *shard != "" {
		sh, err := parseShard(*shard, os.Getenv)
		if err != nil {
			return o, &usageError{"--" + err.Error()}
		}
		o.shard = sh
	}
	if o.keepBroken == "" {
		return o, &usageError{"--keep-broken is empty: give a directory, auto (a new one under $TMPDIR) or off"}
	}
	var err error
	if o.backends, err = parseBackends(*backends); err != nil {
		return o, err
	}
	if err := checkKubernetes(o, *backends); err != nil {
		return o, err
	}
	if strings.TrimSpace(*backends) == "all" {
		o.backends = local.Names // clusters only when named
	}
	if err := parseWorker(&o, *workerCmd); err != nil {
		return o, err
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
	case o.parallel < 0:
		return o, &usageError{fmt.Sprintf("--parallel %d: it must be at least 1 (0: the default, %d here)", o.parallel, suite.DefaultParallel())}
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

// kubeBackends are the backends --kubernetes runs: those whose service
// runs as a pod (local.Pod: etcd's, Redis's and NATS's single server).
var kubeBackends = func() []string {
	var out []string
	for _, b := range local.Backends() {
		if local.Pod(b) != "" {
			out = append(out, b)
		}
	}
	return out
}()

// checkKubernetes checks --kubernetes, --namespace and --image together.
func checkKubernetes(o options, backends string) error {
	if !o.kubernetes {
		if o.namespace != "" || o.image != "" {
			return &usageError{"--namespace and --image go with --kubernetes: add --kubernetes, or drop them"}
		}
		return nil
	}
	if o.image == "" {
		return &usageError{"--kubernetes needs --image: the locksuite image of this version that the pods run (docker build -t REGISTRY/locksuite:TAG . and push it, or see docs/kubernetes.md)"}
	}
	if o.store == "postgres" {
		return &usageError{"--kubernetes keeps the counter in the etcd pod: drop --store postgres"}
	}
	if strings.TrimSpace(backends) == "all" {
		return &usageError{"--kubernetes runs " + strings.Join(kubeBackends, ",") + " only, for now: give --backends etcd,redis"}
	}
	for _, b := range o.backends {
		if !slices.Contains(kubeBackends, b) {
			why := ""
			for _, s := range local.Services() {
				if slices.Contains(s.Backends, b) {
					why = fmt.Sprintf(" (its service, %s, has no pod in harness/kuberun)", s.Name)
				}
			}
			return &usageError{fmt.Sprintf("--kubernetes runs %s only, for now: drop %s from --backends%s", strings.Join(kubeBackends, ","), b, why)}
		}
	}
	return nil
}

// jobIndexEnv is the variable in which Kubernetes gives each pod of an
// Indexed Job its index, from 0 to the Job's completions - 1.
const jobIndexEnv = "JOB_COMPLETION_INDEX"

// parseShard is --shard: suite.ParseShard's "I/N", or "job/N" in a pod of
// an Indexed Job of N completions, whose index (from 0) is shard I-1.
func parseShard(s string, getenv func(string) string) (suite.Shard, error) {
	n, ok := strings.CutPrefix(s, "job/")
	if !ok {
		return suite.ParseShard(s)
	}
	v := getenv(jobIndexEnv)
	if v == "" {
		return suite.Shard{}, fmt.Errorf("shard %q: %s is not set: job/N is for a pod of a Kubernetes Indexed Job (completionMode: Indexed), which has it; elsewhere write I/N, e.g. 1/%s", s, jobIndexEnv, n)
	}
	i, err := strconv.Atoi(v)
	if err != nil {
		return suite.Shard{}, fmt.Errorf("shard %q: %s=%q is not an index", s, jobIndexEnv, v)
	}
	sh, err := suite.ParseShard(fmt.Sprintf("%d/%s", i+1, n))
	if err != nil {
		return suite.Shard{}, fmt.Errorf("shard %q with %s=%s: the Job's index must be below N, its completions: %w", s, jobIndexEnv, v, err)
	}
	return sh, nil
}

// parseWorker checks --worker, --service and --worker-name. With --worker
// and no --backends, no backend of the table runs.
func parseWorker(o *options, cmd string) error {
	given := func(n string) bool { return slices.ContainsFunc(o.set, func(f [2]string) bool { return f[0] == n }) }
	switch {
	case strings.TrimSpace(cmd) == "" && (given("service") || given("worker-name")):
		return &usageError{"--service and --worker-name go with --worker: give --worker 'COMMAND' (docs/protocol.md)"}
	case strings.TrimSpace(cmd) == "":
		if given("worker") {
			return &usageError{"--worker is empty: give the worker's command, such as --worker 'python3 my_worker.py'"}
		}
		return nil
	case o.service == "":
		return &usageError{"--worker needs --service: the lock service its lock runs on, one of " + strings.Join(local.WorkerServices(), ", ")}
	case !slices.Contains(local.WorkerServices(), o.service):
		return &usageError{fmt.Sprintf("--service %q: choose one of %s", o.service, strings.Join(local.WorkerServices(), ", "))}
	case o.workerName == "" || slices.Contains(local.Backends(), o.workerName):
		return &usageError{fmt.Sprintf("--worker-name %q: give a name that is not a backend's", o.workerName)}
	}
	o.worker = workerCommand([]string{cmd})
	if !given("backends") {
		o.backends = nil
	}
	return nil
}

// workerCommand is the command line of a worker: one argument is a
// command for /bin/sh (a simple command exec'd, so that the worker is the
// process the suite started), several are the program and its arguments.
func workerCommand(args []string) []string {
	if len(args) > 1 {
		return args
	}
	if strings.ContainsAny(args[0], ";&|<>()`\n") {
		return []string{"/bin/sh", "-c", args[0]}
	}
	return []string{"/bin/sh", "-c", "exec " + args[0]}
}

// parseAll parses fs's flags wherever they stand among args, before the
// files or after them (locksuite merge a.json b.json --json m.json, the
// order most people type), and returns the other arguments in order.
// After "--" every argument is a file, even one that starts with "-".
func parseAll(fs *flag.FlagSet, args []string) ([]string, error) {
	var files []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return files, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(files, rest...), nil
		}
		files, args = append(files, rest[0]), rest[1:]
	}
}
