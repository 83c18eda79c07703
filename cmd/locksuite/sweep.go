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
	"text/tabwriter"
	"time"

	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/suite"
	"github.com/locksuite/locksuite/suite/local"
)

func parseDurations(flagName, v string) ([]time.Duration, error) {
	var out []time.Duration
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return nil, &usageError{fmt.Sprintf("--%s: %q is not a positive duration (write e.g. 200ms,1s)", flagName, s)}
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, &usageError{fmt.Sprintf("--%s is empty: give durations such as 200ms,1s", flagName)}
	}
	slices.Sort(out)
	return out, nil
}

// sweep runs targeted pauses for one backend over leases × pause lengths.
func sweep(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("locksuite sweep", flag.ContinueOnError)
	fs.SetOutput(stderr)
	backend := fs.String("backend", "redis", "the backend: "+strings.Join(slices.Concat(local.Names, local.Libraries, local.WhenNamed), ","))
	leasesF := fs.String("leases", "", "comma-separated leases (default redis, postgres, consul 200ms,500ms,1s,2s; etcd 1s,2s,3s,5s)")
	pausesF := fs.String("pauses", "", "comma-separated pause lengths (default 300ms,800ms,1.5s; etcd 1s,2s,4s)")
	count := fs.Int("count", 3, "pauses injected per cell")
	fenced := fs.Bool("fencing", false, "run the cells with fencing on (default off)")
	seed := fs.Uint64("seed", 1, "seed of the fault schedules")
	htmlF := fs.String("html", "", "also write the grid as an HTML heat map to `FILE`, with every cell's timeline (in FILE's name with _files) and the environment (default: not written)")
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: locksuite sweep [flags]

Stops the lock holder (SIGSTOP, targeted pauses) for each pause length, with
each lease, and prints the updates lost per cell, then the shortest lease that
lost nothing for those pauses. No lease outlasts every pause: only fencing
closes the window.

Example:
  locksuite sweep --backend redis --leases 200ms,1s,2s --pauses 300ms,800ms,1.5s

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{err.Error()}
	}
	if all := slices.Concat(local.Names, local.Libraries, local.WhenNamed); !slices.Contains(all, *backend) {
		return &usageError{fmt.Sprintf("--backend: unknown %q: choose from %s", *backend, strings.Join(all, ","))}
	}
	if *count < 1 {
		return &usageError{fmt.Sprintf("--count %d: at least one pause per cell", *count)}
	}
	// Leases from the backend's floor: a service whose shortest lease is a
	// second (etcd, MySQL, NATS, Kubernetes) sweeps whole seconds.
	dl, dp := "200ms,500ms,1s,2s", "300ms,800ms,1.5s"
	if d, err := local.Defaults(*backend); err == nil && d.Lease >= time.Second {
		dl, dp = "1s,2s,3s,5s", "1s,2s,4s"
	}
	if *leasesF == "" {
		*leasesF = dl
	}
	if *pausesF == "" {
		*pausesF = dp
	}
	leases, err := parseDurations("leases", *leasesF)
	if err != nil {
		return err
	}
	pauses, err := parseDurations("pauses", *pausesF)
	if err != nil {
		return err
	}
	files := ""
	if *htmlF != "" {
		files = strings.TrimSuffix(*htmlF, filepath.Ext(*htmlF)) + "_files"
	}
	if err := checkOutputs([]output{{"html", *htmlF, false}, {"html", files, true}}); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	env, err := local.Start(ctx, []string{*backend})
	if err != nil {
		return err
	}
	defer env.Close()
	if err := env.Unavailable[*backend]; err != nil {
		return &usageError{err.Error()}
	}
	lost := map[[2]time.Duration]report.Row{}
	for _, l := range leases {
		for _, p := range pauses {
			cfg := env.Config(*backend, *fenced)
			cfg.Lease = l
			cfg.Chaos.Pause, cfg.Chaos.Pauses, cfg.Chaos.Seed = p, *count, *seed
			cfg.Chaos.Duration = time.Second
			cfg.Artifacts = files
			row, err := suite.Run(ctx, cfg, suite.PauseTargeted)
			if err == suite.ErrWorker { // served as a chaos worker, to its end
				return nil
			}
			if err != nil {
				return err
			}
			lost[[2]time.Duration{l, p}] = row
			fmt.Fprintf(stderr, "locksuite: lease %v, pause %v: %d lost of %d writes (%s)\n", l, p, row.Lost, row.Writes, row.Verdict)
			if *htmlF != "" && (ctx.Err() != nil || len(lost) < len(leases)*len(pauses)) {
				status := fmt.Sprintf("Incomplete: %d of %d cells run; the sweep was still going, or was cut short there.", len(lost), len(leases)*len(pauses))
				if ctx.Err() != nil {
					status = fmt.Sprintf("Cut short by an interrupt: %d of %d cells run.", len(lost), len(leases)*len(pauses))
				}
				if err := writeSweepHTML(*htmlF, files, status, *backend, *fenced, *count, leases, pauses, lost, args); err != nil {
					fmt.Fprintf(stderr, "locksuite: %v\n", err)
				}
			}
			if ctx.Err() != nil {
				return fmt.Errorf("interrupted")
			}
		}
	}
	fmt.Fprintf(stdout, "lost updates: %s, %d targeted pauses per cell, fencing %v\n", *backend, *count, *fenced)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "lease \\ pause\t")
	for _, p := range pauses {
		fmt.Fprintf(tw, "%v\t", p)
	}
	fmt.Fprintln(tw)
	safe := time.Duration(0)
	for i := len(leases) - 1; i >= 0; i-- {
		ok := true
		for _, p := range pauses {
			if r := lost[[2]time.Duration{leases[i], p}]; r.Verdict != report.Kept {
				ok = false
			}
		}
		if !ok {
			break
		}
		safe = leases[i]
	}
	for _, l := range leases {
		fmt.Fprintf(tw, "%v\t", l)
		for _, p := range pauses {
			r := lost[[2]time.Duration{l, p}]
			if r.Verdict == report.Unknown {
				fmt.Fprint(tw, "?\t")
			} else {
				fmt.Fprintf(tw, "%d\t", r.Lost)
			}
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	if safe > 0 {
		fmt.Fprintf(stdout, "shortest lease that lost nothing for pauses up to %v: %v\n", pauses[len(pauses)-1], safe)
	} else {
		fmt.Fprintf(stdout, "no lease tried lost nothing for pauses up to %v\n", pauses[len(pauses)-1])
	}
	fmt.Fprintln(stdout, "no lease outlasts every pause: a longer one only makes the window rarer; fencing closes it")
	if *htmlF != "" {
		return writeSweepHTML(*htmlF, files, "", *backend, *fenced, *count, leases, pauses, lost, args)
	}
	return nil
}
