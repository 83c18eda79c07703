package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/harness/services/etcd"
	"github.com/locksuite/locksuite/suite"
)

// secured is one server of each backend started WithAuth and WithTLS,
// shared by the tests of this file and stopped by TestMain.
type secured struct {
	redis    *servers.Redis
	postgres *servers.Postgres
	etcd     *etcd.Server
	consul   *servers.Consul
}

var shared struct {
	once sync.Once
	s    *secured
	err  error
}

func stopSecured() {
	stopSecuredLibs()
	if s := shared.s; s != nil {
		for _, srv := range []servers.Server{s.redis, s.postgres, s.etcd, s.consul} {
			if srv != nil {
				srv.Stop()
			}
		}
	}
}

// securedServers starts the four secured servers once.
func securedServers(t *testing.T) *secured {
	t.Helper()
	if testing.Short() {
		t.Skip("starts real servers")
	}
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s := &secured{}
		shared.s = s
		opts := []servers.Option{servers.WithAuth(), servers.WithTLS()}
		if s.redis, shared.err = servers.StartRedis(ctx, opts...); shared.err != nil {
			return
		}
		if s.postgres, shared.err = servers.StartPostgres(ctx, opts...); shared.err != nil {
			return
		}
		if s.etcd, shared.err = etcd.Start(ctx, opts...); shared.err != nil {
			return
		}
		s.consul, shared.err = servers.StartConsul(ctx, opts...)
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.s
}

// env names the secured servers with the ecosystem's variables: Redis in a
// rediss:// URL with the ACL user and password, Postgres with the PG*
// variables, etcd with https endpoints, a client certificate and
// ETCDCTL_USER, Consul over HTTPS with a token.
func (s *secured) env() map[string]string {
	pg := s.postgres.Secrets()
	host, port, _ := strings.Cut(strings.TrimPrefix(strings.Split(s.postgres.Endpoint(), "/")[2], "locksuite@"), ":")
	e, c := s.etcd.Secrets(), s.consul.Secrets()
	return map[string]string{
		"REDIS_URL":              s.redis.URL(),
		"LOCKSUITE_REDIS_CACERT": s.redis.Secrets().CAFile,
		"PGHOST":                 host,
		"PGPORT":                 port,
		"PGUSER":                 pg.User,
		"PGPASSWORD":             pg.Password,
		"PGDATABASE":             "postgres",
		"PGSSLMODE":              "verify-full",
		"PGSSLROOTCERT":          pg.CAFile,
		"ETCDCTL_ENDPOINTS":      s.etcd.URL(),
		"ETCDCTL_CACERT":         e.CAFile,
		"ETCDCTL_CERT":           e.CertFile,
		"ETCDCTL_KEY":            e.KeyFile,
		"ETCDCTL_USER":           e.User + ":" + e.Password,
		"CONSUL_HTTP_ADDR":       s.consul.Endpoint(),
		"CONSUL_HTTP_SSL":        "true",
		"CONSUL_CACERT":          c.CAFile,
		"CONSUL_HTTP_TOKEN":      c.Token,
	}
}

// secrets are what must never be printed: the passwords, the token, and
// the private keys' material (each line of their PEM bodies).
func (s *secured) secrets(t *testing.T) map[string]string {
	out := map[string]string{
		"redis password":    s.redis.Secrets().Password,
		"postgres password": s.postgres.Secrets().Password,
		"etcd password":     s.etcd.Secrets().Password,
		"consul token":      s.consul.Secrets().Token,
	}
	for name, f := range map[string]string{"etcd client key": s.etcd.Secrets().KeyFile} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(b)
		if blk == nil {
			t.Fatalf("%s: no PEM", f)
		}
		for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if !strings.HasPrefix(line, "-----") && len(line) >= 16 {
				out[fmt.Sprintf("%s line %d", name, i)] = line
			}
		}
	}
	return out
}

// leaks lists, for every file under dir and every named buffer, each
// secret found in it.
func leaks(t *testing.T, dir string, bufs map[string][]byte, secrets map[string]string) []string {
	t.Helper()
	texts := map[string][]byte{}
	for n, b := range bufs {
		texts[n] = b
	}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		texts[p] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(texts) < 2 {
		t.Fatalf("nothing to search in %s", dir)
	}
	t.Logf("searched %d files and buffers for %d secrets", len(texts), len(secrets))
	var out []string
	for n, b := range texts {
		for what, sec := range secrets {
			if sec != "" && bytes.Contains(b, []byte(sec)) {
				out = append(out, fmt.Sprintf("%s in %s", what, n))
			}
		}
	}
	sort.Strings(out)
	return out
}

// machinesDoing reports whether r is unknown because the machine held an
// unfenced holder up past its lease (Row.MachineStall), as a busy machine
// may on plain servers too, after the run wrote: its clients reached the
// servers, and the run has no verdict of the lock's (no finding: the CLI
// exits 0 for it). It logs such a row.
func machinesDoing(t *testing.T, r report.Row) bool {
	t.Helper()
	if !r.Stalled() || r.Writes == 0 {
		return false
	}
	t.Logf("%s fencing=%v %s: unknown, the machine's doing: %s", r.Backend, r.Fencing, r.Scenario, r.MachineStall)
	return true
}

// TestTLSAndAuth runs the CLI (--backends redis,postgres,etcd,consul: the
// four whose servers securedServers starts; and etcd-cluster and
// consul-cluster, named by LOCKSUITE_ETCD_CLUSTER and
// LOCKSUITE_CONSUL_CLUSTER as clusters of one of those servers, which take
// the ETCDCTL_* and CONSUL_* credentials and TLS settings) against servers
// that require authentication and TLS (etcd: a client certificate too),
// named only by the variables: the baseline, the deterministic pause fenced
// and unfenced, and a chaos run (worker processes), with every output on.
// Every result must be what it is on plain servers, and no password, token
// or private key may appear in any file the run produced, nor on its
// stdout or stderr.
func TestTLSAndAuth(t *testing.T) {
	s := securedServers(t)
	tmp := t.TempDir()
	// Postgres runs as the postgres user; nothing of this run needs that,
	// but the CLI's own temporary files go here too.
	out := filepath.Join(tmp, "out")
	arts := filepath.Join(out, "artifacts")
	if err := os.MkdirAll(arts, 0o755); err != nil {
		t.Fatal(err)
	}
	jsonPath := filepath.Join(out, "r.json")
	names := []string{"redis", "postgres", "etcd", "consul", "etcd-cluster", "consul-cluster"}
	cmd := exec.Command(os.Args[0], "run", "--backends", strings.Join(names, ","), "--scenarios", "baseline,deterministic-pause,chaos-none",
		"--duration", "500ms", "--chaos-duration", "1s", "--workers", "2",
		"--json", jsonPath, "--markdown", filepath.Join(out, "r.md"), "--junit", filepath.Join(out, "junit.xml"),
		"--log", filepath.Join(out, "spec.log"), "--artifacts", arts)
	cmd.Env = append(os.Environ(), "LOCKSUITE_TEST_AS_CLI=1", "TMPDIR="+tmp)
	env := s.env()
	env["LOCKSUITE_ETCD_CLUSTER"] = env["ETCDCTL_ENDPOINTS"]
	env["LOCKSUITE_CONSUL_CLUSTER"] = env["CONSUL_HTTP_ADDR"]
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	err := cmd.Run()
	t.Logf("run took %v", time.Since(t0).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	var rows []report.Row
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rows); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, r := range rows {
		seen[r.Backend]++
		want := report.Kept
		if r.Scenario == suite.DeterministicPause && !r.Fencing {
			want = report.Broken
		}
		switch {
		case machinesDoing(t, r):
		case r.Verdict != want:
			t.Errorf("%s fencing=%v %s: %s (%s), want %s", r.Backend, r.Fencing, r.Scenario, r.Verdict, r.Reason, want)
		}
	}
	for _, n := range names {
		if seen[n] != 6 {
			t.Errorf("%s: %d rows, want 6 (3 scenarios × fencing off, on)", n, seen[n])
		}
	}
	// Every run keeps its history and its timeline: 3 scenarios × fencing
	// off, on × each backend.
	want := 6 * len(names)
	if a, _ := filepath.Glob(filepath.Join(arts, "*.json")); len(a) != want {
		t.Errorf("%d histories in --artifacts, want %d", len(a), want)
	}
	if a, _ := filepath.Glob(filepath.Join(arts, "*.html")); len(a) != want+1 { // and index.html
		t.Errorf("%d timelines and index.html in --artifacts, want %d and 1", len(a), want)
	}

	secrets := s.secrets(t)
	bufs := map[string][]byte{"stdout": stdout.Bytes(), "stderr": stderr.Bytes()}
	if l := leaks(t, tmp, bufs, secrets); len(l) > 0 {
		t.Errorf("secrets leaked:\n%s", strings.Join(l, "\n"))
	}
	// The search would see a leak: one planted in the JSON report and one
	// on stderr are both found.
	if err := os.WriteFile(jsonPath, append(b, []byte(s.env()["REDIS_URL"])...), 0o644); err != nil {
		t.Fatal(err)
	}
	bufs["stderr"] = append(bufs["stderr"], "token "+s.consul.Secrets().Token...)
	got := strings.Join(leaks(t, tmp, bufs, secrets), "\n")
	if !strings.Contains(got, "redis password in "+jsonPath) || !strings.Contains(got, "consul token in stderr") {
		t.Errorf("planted leaks not found; found:\n%s", got)
	}
}

// TestBadCredentials: wrong or missing credentials, and a plain client at a
// TLS-only server, each exit 2 within a bound with an error that names the
// backend, the problem and the variable that fixes it, and print no secret.
func TestBadCredentials(t *testing.T) {
	s := securedServers(t)
	good := s.env()
	secrets := s.secrets(t)
	const wrong = "wrongpw0123456789"
	secrets["the wrong password"] = wrong
	redisAddr := s.redis.Endpoint()
	for _, tc := range []struct {
		name, backend string
		env           map[string]string // "" unsets
		want          []string
	}{
		{"redis wrong password", "redis", map[string]string{"REDIS_URL": "rediss://locksuite:" + wrong + "@" + redisAddr + "/0"},
			[]string{"redis unavailable", "authentication failed", "fix: put the right ACL user and password in REDIS_URL"}},
		{"redis no password", "redis", map[string]string{"REDIS_URL": "rediss://" + redisAddr + "/0"},
			[]string{"redis unavailable", "authentication failed", "REDIS_URL"}},
		{"redis plain to a TLS port", "redis", map[string]string{"REDIS_URL": strings.Replace(good["REDIS_URL"], "rediss://", "redis://", 1), "LOCKSUITE_REDIS_CACERT": ""},
			[]string{"redis unavailable", "server requires TLS", "fix: use a rediss:// URL in REDIS_URL"}},
		{"redis untrusted certificate", "redis", map[string]string{"LOCKSUITE_REDIS_CACERT": ""},
			[]string{"redis unavailable", "certificate is not trusted", "LOCKSUITE_REDIS_CACERT"}},
		{"redis URL that does not parse, with a password", "redis", map[string]string{"REDIS_URL": "rediss://locksuite:" + wrong + "@" + redisAddr + "%zz/0"},
			[]string{"redis unavailable", "REDIS_URL", "fix: set REDIS_URL to redis://[user:password@]host:port/db"}},
		{"postgres URL that does not parse, with a password", "postgres", map[string]string{"DATABASE_URL": "postgres://locksuite:" + wrong + "@" + good["PGHOST"] + ":" + good["PGPORT"] + "/postgres?sslmode=sometimes"},
			[]string{"postgres unavailable", "sslmode is invalid", "fix: check DATABASE_URL"}},
		{"postgres wrong password", "postgres", map[string]string{"PGPASSWORD": wrong},
			[]string{"postgres unavailable", "authentication failed", "PGPASSWORD"}},
		{"postgres wrong password in DATABASE_URL", "postgres", map[string]string{"DATABASE_URL": "postgres://locksuite:" + wrong + "@" + good["PGHOST"] + ":" + good["PGPORT"] + "/postgres?sslmode=require"},
			[]string{"postgres unavailable", "authentication failed", "DATABASE_URL"}},
		{"postgres plain to a TLS-only server", "postgres", map[string]string{"PGSSLMODE": "disable"},
			[]string{"postgres unavailable", "server requires TLS", "fix: set PGSSLMODE=require"}},
		{"etcd wrong password", "etcd", map[string]string{"ETCDCTL_USER": "root:" + wrong},
			[]string{"etcd unavailable", "authentication failed", "fix: set ETCDCTL_USER=user:password"}},
		{"etcd plain to a TLS port", "etcd", map[string]string{"ETCDCTL_ENDPOINTS": s.etcd.Endpoint(), "ETCDCTL_CACERT": "", "ETCDCTL_CERT": "", "ETCDCTL_KEY": ""},
			[]string{"etcd unavailable", "server requires TLS", "fix: use https:// endpoints in ETCDCTL_ENDPOINTS and set ETCDCTL_CACERT"}},
		{"etcd without a client certificate", "etcd", map[string]string{"ETCDCTL_CERT": "", "ETCDCTL_KEY": ""},
			[]string{"etcd unavailable", "requires a client certificate", "ETCDCTL_CERT"}},
		{"consul no token", "consul", map[string]string{"CONSUL_HTTP_TOKEN": ""},
			[]string{"consul unavailable", "authentication failed", "fix: set CONSUL_HTTP_TOKEN"}},
		{"consul wrong token", "consul", map[string]string{"CONSUL_HTTP_TOKEN": "00000000-0000-4000-8000-000000000000"},
			[]string{"consul unavailable", "authentication failed", "fix: set CONSUL_HTTP_TOKEN"}},
		{"consul plain to an HTTPS port", "consul", map[string]string{"CONSUL_HTTP_SSL": ""},
			[]string{"consul unavailable", "server requires TLS", "fix: set CONSUL_HTTP_SSL=true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range good {
				t.Setenv(k, v)
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
				if v == "" {
					os.Unsetenv(k)
				}
			}
			refusedBaseline(t, tc.backend, tc.want, secrets)
		})
	}
}
