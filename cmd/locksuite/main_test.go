package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/harness/servers/servertest"
	"github.com/locksuite/locksuite/harness/services/etcd"
	"github.com/locksuite/locksuite/suite/local"
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
		{[]string{"run", "--backends", "hazelcast"}, `--backends: unknown "hazelcast": choose from ` + strings.Join(local.Names, ",") + ","},
		{[]string{"run", "--backends", ""}, "--backends is empty"},
		{[]string{"run", "--backends", "redlock"}, `--backends: unknown "redlock": choose from ` + strings.Join(append(slices.Clone(local.Names), local.Libraries...), ",")},
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
		{[]string{"run", "--namespace", "ci"}, "--namespace and --image go with --kubernetes"},
		{[]string{"run", "--kubernetes", "--backends", "etcd"}, "--kubernetes needs --image"},
		{[]string{"run", "--kubernetes", "--image", "x:1"}, "--kubernetes runs etcd,redis,nats-kv,etcd-mutex,redsync only, for now: give --backends etcd,redis"},
		{[]string{"run", "--kubernetes", "--image", "x:1", "--backends", "etcd,memcached"}, "drop memcached from --backends (its service, memcached, has no pod in harness/kuberun)"},
		{[]string{"run", "--kubernetes", "--image", "x:1", "--backends", "etcd", "--store", "postgres"}, "drop --store postgres"},
		{[]string{"sweep", "--backend", "hazelcast"}, `--backend: unknown "hazelcast"`},
		{[]string{"sweep", "--leases", "0s"}, `--leases: "0s" is not a positive duration`},
		{[]string{"sweep", "--pauses", "soon"}, `--pauses: "soon" is not a positive duration`},
		{[]string{"sweep", "--count", "0"}, "--count 0: at least one pause per cell"},
		{[]string{"bench", "--clients", "0"}, `--clients: "0" is not a number of clients from 1 to 256`},
		{[]string{"bench", "--clients", "4,many"}, `--clients: "many"`},
		{[]string{"bench", "--clients", ","}, "--clients is empty"},
		{[]string{"bench", "--rounds", "0"}, "--rounds 0: at least 1 round"},
		{[]string{"bench", "--duration", "0s"}, "--duration 0s: it must be positive"},
		{[]string{"bench", "--duration", "3ms", "--rounds", "3"}, "a round must last at least 1ms"},
		{[]string{"bench", "--takeover", "sigterm"}, `--takeover: unknown "sigterm": choose from killed,frozen`},
		{[]string{"bench", "--fencing", "maybe"}, `--fencing: unknown "maybe"`},
		{[]string{"bench", "--backends", "hazelcast"}, `--backends: unknown "hazelcast"`},
		{[]string{"bench", "--store", "sqlite"}, `--store "sqlite": choose postgres or etcd`},
		{[]string{"bench", "--lease", "-1s"}, "--lease -1s: it must be positive"},
		{[]string{"bench", "--hold", "-1s"}, "--hold -1s: it must not be negative"},
		{[]string{"bench", "etcd"}, `unexpected argument "etcd"`},
		{[]string{"bench", "--json", "/proc/nonexistent/b.json"}, "--json /proc/nonexistent/b.json: directory /proc is not writable"},
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
	got := map[string]report.Row{}
	for _, r := range readRowsFile(t, jsonPath) {
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

// TestWrongServer: a variable that names a server of another kind (Redis's
// pointing at Postgres, Consul's at etcd, etcd's at Redis, Postgres's at
// Consul) is reported with the backend, the variable to fix and what
// answered, and, with no backend left to run, exit status 2, within a bound.
func TestWrongServer(t *testing.T) {
	ctx := servertest.Slow(t, "starts real servers", 5*time.Minute)
	pg := servertest.Start(t, ctx, servers.StartPostgres)
	et := servertest.Start(t, ctx, etcd.Start)
	rd := servertest.Start(t, ctx, servers.StartRedis)
	co := servertest.Start(t, ctx, servers.StartConsul)
	pgAddr := strings.TrimPrefix(strings.Split(pg.Endpoint(), "/")[2], "locksuite@")
	for _, tc := range []struct {
		backend, env, value, want string
	}{
		{"redis", "REDIS_URL", "redis://" + pgAddr + "/0", "check REDIS_URL"},
		{"consul", "CONSUL_HTTP_ADDR", et.Endpoint(), "check CONSUL_HTTP_ADDR"},
		{"etcd", "ETCDCTL_ENDPOINTS", rd.Endpoint(), "check ETCDCTL_ENDPOINTS"},
		{"postgres", "DATABASE_URL", "postgres://locksuite@" + strings.TrimPrefix(co.Endpoint(), "http://") + "/postgres?sslmode=disable", "check DATABASE_URL"},
		{"mysql", "MYSQL_URL", "locksuite@tcp(" + rd.Endpoint() + ")/locksuite", "check MYSQL_URL"},
		{"nats-kv", "NATS_URL", "nats://" + pgAddr, "check NATS_URL"},
		{"zookeeper", "ZOOKEEPER_ADDRS", rd.Endpoint(), "check ZOOKEEPER_ADDRS"},
	} {
		t.Run(tc.env+" names another server", func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			args := []string{"run", "--backends", tc.backend, "--scenarios", "baseline"}
			if tc.backend == "etcd" { // the counter store elsewhere: the running Postgres
				t.Setenv("DATABASE_URL", pg.Endpoint())
				args = append(args, "--store", "postgres")
			}
			var out, errb bytes.Buffer
			t0 := time.Now()
			code := cli(args, &out, &errb)
			took := time.Since(t0)
			t.Logf("%v, exit %d: %s", took.Round(time.Millisecond), code, strings.TrimSpace(errb.String()))
			if code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			svc := strings.TrimSuffix(tc.backend, "-kv") // the service nats-kv runs on is nats
			if !strings.Contains(errb.String(), svc+" unavailable") || !strings.Contains(errb.String(), tc.want) ||
				!strings.Contains(errb.String(), "does not answer as "+svc+" (is it another kind of server?)") {
				t.Errorf("stderr does not name %s and the fix %q:\n%s", tc.backend, tc.want, errb.String())
			}
			if took > 30*time.Second {
				t.Errorf("took %v: a wrong server must be reported within a bound", took)
			}
		})
	}
}
