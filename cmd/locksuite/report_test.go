package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/locksuite/locksuite/harness/report"
)

// TestMatrixAndHTMLReport runs the CLI on the embedded etcd with --html,
// --json and --markdown, and checks: stdout ends with the matrix (two
// lines, one per fencing mode, a column per scenario) and not the rows;
// the Markdown carries the same cells; the spec log and an index.html are
// in the report's files, nothing in TMPDIR. Then it opens the report and
// the index in headless Chromium and finds, in the DOM it parsed, the
// matrix with a coloured cell per run, each linking to a timeline and a
// history that exist.
func TestMatrixAndHTMLReport(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd and chromium")
	}
	tmp, out := t.TempDir(), t.TempDir()
	page := filepath.Join(out, "r.html")
	code, stdout, errs := runCLI(t, tmp, "run", "--backends", "etcd", "--scenarios", "baseline,deterministic-pause", "--duration", "1s", "--progress", "off",
		"--html", page, "--json", filepath.Join(out, "r.json"), "--markdown", filepath.Join(out, "r.md"))
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, errs)
	}
	for _, re := range []string{
		`(?m)^BACKEND\s+FENCING\s+baseline\s+deterministic-pause$`,
		`(?m)^etcd\s+off\s+kept\s+BROKEN \d+ lost$`,
		`(?m)^etcd\s+on\s+kept\s+kept$`,
	} {
		if !regexp.MustCompile(re).MatchString(stdout) {
			t.Errorf("stdout lacks the matrix line %s:\n%s", re, stdout)
		}
	}
	if strings.Contains(stdout, "WRITES") {
		t.Errorf("stdout has the rows without --rows:\n%s", stdout)
	}
	md, _ := os.ReadFile(filepath.Join(out, "r.md"))
	for _, re := range []string{`\| etcd \| off \| kept \| \*\*BROKEN \d+ lost\*\* \|`, `\| etcd \| on \| kept \| kept \|`} {
		if !regexp.MustCompile(re).Match(md) {
			t.Errorf("--markdown lacks %s:\n%s", re, md)
		}
	}
	files := filepath.Join(out, "r_files")
	for _, f := range []string{"index.html", "spec.log", "reproduce.txt"} {
		if _, err := os.Stat(filepath.Join(files, f)); err != nil {
			t.Errorf("%v", err)
		}
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("left in TMPDIR: %v", left)
	}

	bin := findChromium(t)
	for _, p := range []string{page, filepath.Join(files, "index.html")} {
		dom := string(headless(t, bin, "--dump-dom", "file://"+p))
		table := regexp.MustCompile(`(?s)<table id="matrix">.*?</table>`).FindString(dom)
		if table == "" {
			t.Fatalf("%s: no matrix in the DOM:\n%s", p, dom)
		}
		cells := regexp.MustCompile(`(?s)<td class="cell v-(\w+)">(.*?)</td>`).FindAllStringSubmatch(table, -1)
		if len(cells) != 4 {
			t.Errorf("%s: %d coloured cells, want 4 (2 fencing modes × 2 scenarios):\n%s", p, len(cells), table)
		}
		broken := 0
		for _, c := range cells {
			if c[1] == "broken" {
				broken++
			}
			for _, class := range []string{"timeline", "history"} {
				m := regexp.MustCompile(`<a class="` + class + `" href="([^"]+)"`).FindStringSubmatch(c[2])
				if m == nil {
					t.Errorf("%s: cell %q links to no %s", p, c[2], class)
					continue
				}
				if strings.Contains(m[1], ":") || strings.HasPrefix(m[1], "/") {
					t.Errorf("%s: link %s is not relative: the report and its files would not move together", p, m[1])
				}
				if _, err := os.Stat(filepath.Join(filepath.Dir(p), filepath.FromSlash(m[1]))); err != nil {
					t.Errorf("%s: link %s does not resolve: %v", p, m[1], err)
				}
			}
		}
		if broken != 1 {
			t.Errorf("%s: %d broken cells, want 1 (the unfenced deterministic pause)", p, broken)
		}
		if !strings.Contains(dom, `<table id="env">`) || !strings.Contains(dom, "<th>go</th>") {
			t.Errorf("%s: no environment", p)
		}
	}
}

// TestInterruptedRunKeepsRows interrupts a run (SIGINT) as soon as its
// --json holds a row, and checks that the rows it finished are in --json,
// that a run it cut short is an unknown row saying so, and that the
// Markdown, the HTML report and stdout say the run was cut short.
// Three runs of 10 s (the fenced control is skipped) share two slots
// (--parallel 2), and the spec that reports first has its run started
// first, so a row is written at about 10 s while the third run has 10 s to
// go, whatever order Ginkgo gives the specs and however fast the machine
// (with two-second runs all at once, all four rows could end before the
// signal).
func TestInterruptedRunKeepsRows(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd")
	}
	tmp, out := t.TempDir(), t.TempDir()
	js := filepath.Join(out, "r.json")
	cmd := exec.Command(os.Args[0], "run", "--backends", "etcd", "--scenarios", "baseline,control", "--duration", "10s", "--parallel", "2", "--progress", "off",
		"--json", js, "--markdown", filepath.Join(out, "r.md"), "--html", filepath.Join(out, "r.html"))
	cmd.Env = append(os.Environ(), "LOCKSUITE_TEST_AS_CLI=1", "TMPDIR="+tmp)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	rowsIn := func() []report.Row {
		b, err := os.ReadFile(js)
		if err != nil {
			return nil
		}
		var rows []report.Row
		if err := json.Unmarshal(b, &rows); err != nil {
			t.Fatalf("--json is not whole JSON mid-run: %v\n%s", err, b)
		}
		return rows
	}
	deadline := time.Now().Add(90 * time.Second)
	var before []report.Row
	for len(before) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no row in --json after 90s\n%s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
		before = rowsIn()
	}
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Errorf("exit %v, want 2 (interrupted)", err)
	}
	after := rowsIn()
	// A run cut short in its spec is a row too, unknown and saying so (a
	// spec Ginkgo had not begun when the interrupt came has none); the
	// rest of after finished before the interrupt or while it stopped
	// the run. With --parallel 2, two runs can be in flight at the
	// interrupt: the one that started beside the first and ends at about
	// the same moment (a run whose context the interrupt ended is unknown,
	// whatever it returned) and the one that took the first's slot.
	var finished, cut int
	for _, a := range after {
		if a.Verdict == report.Unknown && strings.Contains(a.Reason, "interrupted") {
			cut++
		} else {
			finished++
		}
	}
	if finished < len(before) || finished >= 4 || cut > 2 {
		t.Errorf("--json: %d rows at the interrupt, %d finished and %d cut short after it; want every finished one, fewer than the 4 planned, and at most the two runs in flight (--parallel 2) cut short\n%+v", len(before), finished, cut, after)
	}
	for _, r := range before {
		found := false
		for _, a := range after {
			found = found || (a.Backend == r.Backend && a.Fencing == r.Fencing && a.Scenario == r.Scenario && a.Verdict == r.Verdict)
		}
		if !found {
			t.Errorf("row %s fencing=%v %s (%s) finished before the interrupt, missing after it", r.Backend, r.Fencing, r.Scenario, r.Verdict)
		}
	}
	md, _ := os.ReadFile(filepath.Join(out, "r.md"))
	page, _ := os.ReadFile(filepath.Join(out, "r.html"))
	for what, text := range map[string]string{"stdout": stdout.String(), "--markdown": string(md), "--html": string(page)} {
		if !strings.Contains(text, "Cut short by an interrupt") {
			t.Errorf("%s does not say the run was cut short:\n%s", what, text)
		}
	}
}
