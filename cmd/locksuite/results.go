package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/locksuite/locksuite/harness/machine"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/internal/tempdir"
	"github.com/locksuite/locksuite/suite"
	"github.com/locksuite/locksuite/suite/local"
)

// results writes the rows as they come in: after each row, --json (the
// rows so far, as a JSON array, renamed over the old file so that a reader
// or a killed run never sees half a file), --markdown and --html, the
// latter two saying the run is incomplete. A run that is interrupted or
// killed keeps every row it finished. At the end, finish writes them all
// once more, complete or marked cut short, and the artifacts directory's
// index.html.
type results struct {
	mu      sync.Mutex // add comes from the runs, several at once
	o       options
	art     *artifacts
	stderr  io.Writer
	planned int // runs planned, for "n of m"
	rows    []report.Row
	// libraries: what the language backends' workers reported (local.Env.Libraries).
	libraries [][2]string
	start     time.Time
	env       [][2]string
	failed    map[string]bool // outputs that failed once: said once
	finished  bool            // finish wrote the last outputs: a late add writes none
}

func newResults(o options, art *artifacts, stderr io.Writer) *results {
	return &results{o: o, art: art, stderr: stderr, start: time.Now(), failed: map[string]bool{}}
}

// begin writes the outputs as the specs start, with the rows known by
// then (backends that could not run): from here on they are this run's,
// never an earlier run's left in the same files.
func (s *results) begin(rows []report.Row) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rows = slices.Clone(rows)
	s.flush()
}

// add records one finished row and rewrites the outputs.
func (s *results) add(r report.Row) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rows = append(s.rows, r)
	if !s.finished {
		s.flush()
	}
}

func (s *results) flush() {
	rows := slices.Clone(s.rows)
	report.Sort(rows, suite.Order()...)
	s.write(rows, fmt.Sprintf("Incomplete: %d of %d runs finished by %s; the run was still going, or was cut short there.",
		len(rows), max(s.planned, len(rows)), time.Now().UTC().Format(time.RFC3339)))
}

// write writes every requested output; status, if not empty, says why
// the rows are incomplete. It returns the first failure, as "--flag: ...";
// one while the run goes on is printed once per flag, and the run goes on.
func (s *results) write(rows []report.Row, status string) error {
	var first error
	try := func(flag, path string, f func(io.Writer) error) {
		if path == "" {
			return
		}
		if err := writeAtomic(path, f); err != nil {
			err = fmt.Errorf("--%s: %w", flag, err)
			if first == nil {
				first = err
			}
			if !s.failed[flag] {
				s.failed[flag] = true
				fmt.Fprintf(s.stderr, "locksuite: %v\n", err)
			}
		}
	}
	try("json", s.o.json, func(w io.Writer) error { return report.EncodeRows(w, rows) })
	try("markdown", s.o.markdown, func(w io.Writer) error { return writeMarkdown(w, rows, status) })
	try("html", s.o.html, func(w io.Writer) error { return s.writeHTML(w, rows, status, filepath.Dir(s.o.html)) })
	return first
}

// finish writes the outputs for the run's end: rows sorted, artifacts
// settled (artifacts.finish ran), status empty for a complete run. It
// writes index.html into a kept artifacts directory, prints the matrix
// (and with --rows the rows) on stdout, and keeps or removes the spec log.
// It returns the failure to write an output, if any: the run's exit
// status is then 2.
func (s *results) finish(rows []report.Row, status string, passed bool, specLog string, stdout io.Writer) error {
	s.mu.Lock()
	s.finished = true
	s.mu.Unlock()
	for _, f := range []string{"json", "markdown", "html"} {
		s.failed[f] = true // said once, below or by the caller
	}
	werr := s.write(rows, status)
	if werr != nil && status != "" {
		fmt.Fprintf(s.stderr, "locksuite: %v\n", werr) // the caller returns "interrupted"
	}
	if s.art.dir != "" && s.art.kept {
		idx := filepath.Join(s.art.dir, "index.html")
		if err := writeAtomic(idx, func(w io.Writer) error { return s.writeHTML(w, rows, status, s.art.dir) }); err != nil {
			fmt.Fprintf(s.stderr, "locksuite: %v\n", err)
		}
	}
	if s.o.rows {
		if s.o.repeat > 1 {
			report.WriteSummary(stdout, rows)
		} else {
			report.WriteTable(stdout, rows)
		}
		fmt.Fprintln(stdout)
	}
	report.WriteMatrix(stdout, rows)
	if status != "" {
		fmt.Fprintln(stdout, "\n"+status)
	}
	// The spec log: --log's stays; one in a kept artifacts directory stays
	// there; the temporary one is removed once copied there, or when the run
	// passed, and named otherwise.
	switch {
	case specLog == "":
	case s.o.log != "" || (s.art.kept && strings.HasPrefix(specLog, s.art.dir+string(filepath.Separator))):
		fmt.Fprintf(s.stderr, "locksuite: spec log: %s\n", specLog)
	case s.art.kept && exists(filepath.Join(s.art.dir, "spec.log")): // artifacts.finish copied it
		removeTempLog(specLog)
		fmt.Fprintf(s.stderr, "locksuite: spec log: %s\n", filepath.Join(s.art.dir, "spec.log"))
	case passed:
		removeTempLog(specLog)
	default:
		// Named to the user: no longer the next run's to remove.
		_ = tempdir.Disown(filepath.Dir(specLog))
		fmt.Fprintf(s.stderr, "locksuite: the spec log is %s\n", specLog)
	}
	return werr
}

// tempLogPrefix names the temporary directory of the spec log run
// makes when --log is not given.
const tempLogPrefix = "locksuite-log-"

// removeTempLog removes the temporary spec log and its directory.
func removeTempLog(specLog string) {
	os.Remove(specLog)
	if dir := filepath.Dir(specLog); strings.HasPrefix(filepath.Base(dir), tempLogPrefix) {
		os.RemoveAll(dir)
	}
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// specLogIn is where run writes the spec log: --log's file, else
// the artifacts directory's spec.log when every run's artifacts are kept
// there, else "" (a temporary file, which finish removes or names).
func specLogIn(o options, art *artifacts) options {
	if o.log == "" && art.all && art.dir != "" {
		o.log = filepath.Join(art.dir, "spec.log")
	}
	return o
}

// withReportFiles gives --html a directory for the runs' timelines and
// histories, which its cells link to: --artifacts if given, else FILE's
// name without its extension and with "_files" (r.html: r_files), the
// convention of pages saved with their files.
func withReportFiles(o options) options {
	if o.html != "" && o.artifacts == "" {
		o.artifacts = strings.TrimSuffix(o.html, filepath.Ext(o.html)) + "_files"
	}
	return o
}

func writeMarkdown(w io.Writer, rows []report.Row, status string) error {
	if status != "" {
		if _, err := fmt.Fprintf(w, "**%s**\n\n", status); err != nil {
			return err
		}
	}
	if err := report.WriteMatrixMarkdown(w, rows); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "\n<details><summary>All %d runs</summary>\n\n", len(rows)); err != nil {
		return err
	}
	if err := report.WriteMarkdown(w, rows); err != nil {
		return err
	}
	if _, err := fmt.Fprint(w, "\n</details>\n\n<details><summary>Where the time went (medians per scenario; the floor is the time the scenario's own waits set)</summary>\n\n"); err != nil {
		return err
	}
	if err := report.WriteTiming(w, rows); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, "\n</details>")
	return err
}

func (s *results) writeHTML(w io.Writer, rows []report.Row, status, base string) error {
	if s.env == nil {
		s.env = environment(s.o.backends)
	}
	env := [][2]string{{"command", s.art.command(nil)}, {"started", s.start.UTC().Format(time.RFC3339)}}
	if status == "" {
		env = append(env, [2]string{"took", time.Since(s.start).Round(time.Second).String()})
	}
	env = append(env, s.env...)
	for _, l := range s.libraries {
		env = append(env, [2]string{l[0] + " library", l[1]})
	}
	env = append(env, [2]string{"seeds", seeds(s.o, rows)})
	if l := machineLoad(rows); l != "" {
		env = append(env, [2]string{"machine load", l})
	}
	return report.WriteReport(w, report.Report{
		Title: "locksuite run: " + strings.Join(s.o.backends, ", "), Status: status, Rows: rows, Env: env, Base: base,
		Reproduce: func(r report.Row) string { return s.art.command(&r) },
	})
}

// loaded is the CPU pressure above which machineLoad counts a row as run
// on a loaded machine: some task waited for a CPU half of the time.
const loaded = 0.5

// machineLoad says how loaded the machine was over the rows' runs (their
// CPU pressure), how many ran loaded, how many it made unknown and its
// longest stall of a client outside every fault; "" when no row measured.
func machineLoad(rows []report.Row) string {
	var sum, top float64
	n, over, unknown := 0, 0, 0
	var worst report.Row
	for _, r := range rows {
		if r.Verdict == report.Skipped || r.CPUPressure == 0 && r.StallMS == 0 {
			continue
		}
		n++
		sum, top = sum+r.CPUPressure, max(top, r.CPUPressure)
		if r.CPUPressure > loaded {
			over++
		}
		if r.Stalled() {
			unknown++
		}
		if r.StallMS > worst.StallMS {
			worst = r
		}
	}
	if n == 0 {
		return ""
	}
	out := fmt.Sprintf("CPU pressure %.0f%% on average over the runs, %.0f%% at most (%s); %d of %d runs above %.0f%%; %d unknown because the machine stalled a holder",
		100*sum/float64(n), 100*top, machine.ReadPressure().Kind(), over, n, 100*loaded, unknown)
	if worst.StallMS > 0 {
		out += fmt.Sprintf("; the longest stall outside every fault: %d ms of %s (%s fencing=%s %s)", worst.StallMS, worst.StallOf, worst.Backend, onOff(worst.Fencing), worst.Scenario)
	}
	return out
}

func seeds(o options, rows []report.Row) string {
	if o.seed != 0 {
		return fmt.Sprintf("--seed %d for every chaos run", o.seed)
	}
	var out []string
	for _, r := range rows {
		if r.Seed != 0 {
			out = append(out, fmt.Sprintf("%s/%s/%s: %d", r.Backend, onOff(r.Fencing), r.Scenario, r.Seed))
		}
	}
	if len(out) == 0 {
		return "none: no chaos run (the other scenarios are deterministic)"
	}
	return "random, per run: " + strings.Join(out, "; ")
}

// environment describes this machine and build: Go, OS, CPUs, kernel,
// this program's version, the module versions of the backends' clients
// (and of the servers embedded in this process), and the server of each
// service the backends run on (local.ServerVersions: the version the
// harness's binary reports; a server named by an environment variable is
// not asked: said so).
func environment(backends []string) [][2]string {
	host, _ := os.Hostname()
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	env := [][2]string{
		{"go", runtime.Version()},
		{"machine", fmt.Sprintf("%s/%s, %d CPUs, kernel %s, host %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), strings.TrimSpace(string(kernel)), host)},
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v := bi.Main.Version
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				v += " " + s.Value
			}
		}
		env = append(env, [2]string{"locksuite", v})
		var libs []string
		for _, m := range local.ClientModules(backends) {
			for _, d := range bi.Deps {
				if d.Path == m {
					libs = append(libs, d.Path+" "+d.Version)
				}
			}
		}
		env = append(env, [2]string{"libraries", strings.Join(libs, ", ")})
	}
	return append(env, local.ServerVersions(backends)...)
}

// outputsOf lists the paths run writes to, for checkOutputs.
func outputsOf(o options) []output {
	outs := []output{{"json", o.json, false}, {"markdown", o.markdown, false}, {"junit", o.junit, false},
		{"html", o.html, false}, {"log", o.log, false}, {"artifacts", o.artifacts, true}}
	if o.keepBroken != "auto" && o.keepBroken != "off" {
		outs = append(outs, output{"keep-broken", o.keepBroken, true})
	}
	return outs
}

// cutShort is the status of an interrupted run, "" for one that ended.
func cutShort(ctx context.Context, rows []report.Row, planned int) string {
	if ctx.Err() == nil {
		return ""
	}
	return fmt.Sprintf("Cut short by an interrupt: rows for %d of %d runs (one cut off mid-run shows as unknown); the others did not run.", len(rows), max(planned, len(rows)))
}

// writeSweepHTML writes sweep's grid as a report with a heat map, its
// cells linked to their timelines in files; status says it is incomplete
// (cells not run yet show –).
func writeSweepHTML(path, files, status, backend string, fenced bool, count int, leases, pauses []time.Duration, cells map[[2]time.Duration]report.Row, args []string) error {
	sw := &report.Sweep{Backend: backend, Fencing: fenced, Count: count, Leases: leases, Pauses: pauses}
	var rows []report.Row
	for _, l := range leases {
		var line []report.Row
		for _, p := range pauses {
			r, ok := cells[[2]time.Duration{l, p}]
			line = append(line, r)
			if ok {
				rows = append(rows, r)
			}
		}
		sw.Cells = append(sw.Cells, line)
	}
	cmd := append([]string{"locksuite", "sweep"}, args...)
	for i, a := range cmd {
		cmd[i] = shellQuote(a)
	}
	env := append([][2]string{{"command", strings.Join(cmd, " ")}}, environment([]string{backend})...)
	err := writeAtomic(path, func(w io.Writer) error {
		return report.WriteReport(w, report.Report{Title: "locksuite sweep: " + backend, Status: status, Rows: rows, Env: env, Base: filepath.Dir(path), Sweep: sw})
	})
	if err != nil {
		return fmt.Errorf("--html: %w", err)
	}
	return nil
}
