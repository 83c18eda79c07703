package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/locksuite/locksuite/backends/zookeeper"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/suite"
)

// securedLibs are the servers the library backends need besides the four of
// securedServers, started WithAuth and WithTLS once and stopped by
// stopSecured: ZooKeeper, and two more Redis servers for redsync-3 (the
// third is securedServers' own).
var securedLibs struct {
	once  sync.Once
	zk    *servers.ZooKeeper
	redis []*servers.Redis
	err   error
}

func stopSecuredLibs() {
	if securedLibs.zk != nil {
		securedLibs.zk.Stop()
	}
	for _, r := range securedLibs.redis {
		r.Stop()
	}
}

// libsEnv starts the servers of securedLibs (once) and returns the
// variables that name every secured server for every library backend and
// ZooKeeper: s.env(), LOCKSUITE_REDIS_NODES (three rediss:// URLs, each with
// its own user and password) with LOCKSUITE_REDIS_CACERT a bundle of the
// three servers' CAs (written under dir), and ZOOKEEPER_ADDRS with the
// digest user, the CA and a client certificate. secrets gains the
// passwords.
func libsEnv(t *testing.T, s *secured, dir string, secrets map[string]string) map[string]string {
	t.Helper()
	securedLibs.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		opts := []servers.Option{servers.WithAuth(), servers.WithTLS()}
		if securedLibs.zk, securedLibs.err = servers.StartZooKeeper(ctx, opts...); securedLibs.err != nil {
			return
		}
		for range 2 {
			r, err := servers.StartRedis(ctx, opts...)
			if err != nil {
				securedLibs.err = err
				return
			}
			securedLibs.redis = append(securedLibs.redis, r)
		}
	})
	if securedLibs.err != nil {
		t.Fatal(securedLibs.err)
	}
	env := s.env()
	nodes := append([]*servers.Redis{s.redis}, securedLibs.redis...)
	var urls []string
	var bundle []byte
	for i, r := range nodes {
		urls = append(urls, r.URL())
		b, err := os.ReadFile(r.Secrets().CAFile)
		if err != nil {
			t.Fatal(err)
		}
		bundle = append(bundle, b...)
		secrets["redis node password "+string(rune('0'+i))] = r.Secrets().Password
	}
	cas := filepath.Join(dir, "redis-cas.pem")
	if err := os.WriteFile(cas, bundle, 0o644); err != nil {
		t.Fatal(err)
	}
	zs := securedLibs.zk.Secrets()
	secrets["zookeeper password"] = zs.Password
	env["LOCKSUITE_REDIS_NODES"] = strings.Join(urls, ",")
	env["LOCKSUITE_REDIS_CACERT"] = cas
	env["ZOOKEEPER_ADDRS"] = securedLibs.zk.Endpoint()
	env["LOCKSUITE_ZOOKEEPER_AUTH"] = zs.User + ":" + zs.Password
	env["LOCKSUITE_ZOOKEEPER_CACERT"] = zs.CAFile
	env["LOCKSUITE_ZOOKEEPER_CERT"] = zs.CertFile
	env["LOCKSUITE_ZOOKEEPER_KEY"] = zs.KeyFile
	return env
}

// noFence are the library backends whose fenced runs are skipped.
var noFence = map[string]bool{"redsync": true, "redsync-3": true, "consul-lock": true, "zk-lock": true}

// TestTLSAndAuthLibraries runs the CLI with the baseline and the
// deterministic pause, fenced and not, on every library backend but
// leader-election (which TestKube covers) and on zookeeper, then a chaos run
// (worker processes) on zookeeper, zk-lock and redsync-3, against servers
// that require authentication and TLS, named only by the variables: every
// result must be what it is on plain servers, and no password may appear
// in anything the runs printed or wrote.
func TestTLSAndAuthLibraries(t *testing.T) {
	s := securedServers(t)
	tmp := t.TempDir()
	secrets := s.secrets(t)
	env := libsEnv(t, s, tmp, secrets)
	setEnv(t, env, map[string]string{"TMPDIR": tmp}) // TMPDIR: the CLI's own temporary files, searched for leaks below
	backends := []string{"redsync", "redsync-3", "etcd-mutex", "consul-lock", "pg-xact", "zk-lock", "zookeeper"}
	jsonPath := filepath.Join(tmp, "r.json")
	t0 := time.Now()
	// A process of its own: Ginkgo runs specs once per process, and other
	// tests of this binary run them in-process.
	code, stdout, stderr := runCLI(t, tmp, "run", "--backends", strings.Join(backends, ","), "--scenarios", "baseline,deterministic-pause",
		"--duration", "300ms", "--json", jsonPath, "--log", filepath.Join(tmp, "spec.log"))
	t.Logf("run took %v", time.Since(t0).Round(time.Millisecond))
	var rows []report.Row
	if b, err := os.ReadFile(jsonPath); code != 0 || err != nil || json.Unmarshal(b, &rows) != nil {
		t.Fatalf("exit %d, %s: %v\nstdout:\n%s\nstderr:\n%s", code, jsonPath, err, stdout, stderr)
	}
	seen := map[string]int{}
	for _, r := range rows {
		seen[r.Backend]++
		want := report.Kept
		switch {
		case r.Fencing && noFence[r.Backend]:
			want = report.Skipped
		case r.Scenario == suite.DeterministicPause && !r.Fencing:
			want = report.Broken
		}
		t.Logf("%s fencing=%v %s: %s %dms", r.Backend, r.Fencing, r.Scenario, r.Verdict, r.DurationMS)
		if r.Verdict != want && !machinesDoing(t, r) {
			t.Errorf("%s fencing=%v %s: %s (%s), want %s", r.Backend, r.Fencing, r.Scenario, r.Verdict, r.Reason, want)
		}
	}
	for _, n := range backends {
		if seen[n] != 4 {
			t.Errorf("%s: %d rows, want 4 (2 scenarios × fencing off, on)", n, seen[n])
		}
	}
	// Chaos workers are processes of their own, which read the variables
	// again (ZooKeeper's, and redsync-3's shared CA) to reach the servers.
	// They inherit them here, so this does not tell whether WorkerEnv
	// carries them: TestCredentialsFromEnv and TestZooKeeperAuthFromEnv do.
	t0 = time.Now()
	chaosJSON := filepath.Join(tmp, "chaos.json")
	code, cout, cerr := runCLI(t, tmp, "run", "--backends", "zookeeper,zk-lock,redsync-3", "--scenarios", "chaos-none", "--fencing", "off",
		"--chaos-duration", "1s", "--workers", "2", "--json", chaosJSON)
	t.Logf("chaos run took %v", time.Since(t0).Round(time.Millisecond))
	rows = nil
	if b, err := os.ReadFile(chaosJSON); code != 0 || err != nil || json.Unmarshal(b, &rows) != nil || len(rows) != 3 {
		t.Fatalf("exit %d, %d rows in %s: %v\nstdout:\n%s\nstderr:\n%s", code, len(rows), chaosJSON, err, cout, cerr)
	}
	for _, r := range rows {
		if r.Workers != 2 || r.Writes == 0 || r.Verdict != report.Kept && !machinesDoing(t, r) {
			t.Errorf("%s chaos-none: %s, %d workers, %d writes (%s): want kept, by 2 workers", r.Backend, r.Verdict, r.Workers, r.Writes, r.Reason)
		}
	}
	bufs := map[string][]byte{"stdout": []byte(stdout), "stderr": []byte(stderr), "chaos stdout": []byte(cout), "chaos stderr": []byte(cerr)}
	if l := leaks(t, tmp, bufs, secrets); len(l) > 0 {
		t.Errorf("secrets leaked:\n%s", strings.Join(l, "\n"))
	}
}

// TestBadCredentialsLibraries: the library backends and ZooKeeper refuse to
// run, with exit 2 and the variable to fix, on a wrong or missing
// credential or TLS setting, as TestBadCredentials checks for the adapters.
func TestBadCredentialsLibraries(t *testing.T) {
	s := securedServers(t)
	secrets := s.secrets(t)
	good := libsEnv(t, s, t.TempDir(), secrets)
	const wrong = "wrongpw0123456789"
	secrets["the wrong password"] = wrong
	nodes := strings.Split(good["LOCKSUITE_REDIS_NODES"], ",")
	wrongNode := strings.Replace(nodes[1], ":"+securedLibs.redis[0].Secrets().Password+"@", ":"+wrong+"@", 1)

	// The digest scheme takes any password: a wrong one shows against the
	// ACL of znodes the right one made. Leave /locksuite/keep/lock, made
	// with the right user's ACL, as a run would leave a lock it never
	// cleaned up.
	zs := securedLibs.zk.Secrets()
	tlsCfg, err := zs.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	zl, err := zookeeper.New(zookeeper.Config{Servers: []string{securedLibs.zk.Endpoint()}, TLS: tlsCfg, Auth: good["LOCKSUITE_ZOOKEEPER_AUTH"],
		Key: "locksuite/keep/lock", Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := zl.Acquire(ctx)
	if err == nil {
		err = l.Release(ctx)
	}
	zl.Close()
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, backend string
		env           map[string]string // "" unsets
		want          []string
	}{
		{"redsync wrong password", "redsync", map[string]string{"REDIS_URL": "rediss://locksuite:" + wrong + "@" + s.redis.Endpoint() + "/0"},
			[]string{"redis unavailable", "authentication failed", "REDIS_URL"}},
		{"redsync-3 wrong password", "redsync-3", map[string]string{"LOCKSUITE_REDIS_NODES": strings.Join([]string{nodes[0], wrongNode, nodes[2]}, ",")},
			[]string{"redis-3 unavailable", "authentication failed", "LOCKSUITE_REDIS_NODES"}},
		{"redsync-3 untrusted certificate", "redsync-3", map[string]string{"LOCKSUITE_REDIS_CACERT": ""},
			[]string{"redis-3 unavailable", "certificate is not trusted", "LOCKSUITE_REDIS_CACERT"}},
		{"etcd-mutex wrong password", "etcd-mutex", map[string]string{"ETCDCTL_USER": "root:" + wrong},
			[]string{"etcd unavailable", "authentication failed", "fix: set ETCDCTL_USER=user:password"}},
		{"consul-lock no token", "consul-lock", map[string]string{"CONSUL_HTTP_TOKEN": ""},
			[]string{"consul unavailable", "authentication failed", "fix: set CONSUL_HTTP_TOKEN"}},
		{"zookeeper no user", "zookeeper", map[string]string{"LOCKSUITE_ZOOKEEPER_AUTH": ""},
			[]string{"zookeeper unavailable", "authentication failed", "fix: set LOCKSUITE_ZOOKEEPER_AUTH=user:password"}},
		{"zk-lock wrong password", "zk-lock", map[string]string{"LOCKSUITE_ZOOKEEPER_AUTH": zs.User + ":" + wrong},
			[]string{"zookeeper unavailable", "authentication failed", "fix: set LOCKSUITE_ZOOKEEPER_AUTH"}},
		{"zookeeper plain to a TLS port", "zookeeper", map[string]string{"LOCKSUITE_ZOOKEEPER_CACERT": "", "LOCKSUITE_ZOOKEEPER_CERT": "", "LOCKSUITE_ZOOKEEPER_KEY": ""},
			[]string{"zookeeper unavailable", "server requires TLS", "fix: set LOCKSUITE_ZOOKEEPER_CACERT"}},
		{"zookeeper untrusted certificate", "zookeeper", map[string]string{"LOCKSUITE_ZOOKEEPER_CACERT": s.redis.Secrets().CAFile},
			[]string{"zookeeper unavailable", "certificate is not trusted", "LOCKSUITE_ZOOKEEPER_CACERT"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setEnv(t, good, tc.env)
			refusedBaseline(t, tc.backend, tc.want, secrets)
		})
	}
}

// setEnv sets the variables of each map in turn for the rest of t; an empty
// value unsets its variable.
func setEnv(t *testing.T, vars ...map[string]string) {
	for _, m := range vars {
		for k, v := range m {
			if t.Setenv(k, v); v == "" {
				os.Unsetenv(k)
			}
		}
	}
}
