package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/harness/bench"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/suite"
	"github.com/locksuite/locksuite/suite/local"
)

// benchOptions are bench's parsed flags.
type benchOptions struct {
	backends                []string
	opts                    bench.Options
	lease                   time.Duration
	store                   string
	json, markdown, html    string
	clientsFlag, faultsFlag string
}

func parseBench(args []string, stderr io.Writer) (benchOptions, error) {
	fs := flag.NewFlagSet("locksuite bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o benchOptions
	backendsF := fs.String("backends", "all", "comma-separated backends, as for run: "+strings.Join(local.Names, ",")+" (all); libraries: "+strings.Join(local.Libraries, ",")+" (libraries); clusters: "+strings.Join(local.Clusters, ",")+"; when named: "+strings.Join(local.WhenNamed, ","))
	clients := fs.String("clients", "1,4,16,64", "comma-separated numbers of contending clients, one point each (the fairness table shows those of 2 or more)")
	fs.DurationVar(&o.opts.Duration, "duration", 2*time.Second, "how long each point runs: a warm-up window, then --rounds rounds of the same length")
	fs.IntVar(&o.opts.Rounds, "rounds", 3, "rounds measured per point, and takeovers timed per fault; each figure is the median of the rounds, with the least and the greatest")
	fencingF := fs.String("fencing", "off,on", "fencing modes of the points with a store write: off, on, or off,on (both: the tables give on ÷ off, the cost of fencing)")
	takeoverF := fs.String("takeover", "killed,frozen", "takeovers to time: killed (the holder's connections closed, as for SIGKILL), frozen (its traffic held, as for SIGSTOP), or off")
	fs.DurationVar(&o.opts.Hold, "hold", 0, "also measure fairness with each holder keeping the lock this long (a hold section), for 2 clients or more: a polling lock's waiters then find it taken (default 0: not measured)")
	fs.DurationVar(&o.lease, "lease", 0, "lease for every backend (default per backend, as run's: redis, postgres, consul, zookeeper 200ms; etcd, mysql, nats 1s)")
	fs.StringVar(&o.store, "store", "", "counter store of the store-write points: postgres or etcd (default: postgres when it is among the backends, else the embedded etcd)")
	fs.StringVar(&o.json, "json", "", "also write the figures as JSON to `FILE`, rewritten after every backend (default: not written)")
	fs.StringVar(&o.markdown, "markdown", "", "also write the tables as Markdown to `FILE` (default: not written)")
	fs.StringVar(&o.html, "html", "", "also write a self-contained HTML report to `FILE`: the tables, a chart of each backend's latency distribution and one of grants per second against contending clients, the environment (default: not written)")
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: locksuite bench [flags]

Measures what each lock costs, against the same servers and Configs as run:
the uncontended acquire + release latency (p50, p90, p99, max), grants per
second with 1, 4, 16 and 64 contending clients (an empty critical section,
and one with a store write, fencing off and on), fairness (Jain's index,
the longest wait, the clients that got nothing), the handoff from one
holder to the next, the replies the service sends per grant, and the
takeover time after a holder is killed or frozen, against the lease. An
in-process lock is measured first: the harness's own ceiling, printed with
every table. Progress goes to stderr, the tables to stdout.

Example:
  locksuite bench --backends etcd --duration 1s
  locksuite bench --backends all,libraries --html bench.html --json bench.json

Flags:
`)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	var err error
	if o.backends, err = parseBackends(*backendsF); err != nil {
		return o, err
	}
	if strings.TrimSpace(*backendsF) == "all" {
		o.backends = local.Names
	}
	if o.opts.Clients, err = parseCounts(*clients); err != nil {
		return o, err
	}
	modes, err := parseList("fencing", *fencingF, []string{"off", "on"})
	if err != nil {
		return o, err
	}
	o.opts.Fencing = []bool{}
	for _, m := range modes {
		o.opts.Fencing = append(o.opts.Fencing, m == "on")
	}
	if strings.TrimSpace(*takeoverF) == "off" {
		o.opts.NoTakeover = true
	} else {
		kinds, err := parseList("takeover", *takeoverF, []string{string(bench.Killed), string(bench.Frozen)})
		if err != nil {
			return o, err
		}
		for _, k := range kinds {
			o.opts.Faults = append(o.opts.Faults, bench.Fault(k))
		}
	}
	switch {
	case o.opts.Duration <= 0:
		return o, &usageError{fmt.Sprintf("--duration %v: it must be positive", o.opts.Duration)}
	case o.opts.Rounds < 1:
		return o, &usageError{fmt.Sprintf("--rounds %d: at least 1 round", o.opts.Rounds)}
	case o.opts.Duration/time.Duration(o.opts.Rounds+1) < time.Millisecond:
		return o, &usageError{fmt.Sprintf("--duration %v over %d rounds and a warm-up: a round must last at least 1ms (lengthen --duration or lower --rounds)", o.opts.Duration, o.opts.Rounds)}
	case o.opts.Hold < 0:
		return o, &usageError{fmt.Sprintf("--hold %v: it must not be negative", o.opts.Hold)}
	case o.lease < 0:
		return o, &usageError{fmt.Sprintf("--lease %v: it must be positive", o.lease)}
	case o.store != "" && o.store != "postgres" && o.store != "etcd":
		return o, &usageError{fmt.Sprintf("--store %q: choose postgres or etcd", o.store)}
	}
	return o, nil
}

// parseFlags parses args with fs, which takes flags only: -h or --help
// is flag.ErrHelp; a bad flag or any other argument is a usageError that
// names it and the command's --help.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return &usageError{fmt.Sprintf("unexpected argument %q: flags only (see %s --help)", fs.Arg(0), fs.Name())}
	}
	return nil
}

// maxClients bounds --clients: each client is a connection, a session or
// both on the server.
const maxClients = 256

// parseCounts parses --clients.
func parseCounts(v string) ([]int, error) {
	var out []int
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxClients {
			return nil, &usageError{fmt.Sprintf("--clients: %q is not a number of clients from 1 to %d (write e.g. 1,4,16,64)", s, maxClients)}
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, &usageError{"--clients is empty: give numbers of clients such as 1,4,16,64"}
	}
	slices.Sort(out)
	return out, nil
}

// benchCmd runs locksuite bench.
func benchCmd(args []string, stdout, stderr io.Writer) error {
	o, err := parseBench(args, stderr)
	if err != nil {
		return err
	}
	if err := checkOutputs([]output{{"json", o.json, false}, {"markdown", o.markdown, false}, {"html", o.html, false}}); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o.opts.Progress = func(line string) { fmt.Fprintln(stderr, "locksuite bench:", line) }
	rep := bench.NewReport(o.opts)
	o.opts.Progress(rep.Machine.String())

	t0 := time.Now()
	env, err := startLocal(ctx, o.backends, o.store)
	if err != nil {
		return err
	}
	defer env.Close()
	o.opts.Progress(fmt.Sprintf("servers ready in %v; counter store: %s", time.Since(t0).Round(time.Millisecond), env.Store))

	var newStore func(ctx context.Context, name string, fenced bool) (fencing.Store, error)
	ran := 0
	for _, n := range o.backends {
		if env.Unavailable[n] == nil && newStore == nil {
			newStore = env.Config(n, false).NewStore
		}
	}
	write := func(status string) {
		rep.Status = status
		if err := writeBenchOutputs(o, rep, args); err != nil {
			fmt.Fprintf(stderr, "locksuite: %v\n", err)
		}
	}
	if newStore != nil {
		rep.Results = append(rep.Results, bench.Run(ctx, bench.Mutex(newStore), o.opts))
	}
	for i, n := range o.backends {
		if ctx.Err() != nil {
			break
		}
		if err := env.Unavailable[n]; err != nil {
			fmt.Fprintf(stderr, "locksuite: %v\n", err)
			rep.Results = append(rep.Results, bench.Result{Backend: n, Error: err.Error()})
			continue
		}
		cfg := env.Config(n, false)
		override(&cfg.Lease, o.lease)
		rep.Results = append(rep.Results, bench.Run(ctx, targetOf(cfg), o.opts))
		ran++
		if i < len(o.backends)-1 {
			write(fmt.Sprintf("Incomplete: %d of %d backends measured so far.", i+1, len(o.backends)))
		}
	}
	rep.Machine.LoadAfter = bench.LoadAverage()
	status := ""
	if ctx.Err() != nil {
		status = fmt.Sprintf("Cut short by an interrupt: %d of %d backends measured (the one cut off shows its points as failed).", len(rep.Results)-1, len(o.backends))
	}
	write(status)
	fmt.Fprintf(stderr, "locksuite bench: done in %v\n", time.Since(t0).Round(time.Second))
	if err := bench.WriteText(stdout, rep); err != nil {
		return err
	}
	switch {
	case ctx.Err() != nil:
		return errors.New("interrupted")
	case ran == 0:
		return &usageError{"no backend could run (see the reasons above)"}
	}
	return nil
}

// startLocal starts or reaches the backends names (local.Start), with
// the counter store store ("": local's default).
func startLocal(ctx context.Context, names []string, store string) (*local.Env, error) {
	var lopts []local.Option
	if store != "" {
		lopts = append(lopts, local.WithStore(store))
	}
	return local.Start(ctx, names, lopts...)
}

// targetOf is the bench's Target for a suite Config: its clients made by
// cfg.NewLocker as the suite makes them, its counter cfg.NewStore, its
// takeovers bounded as the suite bounds a stalled holder's wait
// (cfg.StallTimeout).
func targetOf(cfg suite.Config) bench.Target {
	return bench.Target{
		Name: cfg.Name, Prefix: cfg.Prefix, NewStore: cfg.NewStore, TakeoverBound: cfg.StallTimeout,
		NewLocker: func(ctx context.Context, id int, key string, dial bench.Dialer) (backends.Locker, error) {
			return cfg.NewLocker(ctx, suite.Client{ID: id, Key: key, Dial: dial, Lease: cfg.Lease, Endpoint: cfg.Endpoint})
		},
	}
}

// writeBenchOutputs writes rep to the files o names, each atomically.
func writeBenchOutputs(o benchOptions, rep bench.Report, args []string) error {
	if o.json != "" {
		err := writeAtomic(o.json, func(w io.Writer) error {
			b, err := json.MarshalIndent(rep, "", "  ")
			if err != nil {
				return err
			}
			_, err = w.Write(append(b, '\n'))
			return err
		})
		if err != nil {
			return fmt.Errorf("--json: %w", err)
		}
	}
	if o.markdown != "" {
		if err := writeAtomic(o.markdown, func(w io.Writer) error { return bench.WriteMarkdown(w, rep) }); err != nil {
			return fmt.Errorf("--markdown: %w", err)
		}
	}
	if o.html != "" {
		cmd := append([]string{"locksuite", "bench"}, args...)
		for i, a := range cmd {
			cmd[i] = shellQuote(a)
		}
		env := append([][2]string{{"command", strings.Join(cmd, " ")}}, environment(o.backends)...)
		err := writeAtomic(o.html, func(w io.Writer) error {
			body, err := bench.HTML(rep)
			if err != nil {
				return err
			}
			return report.WriteReport(w, report.Report{Title: "locksuite bench", Status: rep.Status, Env: env, Base: filepath.Dir(o.html), Body: body})
		})
		if err != nil {
			return fmt.Errorf("--html: %w", err)
		}
	}
	return nil
}
