package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/internal/tempdir"
)

// TestKillKeepsRows runs the etcd matrix (60 runs, chaos workers among
// them) with every output, looks at its outputs at 10, 20 and 30 s and
// kills it with SIGKILL at 40 s: each time --json parses, --markdown and
// --html are whole, --json holds at least every row the progress line had
// counted by then, and its rows never fall from one look to the next. The
// outputs are replaced by a rename, so a look at a moment is what a kill
// at that moment leaves; the last look is after a real kill.
func TestKillKeepsRows(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real servers")
	}
	out := t.TempDir()
	js, md, html := filepath.Join(out, "r.json"), filepath.Join(out, "r.md"), filepath.Join(out, "r.html")
	t0 := time.Now()
	l := launch(t, 0, false, "run", "--backends", "etcd", "--json", js, "--markdown", md, "--html", html, "--progress", "1s",
		"--log", filepath.Join(out, "spec.log"))
	counted := regexp.MustCompile(`locksuite: \[(\d+)/(\d+)\]`)
	// done is the rows the last progress line counted done: it shows the
	// run in progress, one past them.
	done := func() int {
		m := counted.FindAllStringSubmatch(l.stderr(), -1)
		if len(m) == 0 {
			return 0
		}
		n, _ := strconv.Atoi(m[len(m)-1][1])
		return n - 1
	}
	look := func(at string, floor int) int {
		t.Helper()
		f, err := os.Open(js)
		if err != nil {
			t.Fatalf("at %s: %v", at, err)
		}
		defer f.Close()
		rows, err := report.DecodeRows(f)
		if err != nil {
			t.Fatalf("at %s: --json does not parse: %v", at, err)
		}
		for _, p := range []string{md, html} {
			b, err := os.ReadFile(p)
			if err != nil || len(b) == 0 {
				t.Fatalf("at %s: %s: %v (%d bytes)", at, p, err, len(b))
			}
			if p == html && !strings.HasSuffix(strings.TrimSpace(string(b)), "</html>") {
				t.Errorf("at %s: %s is not a whole page", at, p)
			}
		}
		if len(rows) < floor {
			t.Errorf("at %s: --json holds %d rows, fewer than the %d counted done by then", at, len(rows), floor)
		}
		t.Logf("at %s: %d rows, %d counted done before", at, len(rows), floor)
		return len(rows)
	}
	prev := 0
	for _, at := range []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second, 40 * time.Second} {
		time.Sleep(time.Until(t0.Add(at)))
		floor := done() // before the look: every row counted is written by then
		if at == 40*time.Second {
			l.cmd.Process.Kill()
			_ = l.cmd.Wait()
		}
		n := look(at.String(), max(floor, prev))
		prev = max(prev, n)
	}
	// What the killed run could not remove (a FUSE mount of a power-loss
	// run, its data), the next run removes: here, as it would.
	t.Setenv("TMPDIR", l.tmp)
	tempdir.RemoveStale()
	if prev == 0 {
		t.Errorf("no row in 40s:\n%s", l.stderr())
	}
}
