package main

import (
	"runtime"
	"slices"
	"strings"
	"testing"

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
			mods := local.ClientModules([]string{b})
			if len(mods) == 0 {
				t.Errorf("%s: no client module", b)
			}
			for _, m := range mods {
				if !strings.Contains(env["libraries"], m+" v") {
					t.Errorf("%s: libraries %q lack %s's version", b, env["libraries"], m)
				}
			}
		}
	}
	servers := 0
	for _, kv := range environment(slices.Concat(local.Names, local.Libraries, local.Clusters, local.WhenNamed)) {
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
