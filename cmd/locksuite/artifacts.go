package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/worker"
	"github.com/locksuite/locksuite/internal/tempdir"
	"github.com/locksuite/locksuite/suite/local"
)

// artifacts is where the runs' histories and timelines go: every run's with
// --artifacts, else those of the findings and unknown results
// (--keep-broken): a run whose verdict is not the one its spec expected. A
// run expected broken that came out broken (the control, an unfenced
// deterministic pause) is what the suite says it is: not kept.
type artifacts struct {
	dir  string // empty: none kept
	all  bool   // --artifacts: keep every run's
	auto bool   // dir is ours, under $TMPDIR: remove it if nothing is kept
	done bool
	kept bool // finish kept the directory: the run's files are in it
	o    options
}

// abandon removes an auto directory that finish never filled (the run
// ended before its specs ran).
func (a *artifacts) abandon() {
	if a.auto && !a.done {
		_ = os.RemoveAll(a.dir)
	}
}

func newArtifacts(o options) (*artifacts, error) {
	a := &artifacts{o: o}
	if _, ok, _ := worker.FromEnv(); ok {
		return a, nil // a chaos worker: its coordinator keeps the artifacts
	}
	switch {
	case o.artifacts != "":
		a.dir, a.all = o.artifacts, true
	case o.keepBroken == "off":
		return a, nil
	case o.keepBroken == "auto":
		// Owned by this process until finish keeps it: if the run is
		// killed first, the next run removes it (tempdir.RemoveStale).
		d, err := tempdir.New("", "locksuite-artifacts-")
		if err != nil {
			return nil, fmt.Errorf("--keep-broken: %w (choose a directory, or off)", err)
		}
		a.dir, a.auto = d, true
		return a, nil
	default:
		a.dir = o.keepBroken
	}
	if err := os.MkdirAll(a.dir, 0o755); err != nil {
		return nil, &usageError{fmt.Sprintf("cannot make the artifacts directory: %v: choose a writable one", err)}
	}
	return a, nil
}

// finish removes the files of the runs not to keep, and, if any are kept,
// adds the servers' logs (before the servers stop and remove them), the spec
// log and reproduce.txt, and names the directory on stderr. It clears the
// Artifacts of the rows whose files it removed. In an
// interrupted run, a result that stayed unknown is the interrupt's doing and
// is not kept.
func (a *artifacts) finish(rows []report.Row, env *local.Env, specLog string, stderr io.Writer, interrupted bool) {
	if a.dir == "" {
		return
	}
	a.done = true
	var kept []report.Row
	for i, r := range rows {
		if a.all || r.Finding() && (r.Verdict != report.Unknown || !interrupted) {
			if r.Verdict != report.Skipped {
				kept = append(kept, r)
			}
			continue
		}
		for _, f := range r.Artifacts {
			_ = os.Remove(f)
		}
		rows[i].Artifacts = nil // not in --json either
	}
	nbad := 0
	for _, r := range kept {
		if r.Finding() {
			nbad++
		}
	}
	if !a.all && nbad == 0 {
		if a.auto {
			_ = os.RemoveAll(a.dir)
		}
		return
	}
	a.kept = true
	if a.auto {
		_ = tempdir.Disown(a.dir) // kept for the user: never stale
	}
	logs, err := env.CopyLogs(a.dir)
	if err != nil {
		fmt.Fprintf(stderr, "locksuite: keeping the servers' logs: %v\n", err)
	}
	if specLog != "" {
		if b, err := os.ReadFile(specLog); err == nil && os.WriteFile(filepath.Join(a.dir, "spec.log"), b, 0o644) == nil {
			logs = append(logs, filepath.Join(a.dir, "spec.log"))
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "locksuite run at %s: %d runs kept here, %d of them findings (not the verdict their spec expected) or unknown.\n", time.Now().UTC().Format(time.RFC3339), len(kept), nbad)
	fmt.Fprintf(&b, "command: %s\n", a.command(nil))
	fmt.Fprintf(&b, "each run: its history (.json: the row, every critical section, every fault) and its timeline (.html, open it in a browser)\n")
	if len(logs) > 0 {
		var names []string
		for _, l := range logs {
			names = append(names, filepath.Base(l))
		}
		fmt.Fprintf(&b, "logs: %s\n", strings.Join(names, ", "))
	}
	for _, r := range kept {
		fmt.Fprintf(&b, "\n%s fencing=%s %s: %s", r.Backend, onOff(r.Fencing), r.Scenario, r.Verdict)
		if r.Expected != "" {
			fmt.Fprintf(&b, " (expected %s)", r.Expected)
		}
		if r.Reason != "" {
			fmt.Fprintf(&b, ": %s", r.Reason)
		}
		b.WriteString("\n")
		if r.Seed != 0 {
			fmt.Fprintf(&b, "  seed:      %d (faults: %s)\n", r.Seed, r.Schedule)
		} else {
			b.WriteString("  seed:      none (a deterministic scenario)\n")
		}
		fmt.Fprintf(&b, "  reproduce: %s\n", a.command(&r))
		for _, f := range r.Artifacts {
			kind := "history: "
			if strings.HasSuffix(f, ".html") {
				kind = "timeline:"
			}
			fmt.Fprintf(&b, "  %s  %s\n", kind, filepath.Base(f))
		}
	}
	if err := os.WriteFile(filepath.Join(a.dir, "reproduce.txt"), []byte(b.String()), 0o644); err != nil {
		fmt.Fprintf(stderr, "locksuite: writing reproduce.txt: %v\n", err)
	}
	if a.all {
		fmt.Fprintf(stderr, "locksuite: artifacts of %d runs (histories, timelines, servers' logs, reproduce.txt) in %s\n", len(kept), a.dir)
	} else {
		fmt.Fprintf(stderr, "locksuite: %d findings or unknown results: their histories, timelines, the servers' logs and how to reproduce them (reproduce.txt) are kept in %s (--keep-broken off to keep nothing)\n", nbad, a.dir)
	}
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// command is the command line that runs r again alone (the same flags, the
// row's backend, fencing mode, scenario and seed), or, for nil, the whole
// run's.
func (a *artifacts) command(r *report.Row) string {
	skip := map[string]bool{}
	if r != nil {
		for _, f := range []string{"backends", "scenarios", "fencing", "seed", "repeat", "json", "markdown", "junit", "html", "rows", "artifacts", "keep-broken", "log", "progress"} {
			skip[f] = true
		}
	}
	parts := []string{"locksuite", "run"}
	if r != nil {
		parts = append(parts, "--backends", r.Backend, "--fencing", onOff(r.Fencing), "--scenarios", r.Scenario)
		if r.Seed != 0 {
			parts = append(parts, "--seed", fmt.Sprint(r.Seed))
		}
	}
	for _, kv := range a.o.set {
		if !skip[kv[0]] {
			parts = append(parts, "--"+kv[0], shellQuote(kv[1]))
		}
	}
	return strings.Join(parts, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_./,:=@+", c))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
