package main

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/locksuite/locksuite/harness/checker"
	"github.com/locksuite/locksuite/harness/report"
)

// runCLI runs the test binary as the CLI in a child process with its own
// TMPDIR, and returns its exit status, stdout and stderr.
func runCLI(t *testing.T, tmp string, args ...string) (int, string, string) {
	t.Helper()
	return runWith(t, tmp, []string{"LOCKSUITE_TEST_AS_CLI=1"}, args...)
}

// runWith runs the test binary with env added to its environment (which
// decides what it acts as: see TestMain) in a child process with its own
// TMPDIR, and returns its exit status, stdout and stderr.
func runWith(t *testing.T, tmp string, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), env...), "TMPDIR="+tmp)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("locksuite %v: %v", args, err)
	}
	return code, out.String(), errb.String()
}

// brokenAndKept runs the CLI three times on the embedded etcd: the
// control and an unfenced deterministic pause, broken as their specs
// expect, keep nothing by default; with --artifacts they keep their
// timelines, histories, the servers' logs and reproduce.txt; and a fenced
// baseline and deterministic pause with --artifacts. It checks the kept
// directories and returns the HTML timelines.
func brokenAndKept(t *testing.T) (broken, kept []string) {
	t.Helper()
	tmp := t.TempDir()
	start := time.Now()
	args := []string{"run", "--backends", "etcd", "--scenarios", "baseline,control,deterministic-pause", "--fencing", "off", "--duration", "1s", "--progress", "200ms", "--json", filepath.Join(tmp, "r.json")}
	code, out, errs := runCLI(t, tmp, args...)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	// Progress: stderr is a pipe, so plain lines, with the scenario running
	// and its planned time.
	if !regexp.MustCompile(`(?m)^locksuite: \[\d/3\] etcd fencing=off (baseline|control|deterministic-pause) [0-9.]+m?s of [0-9.]+m?s, \d+ sections, \d+ overlapping( \(and \d more running\))?; .* in all; violations so far: \d broken runs, \d+ lost updates, 0 unexpected$`).MatchString(errs) {
		t.Errorf("no progress line on stderr:\n%s", errs)
	}
	// Broken as expected: no finding, nothing kept, nothing left.
	if strings.Contains(errs, "kept in") {
		t.Errorf("a run without findings kept its artifacts:\n%s", errs)
	}
	if entries, _ := os.ReadDir(tmp); len(entries) != 1 { // r.json
		t.Errorf("left in TMPDIR by a run without findings: %v", entries)
	}
	var rows []report.Row
	if b, err := os.ReadFile(filepath.Join(tmp, "r.json")); err != nil || json.Unmarshal(b, &rows) != nil {
		t.Fatalf("--json: %v", err)
	}
	for _, r := range rows {
		if len(r.Artifacts) != 0 {
			t.Errorf("--json row %s %s names removed artifacts %v", r.Scenario, r.Verdict, r.Artifacts)
		}
	}

	dir := filepath.Join(t.TempDir(), "unfenced")
	code, out, errs = runCLI(t, tmp, append(args[:len(args)-4], "--artifacts", dir)...)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	repro, err := os.ReadFile(filepath.Join(dir, "reproduce.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"locksuite run --backends etcd --fencing off --scenarios control --duration 1s",
		"locksuite run --backends etcd --fencing off --scenarios deterministic-pause --duration 1s",
		"seed:", "timeline:", "history:", "etcd.log",
	} {
		if !strings.Contains(string(repro), want) {
			t.Errorf("reproduce.txt lacks %q:\n%s", want, repro)
		}
	}
	for _, f := range []string{"etcd.log", "spec.log"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("the servers' or the spec log is not kept: %v", err)
		}
	}
	for _, sc := range []string{"baseline", "control", "deterministic-pause"} {
		h, _ := filepath.Glob(filepath.Join(dir, "*_"+sc+"-*.html"))
		j, _ := filepath.Glob(filepath.Join(dir, "*_"+sc+"-*.json"))
		if len(h) != 1 || len(j) != 1 {
			t.Errorf("%s: want one timeline and one history, got %v %v", sc, h, j)
		}
		if sc != "baseline" {
			broken = append(broken, h...)
		}
	}

	all := filepath.Join(t.TempDir(), "all")
	code, out, errs = runCLI(t, tmp, "run", "--backends", "etcd", "--scenarios", "baseline,deterministic-pause", "--fencing", "on", "--duration", "1s", "--artifacts", all)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	kept, _ = filepath.Glob(filepath.Join(all, "locksuite_*.html")) // the runs' timelines, not index.html
	for _, f := range []string{filepath.Join(all, "reproduce.txt"), filepath.Join(all, "index.html"), filepath.Join(dir, "index.html")} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("--artifacts: %v", err)
		}
	}
	// Nothing else is left in TMPDIR: no directory of a run.
	entries, _ := os.ReadDir(tmp)
	for _, e := range entries {
		if e.IsDir() {
			t.Errorf("left in TMPDIR: %s", e.Name())
		}
	}
	t.Logf("three CLI runs in %v", time.Since(start).Round(time.Millisecond))
	return broken, kept
}

// findChromium returns Debian's chromium (or another Chrome) or skips.
func findChromium(t *testing.T) string {
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	t.Skip("chromium not found in PATH (chromium, chromium-browser, google-chrome): install it with `apt-get install chromium` (Debian, Ubuntu) or run ci/setup.sh")
	return ""
}

// headless runs chromium --headless on page with a private profile, in its
// own process group, which it kills afterwards; it returns stdout.
func headless(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	profile := t.TempDir()
	argv := []string{"--headless", "--disable-gpu", "--no-first-run", "--disable-breakpad", "--user-data-dir=" + profile,
		"--hide-scrollbars", "--force-device-scale-factor=1", "--force-color-profile=srgb", "--window-size=1280,800"}
	if os.Geteuid() == 0 {
		argv = append(argv, "--no-sandbox") // chromium refuses to run as root with its sandbox
	}
	cmd := exec.CommandContext(ctx, bin, append(argv, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // its helpers too
	}
	// Helpers in a session of their own (crashpad) are found by the
	// private profile in their command line.
	for _, pid := range withArg(profile) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, errb.String())
	}
	return out.Bytes()
}

// withArg lists the processes whose command line contains s.
func withArg(s string) []int {
	var out []int
	files, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && bytes.Contains(b, []byte(s)) {
			if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(f))); err == nil && pid != os.Getpid() {
				out = append(out, pid)
			}
		}
	}
	return out
}

var (
	overlapRed   = color.RGBA{0xe6, 0x19, 0x4b, 0xff}
	acceptedBlue = color.RGBA{0x43, 0x63, 0xd8, 0xff}
	rejectedOrg  = color.RGBA{0xf5, 0x82, 0x31, 0xff}
	noWriteGrey  = color.RGBA{0xc8, 0xc8, 0xc8, 0xff}
)

// count counts pixels of colour c in r.
func count(img image.Image, r image.Rectangle, c color.RGBA) int {
	n := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			cr, cg, cb, _ := img.At(x, y).RGBA()
			if uint8(cr>>8) == c.R && uint8(cg>>8) == c.G && uint8(cb>>8) == c.B {
				n++
			}
		}
	}
	return n
}

func atoi(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}

// TestArtifactsAndTimelines runs the CLI three times on the embedded etcd.
// By default, a run whose verdicts are the ones its specs expect (the
// control and an unfenced deterministic pause broken) keeps nothing;
// --artifacts keeps every run's history, timeline, the servers' logs and a
// reproduce.txt with the seed and the command for each (the same unfenced
// runs, then a fenced baseline and deterministic pause).
//
// Then it opens the four timelines in headless Chromium and checks what it
// draws: in the DOM after the page's script ran, a bar per critical section
// for each client and as many overlap marks as the checker finds pairs; in
// the screenshot, bar colours in every client's lane, the overlap red in the
// broken runs and none of it in the kept ones, and the rejected write's
// orange in the fenced pause.
func TestArtifactsAndTimelines(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd and chromium")
	}
	broken, kept := brokenAndKept(t)
	if len(broken) != 2 || len(kept) != 2 {
		t.Fatalf("want 2 broken and 2 kept timelines, got %v and %v", broken, kept)
	}
	bin := findChromium(t)
	start := time.Now()
	for _, page := range append(append([]string(nil), broken...), kept...) {
		t.Run(filepath.Base(page), func(t *testing.T) {
			b, err := os.ReadFile(strings.TrimSuffix(page, ".html") + ".json")
			if err != nil {
				t.Fatal(err)
			}
			var tl report.Timeline
			if err := json.Unmarshal(b, &tl); err != nil {
				t.Fatal(err)
			}
			isBroken := tl.Row.Verdict == report.Broken
			if isBroken != (tl.Row.Scenario == "control" || !tl.Row.Fencing) {
				t.Fatalf("verdict %s for %s fencing=%v", tl.Row.Verdict, tl.Row.Scenario, tl.Row.Fencing)
			}
			perClient := map[int]int{}
			rejected := 0
			for _, s := range tl.Sections {
				perClient[s.Client]++
				if s.Outcome.String() == "rejected" {
					rejected++
				}
			}
			pairs := len(checker.Overlaps(tl.Sections))
			url := "file://" + page

			dom := string(headless(t, bin, "--dump-dom", url))
			tag := regexp.MustCompile(`<body[^>]*>`).FindString(dom)
			attr := func(name string) []string {
				m := regexp.MustCompile(name + `="([^"]*)"`).FindStringSubmatch(tag)
				if m == nil {
					t.Fatalf("the page's script did not run: no %s on %q", name, tag)
				}
				return strings.Fields(m[1])
			}
			drawnN, plotBox, lanes := attr("data-drawn"), attr("data-plot"), attr("data-lanes")
			body := append(append([]string{""}, drawnN...), "")
			body = append(body, plotBox...)
			if got := atoi(t, body[1]); got != len(tl.Sections) {
				t.Errorf("drew %d sections, the history has %d", got, len(tl.Sections))
			}
			drawn := map[int]int{}
			for _, m := range regexp.MustCompile(`class="section" data-client="(\d+)"`).FindAllStringSubmatch(dom, -1) {
				drawn[atoi(t, m[1])]++
			}
			for c, n := range perClient {
				if drawn[c] != n {
					t.Errorf("client %d: %d bars in the DOM, %d sections in the history", c, drawn[c], n)
				}
			}
			if got := atoi(t, body[2]); got != pairs || (isBroken && pairs == 0) || (!isBroken && pairs != 0) {
				t.Errorf("drew %d overlap marks; the checker finds %d overlapping pairs (broken: %v)", got, pairs, isBroken)
			}
			if got := atoi(t, body[3]); got != rejected {
				t.Errorf("drew %d rejection marks, the history has %d rejected sections", got, rejected)
			}

			shot := filepath.Join(t.TempDir(), "shot.png")
			headless(t, bin, "--screenshot="+shot, url)
			f, err := os.Open(shot)
			if err != nil {
				t.Fatal(err)
			}
			img, err := png.Decode(f)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			x, y, w, h := atoi(t, body[6]), atoi(t, body[7]), atoi(t, body[8]), atoi(t, body[9])
			plot := image.Rect(x, y, x+w, y+h).Intersect(img.Bounds())
			if plot.Dy() < h {
				t.Fatalf("the plot %v does not fit the %v screenshot", image.Rect(x, y, x+w, y+h), img.Bounds())
			}
			red := count(img, plot, overlapRed)
			if isBroken && red == 0 {
				t.Errorf("broken run: no overlap red in the screenshot's plot")
			}
			if !isBroken && red != 0 {
				t.Errorf("kept run: %d pixels of overlap red in the screenshot's plot", red)
			}
			if rejected > 0 && count(img, plot, rejectedOrg) == 0 {
				t.Errorf("a rejected write, but no rejected orange in the screenshot")
			}
			laneH := atoi(t, strings.TrimPrefix(lanes[len(lanes)-1], "h:"))
			for _, l := range lanes[:len(lanes)-1] {
				c, ly, _ := strings.Cut(l, ":")
				r := image.Rect(x, atoi(t, ly), x+w, atoi(t, ly)+laneH)
				px := count(img, r, acceptedBlue) + count(img, r, overlapRed) + count(img, r, rejectedOrg) + count(img, r, noWriteGrey)
				if px == 0 {
					t.Errorf("client %s: no bar in its lane %v of the screenshot", c, r)
				}
			}
			t.Logf("%s %s fencing=%v: %d sections, %d overlap pairs, %d rejected; %d red pixels", tl.Row.Verdict, tl.Row.Scenario, tl.Row.Fencing, len(tl.Sections), pairs, rejected, red)
		})
	}
	t.Logf("chromium checks in %v", time.Since(start).Round(time.Millisecond))
}
