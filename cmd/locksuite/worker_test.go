package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/locksuite/locksuite/harness/report"
)

// TestWorkerFlag: a worker written from docs/protocol.md alone, for a lock
// the repository does not ship (kazoo's Semaphore, testdata), runs with
// run --worker: its rows carry its name and the library it reported, the
// deterministic pause loses an update unfenced (it gives no token: its
// fenced rows are skipped, saying so).
func TestWorkerFlag(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import kazoo").Run(); err != nil {
		t.Skip("/usr/bin/python3 without kazoo (apt install python3-kazoo, or ci/setup.sh kazoo)")
	}
	worker, err := filepath.Abs("testdata/kazoo_semaphore_worker.py")
	if err != nil {
		t.Fatal(err)
	}
	jsonPath := filepath.Join(t.TempDir(), "r.json")
	// A process of its own: Ginkgo runs its specs once per process.
	var out, errb bytes.Buffer
	cmd := exec.Command(os.Args[0], "run", "--worker", "/usr/bin/python3 "+worker, "--service", "zookeeper", "--worker-name", "kazoo-semaphore",
		"--scenarios", "baseline,deterministic-pause", "--json", jsonPath, "--progress", "off", "--keep-broken", "off")
	cmd.Env = append(os.Environ(), "LOCKSUITE_TEST_AS_CLI=1", "TMPDIR="+t.TempDir())
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v, want exit 0\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}
	got := map[string]report.Row{}
	for _, r := range readRowsFile(t, jsonPath) {
		if r.Backend != "kazoo-semaphore" {
			t.Errorf("row of %q: only the worker's rows were asked for", r.Backend)
		}
		got[r.Scenario+onOff(r.Fencing)] = r
		if !strings.HasPrefix(r.Library, "kazoo Semaphore 2.") && r.Verdict != report.Skipped {
			t.Errorf("%s row's library %q: want the worker's kazoo Semaphore 2.x", r.Scenario, r.Library)
		}
	}
	if r := got["baselineoff"]; r.Verdict != report.Kept {
		t.Errorf("baseline, unfenced: %+v, want kept", r)
	}
	if r := got["deterministic-pauseoff"]; r.Verdict != report.Broken || r.Lost != 1 {
		t.Errorf("deterministic-pause, unfenced: %+v, want broken with 1 lost", r)
	}
	if r := got["deterministic-pauseon"]; r.Verdict != report.Skipped || !strings.Contains(r.Reason, "fencing token") {
		t.Errorf("deterministic-pause, fenced: %+v, want skipped for want of a token", r)
	}
}

// TestWorkerFlagRefused: --worker without --service, an unknown service,
// and --service alone are refused, naming the fix.
func TestWorkerFlagRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--worker", "python3 w.py"}, "--worker needs --service"},
		{[]string{"--worker", "python3 w.py", "--service", "hazelcast"}, `--service "hazelcast": choose one of`},
		{[]string{"--service", "redis"}, "go with --worker"},
		{[]string{"--worker", "python3 w.py", "--service", "redis", "--worker-name", "redis"}, "not a backend's"},
	} {
		_, err := parseRun(tc.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run %s: %v, want an error containing %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}

// TestCheckWorker: check-worker passes the testdata worker, step by step,
// and fails one that answers init with a line that is not JSON, naming
// the line (exit status 1).
func TestCheckWorker(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import kazoo").Run(); err != nil {
		t.Skip("/usr/bin/python3 without kazoo (apt install python3-kazoo, or ci/setup.sh kazoo)")
	}
	var out, errb bytes.Buffer
	code := cli([]string{"check-worker", "--service", "zookeeper", "/usr/bin/python3", "testdata/kazoo_semaphore_worker.py"}, &out, &errb)
	if code != 0 || !strings.Contains(out.String(), "ok   the worker speaks protocol 1") || !strings.Contains(out.String(), "B's stale release") {
		t.Errorf("check-worker of the testdata worker: exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	code = cli([]string{"check-worker", "--service", "redis", "read l; echo 'hello, suite'; sleep 1"}, &out, &errb)
	if code != 1 || !strings.Contains(out.String(), `FAIL client A's handshake`) || !strings.Contains(out.String(), `"hello, suite"`) {
		t.Errorf("check-worker of a worker that does not speak JSON: exit %d, want 1 naming its line\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
}
