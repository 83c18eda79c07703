package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/locksuite/locksuite/harness/report"

	"github.com/locksuite/locksuite/suite/local"
)

// TestEnvironment: the report's environment names Go, the machine, the
// client libraries' versions and each server the harness would start; a
// server named by its variable is not asked.
func TestEnvironment(t *testing.T) {
	t.Setenv("CONSUL_HTTP_ADDR", "127.0.0.1:1") // named: never dialled, not asked
	env := map[string]string{}
	for _, kv := range environment([]string{"redsync", "pg-xact", "etcd", "consul"}) {
		env[kv[0]] = kv[1]
	}
	for _, tc := range []struct{ key, want string }{
		{"go", runtime.Version()},
		{"machine", runtime.GOOS + "/" + runtime.GOARCH},
		{"libraries", "github.com/redis/go-redis/v9 v"},
		{"libraries", "go.etcd.io/etcd/server/v3 v"},
		{"redis server", "redis-server: Redis server v=|not found here"}, // | separates what may be said
		{"postgres server", "postgres (PostgreSQL) |not found here"},
		{"etcd server", "embedded"},
		{"consul server", "named by CONSUL_HTTP_ADDR (version not asked)"},
	} {
		ok := false
		for _, w := range strings.Split(tc.want, "|") {
			ok = ok || strings.Contains(env[tc.key], w)
		}
		if !ok {
			t.Errorf("%s: %q lacks %q", tc.key, env[tc.key], tc.want)
		}
	}
	t.Logf("%v", env)
}

// TestEnvironmentCoversTheTable: for every backend of suite/local's table,
// the environment report names the server of its service (local.Services)
// and the version of each Go module of its client.
func TestEnvironmentCoversTheTable(t *testing.T) {
	for _, s := range local.Services() {
		for _, b := range s.Backends {
			env := map[string]string{}
			for _, kv := range environment([]string{b}) {
				env[kv[0]] = kv[1]
			}
			if v := env[s.Name+" server"]; v == "" {
				t.Errorf("%s: no %q in the report: %v", b, s.Name+" server", env)
			}
			// That each backend names its client modules (or speaks its
			// protocol itself, or is a worker) is suite/local's TestTable.
			for _, m := range local.ClientModules([]string{b}) {
				if !strings.Contains(env["libraries"], m+" v") {
					t.Errorf("%s: libraries %q lack %s's version", b, env["libraries"], m)
				}
			}
		}
	}
	servers := 0
	for _, kv := range environment(local.Backends()) {
		if strings.HasSuffix(kv[0], " server") {
			servers++
			t.Logf("%s: %s", kv[0], kv[1])
		}
	}
	if servers != len(local.Services()) {
		t.Errorf("every backend: %d servers in the report, want one per service (%d)", servers, len(local.Services()))
	}
}

// TestReportFiles: where --html's runs' files and the spec log go.
func TestReportFiles(t *testing.T) {
	for _, tc := range []struct {
		html, artifacts, want string
	}{
		{"", "", ""},
		{"out/r.html", "", "out/r_files"},
		{"report", "", "report_files"},
		{"out/r.html", "arts", "arts"},
	} {
		if got := withReportFiles(options{html: tc.html, artifacts: tc.artifacts}).artifacts; got != tc.want {
			t.Errorf("--html %q --artifacts %q: files in %q, want %q", tc.html, tc.artifacts, got, tc.want)
		}
	}
	for _, tc := range []struct {
		log  string
		art  artifacts
		want string
	}{
		{"", artifacts{dir: "d", all: true}, "d/spec.log"},
		{"my.log", artifacts{dir: "d", all: true}, "my.log"},
		{"", artifacts{dir: "d"}, ""}, // --keep-broken: a temporary file, copied there if kept
		{"", artifacts{}, ""},
	} {
		if got := specLogIn(options{log: tc.log}, &tc.art).log; got != tc.want {
			t.Errorf("--log %q, artifacts %+v: spec log %q, want %q", tc.log, tc.art, got, tc.want)
		}
	}
}

// TestKeepsFindingsOnly: by default (--keep-broken auto) a run keeps the
// files of its findings (a verdict other than the one its spec expected)
// and of its unknown results, not those of runs broken as expected (the
// control, an unfenced pause with ExpectLoss), nor of kept or measured
// ones; with no finding it keeps nothing and removes its directory.
func TestKeepsFindingsOnly(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	art, err := newArtifacts(options{keepBroken: "auto"})
	if err != nil {
		t.Fatal(err)
	}
	row := func(scenario string, v, want report.Verdict) report.Row {
		r := report.Row{Backend: "etcd", Scenario: scenario, Verdict: v, Expected: want}
		for _, ext := range []string{".json", ".html"} {
			f := filepath.Join(art.dir, scenario+ext)
			os.WriteFile(f, []byte("x"), 0o644)
			r.Artifacts = append(r.Artifacts, f)
		}
		return r
	}
	rows := []report.Row{
		row("control", report.Broken, report.Broken),
		row("pause-random", report.Broken, report.Measured),
		row("baseline", report.Kept, report.Kept),
		row("deterministic-pause", report.Kept, report.Broken), // a finding
		row("chaos-none", report.Unknown, report.Kept),
	}
	var errb bytes.Buffer
	art.finish(rows, &local.Env{}, "", &errb, false)
	for _, r := range rows {
		_, err := os.Stat(filepath.Join(art.dir, r.Scenario+".html"))
		keep := r.Scenario == "deterministic-pause" || r.Scenario == "chaos-none"
		if (err == nil) != keep || (len(r.Artifacts) == 2) != keep {
			t.Errorf("%s (%s, expected %s): kept %v, want %v", r.Scenario, r.Verdict, r.Expected, err == nil, keep)
		}
	}
	if !strings.Contains(errb.String(), "2 findings or unknown results") {
		t.Errorf("stderr: %s", errb.String())
	}

	none, err := newArtifacts(options{keepBroken: "auto"})
	if err != nil {
		t.Fatal(err)
	}
	none.finish([]report.Row{{Backend: "etcd", Scenario: "control", Verdict: report.Broken, Expected: report.Broken}}, &local.Env{}, "", &errb, false)
	if _, err := os.Stat(none.dir); err == nil {
		t.Errorf("a run without findings left %s", none.dir)
	}
	os.RemoveAll(art.dir)
}
