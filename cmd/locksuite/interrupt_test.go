package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/locksuite/locksuite/harness/role"
	"github.com/locksuite/locksuite/internal/tempdir"
)

// TestMain lets the test binary act as the CLI, so that a test can run it
// as a child process and interrupt it; first, as main, it serves the role
// the binary was run again in (harness/role).
func TestMain(m *testing.M) {
	if code, ok := role.Serve(); ok {
		os.Exit(code)
	}
	if os.Getenv("LOCKSUITE_TEST_AS_CLI") == "1" {
		os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr))
	}
	if b := os.Getenv(asSuiteTest); b != "" {
		os.Exit(suiteTest(b))
	}
	// The CLI writes its spec log and artifacts under TMPDIR: keep those of
	// the in-process runs in a directory of this test binary's own, owned
	// (tempdir.New), so that a later run removes it if this binary dies
	// before it can.
	tmp, err := tempdir.New("", "locksuite-cmdtest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Setenv("TMPDIR", tmp)
	code := m.Run()
	stopSecured()
	os.RemoveAll(tmp)
	os.Exit(code)
}

// TestInterruptLeavesNothing interrupts a run (SIGINT, as Ctrl-C) while its
// servers are up and its clients busy, once in a baseline and once while a
// chaos worker is stopped (SIGSTOP) by a pause, and checks that it exits
// promptly and that no server or worker process it started (stopped or not)
// and no directory it made is left.
func TestInterruptLeavesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real servers")
	}
	t.Run("baseline", func(t *testing.T) {
		interrupt(t, 3, false, "run", "--backends", "redis,postgres,consul,etcd", "--scenarios", "baseline", "--duration", "30s")
	})
	t.Run("during a pause", func(t *testing.T) {
		// The first pause starts 0.5s after the workers and lasts 4s.
		interrupt(t, 4, true, "run", "--backends", "redis", "--scenarios", "pause-targeted", "--fencing", "off", "--pause", "4s", "--pauses", "1")
	})
}

// specsRunning reports whether the CLI's spec log in dir shows that Ginkgo
// has begun the suite (its interrupt handler is then in place).
func specsRunning(dir string) bool {
	logs, _ := filepath.Glob(filepath.Join(dir, tempLogPrefix+"*", "spec.log"))
	return slices.ContainsFunc(logs, suiteBegun)
}

// suiteBegun reports whether the spec log at path shows that Ginkgo has begun.
func suiteBegun(path string) bool {
	b, err := os.ReadFile(path)
	return err == nil && strings.Contains(string(b), "Running Suite")
}

// stopped reports whether process pid is in state T (stopped).
func stopped(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] == "T"
}

// launched is the CLI running as a child of the test, at the moment chosen
// to signal it.
type launched struct {
	cmd      *exec.Cmd
	tmp      string
	children []int
	mu       *sync.Mutex // guards log, which the stderr reader writes
	log      *strings.Builder
}

// stderr is what the CLI has printed on stderr so far.
func (l *launched) stderr() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.log.String()
}

// launch runs the CLI with args in a private TMPDIR and returns once its
// servers are up, the specs run, it has at least minChildren children and,
// with wantStopped, one of them is stopped (state T).
func launch(t *testing.T, minChildren int, wantStopped bool, args ...string) *launched {
	tmp := t.TempDir()
	// Postgres runs as the postgres user, which must reach its directory.
	os.Chmod(tmp, 0o755)
	os.Chmod(filepath.Dir(tmp), 0o755)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "LOCKSUITE_TEST_AS_CLI=1", "TMPDIR="+tmp)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	ready := make(chan struct{})
	var (
		log strings.Builder
		mu  sync.Mutex
	)
	text := func() string {
		mu.Lock()
		defer mu.Unlock()
		return log.String()
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			mu.Lock()
			log.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if strings.Contains(sc.Text(), "servers ready") {
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(60 * time.Second):
		t.Fatalf("servers not ready after 60s:\n%s", text())
	}
	// Wait for the moment to signal, polled rather than slept on: its
	// servers up, the specs running, and for the pause case a worker
	// stopped (state T).
	var children []int
	logged := "" // a spec log --log names
	if i := slices.Index(args, "--log"); i >= 0 && i+1 < len(args) {
		logged = args[i+1]
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		children = childPIDs(cmd.Process.Pid)
		n := 0
		for _, pid := range children {
			if stopped(pid) {
				n++
			}
		}
		if len(children) >= minChildren && (!wantStopped || n > 0) && (specsRunning(tmp) || logged != "" && suiteBegun(logged)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s: children %v (want at least %d), stopped %d (want some: %v)\n%s", children, minChildren, n, wantStopped, text())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return &launched{cmd: cmd, tmp: tmp, children: children, mu: &mu, log: &log}
}

func interrupt(t *testing.T, minChildren int, wantStopped bool, args ...string) {
	l := launch(t, minChildren, wantStopped, args...)
	t0 := time.Now()
	l.cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- l.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("still running 30s after SIGINT")
	}
	t.Logf("exited %v after SIGINT; children were %v", time.Since(t0).Round(time.Millisecond), l.children)
	for _, pid := range l.children {
		if st, err := os.ReadFile(filepath.Join("/proc", itoa(pid), "stat")); err == nil {
			t.Errorf("child %d still exists after the run: %s", pid, st)
		}
	}
	leftovers(t, l.tmp, true)
}

// leftovers fails for anything in dir but, if namedLog, the spec log that
// an interrupted run names (a directory locksuite-log-* holding spec.log
// only, disowned, so that no later run removes it).
func leftovers(t *testing.T, dir string, namedLog bool) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if namedLog && strings.HasPrefix(e.Name(), tempLogPrefix) {
			inside, _ := os.ReadDir(filepath.Join(dir, e.Name()))
			if len(inside) == 1 && inside[0].Name() == "spec.log" {
				continue
			}
		}
		t.Errorf("left behind in TMPDIR: %s", e.Name())
	}
}

// descendants lists pid's children and theirs, recursively.
func descendants(pid int) []int {
	var out []int
	for _, c := range childPIDs(pid) {
		out = append(out, c)
		out = append(out, descendants(c)...)
	}
	return out
}

// TestKillLeavesNothing kills the coordinator with SIGKILL (no handler
// runs) during a chaos run against Redis with a Postgres store, while a
// worker is stopped by a pause, and checks that every process it started
// (servers, Postgres's backends, workers) goes with it, none left stopped;
// and that the next run removes the directories the killed one could not,
// and runs.
func TestKillLeavesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real servers")
	}
	l := launch(t, 5, true, "run", "--backends", "redis,postgres", "--scenarios", "pause-targeted", "--fencing", "off", "--pause", "4s", "--pauses", "1")
	procs := descendants(l.cmd.Process.Pid)
	l.cmd.Process.Kill()
	_ = l.cmd.Wait()
	var left []string
	deadline := time.Now().Add(15 * time.Second)
	for {
		left = left[:0]
		for _, pid := range procs {
			if st, err := os.ReadFile(filepath.Join("/proc", itoa(pid), "stat")); err == nil {
				state := "running"
				if stopped(pid) {
					state = "stopped"
				}
				left = append(left, fmt.Sprintf("%d (%s): %s", pid, state, strings.TrimSpace(string(st))))
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, s := range left {
		t.Errorf("15s after SIGKILL of the coordinator, process %s", s)
	}
	t.Logf("SIGKILL: %d processes of the run (%v), none left", len(procs), procs)
	stale, _ := filepath.Glob(filepath.Join(l.tmp, "locksuite-*-*"))
	t.Logf("left by the killed run: %v", stale)

	// The next run, in the same TMPDIR, removes them.
	cmd := exec.Command(os.Args[0], "run", "--backends", "etcd", "--scenarios", "baseline", "--fencing", "off", "--duration", "300ms")
	cmd.Env = append(os.Environ(), "LOCKSUITE_TEST_AS_CLI=1", "TMPDIR="+l.tmp)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the next run: %v\n%s", err, out)
	}
	leftovers(t, l.tmp, false)
}

func itoa(i int) string { return strconv.Itoa(i) }

// childPIDs lists the direct children of pid, from every thread's
// /proc/<pid>/task/<tid>/children.
func childPIDs(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(filepath.Join("/proc", itoa(pid), "task", "*", "children"))
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(s); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}
