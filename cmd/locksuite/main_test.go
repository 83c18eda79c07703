package main

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/locksuite/locksuite/harness/report"
)

// TestBadInput: every bad invocation exits 2 with a message that names the
// problem and the fix, before any server is started.
func TestBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "Usage"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"run", "--backends", "zookeeper"}, `--backends: unknown "zookeeper": choose from consul,etcd,postgres,redis`},
		{[]string{"run", "--backends", ""}, "--backends is empty"},
		{[]string{"run", "--backends", "redlock"}, `--backends: unknown "redlock": choose from consul,etcd,postgres,redis,consul-lock,etcd-mutex,pg-xact,redsync,redsync-3`},
		{[]string{"run", "--scenarios", "chaos-monkey"}, `--scenarios: unknown "chaos-monkey"`},
		{[]string{"run", "--fencing", "maybe"}, `--fencing: unknown "maybe": choose from off,on`},
		{[]string{"run", "--repeat", "0"}, "--repeat 0: it must be at least 1"},
		{[]string{"run", "--lease", "-1s"}, "--lease -1s: it must be positive"},
		{[]string{"run", "--duration", "0s"}, "--duration 0s: it must be positive"},
		{[]string{"run", "--clients", "1"}, "at least 2 clients"},
		{[]string{"run", "--lease", "soon"}, `invalid value "soon" for flag -lease`},
		{[]string{"run", "extra"}, `unexpected argument "extra"`},
		{[]string{"run", "--store", "sqlite"}, `--store "sqlite": choose postgres or etcd`},
		{[]string{"run", "--workers", "1"}, "--workers 1: at least 2 workers"},
		{[]string{"run", "--pause", "-5ms"}, "--pause -5ms: it must be positive"},
		{[]string{"run", "--pauses", "-1"}, "--pauses -1: it must not be negative"},
		{[]string{"run", "--stall-every", "-2"}, "must not be negative"},
		{[]string{"run", "--long-lease", "-1s"}, "--long-lease -1s: it must be positive"},
		{[]string{"run", "--seed", "abc"}, `invalid value "abc" for flag -seed`},
		{[]string{"run", "--progress", "sometimes"}, `--progress "sometimes": choose auto, off or a positive duration`},
		{[]string{"run", "--progress", "-1s"}, `--progress "-1s"`},
		{[]string{"run", "--keep-broken", ""}, "--keep-broken is empty: give a directory, auto"},
		{[]string{"sweep", "--backend", "zookeeper"}, `--backend: unknown "zookeeper"`},
		{[]string{"sweep", "--leases", "0s"}, `--leases: "0s" is not a positive duration`},
		{[]string{"sweep", "--pauses", "soon"}, `--pauses: "soon" is not a positive duration`},
		{[]string{"sweep", "--count", "0"}, "--count 0: at least one pause per cell"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := cli(tc.args, &out, &errb); code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if !strings.Contains(errb.String(), tc.want) {
				t.Errorf("stderr %q does not contain %q", errb.String(), tc.want)
			}
		})
	}
}

// TestUnreachableBackend: a backend named at an address where nothing
// listens is reported within 10 s with its name and the fix, and the
// embedded etcd still runs and gets a verdict.
func TestUnreachableBackend(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	t.Setenv("REDIS_URL", "redis://"+dead+"/0")
	jsonPath := filepath.Join(t.TempDir(), "r.json")
	var out, errb bytes.Buffer
	start := time.Now()
	mdPath, junitPath := filepath.Join(t.TempDir(), "r.md"), filepath.Join(t.TempDir(), "junit.xml")
	code := cli([]string{"run", "--backends", "redis,etcd", "--scenarios", "deterministic-pause", "--fencing", "on",
		"--json", jsonPath, "--markdown", mdPath, "--junit", junitPath}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d, want 0 (a missing backend is reported, not a finding)\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	var rows []report.Row
	b, _ := os.ReadFile(jsonPath)
	if err := json.Unmarshal(b, &rows); err != nil {
		t.Fatal(err)
	}
	got := map[string]report.Row{}
	for _, r := range rows {
		got[r.Backend] = r
	}
	if r := got["redis"]; r.Verdict != report.Skipped || !strings.Contains(r.Reason, "REDIS_URL") {
		t.Errorf("redis row %+v: want skipped, with the fix naming REDIS_URL", r)
	}
	if r := got["etcd"]; r.Verdict != report.Kept || r.Rejected == 0 {
		t.Errorf("etcd row %+v: want kept with the stale write rejected", r)
	}
	if !strings.Contains(errb.String(), "redis unavailable") {
		t.Errorf("stderr does not report redis: %s", errb.String())
	}
	md, _ := os.ReadFile(mdPath)
	if !strings.Contains(string(md), "| etcd | on | deterministic-pause | 1 | 1 | 0 |") || !strings.Contains(string(md), "| redis | on | deterministic-pause |") {
		t.Errorf("markdown report lacks the etcd and redis rows:\n%s", md)
	}
	junit, _ := os.ReadFile(junitPath)
	if !strings.Contains(string(junit), "<testsuites") || !strings.Contains(string(junit), "deterministic-pause") {
		t.Errorf("JUnit report %s lacks the suite or the spec:\n%.500s", junitPath, junit)
	}
	t.Logf("whole run %v", time.Since(start).Round(time.Millisecond))
}
