package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/harness/servers/servertest"
	"github.com/locksuite/locksuite/harness/services/nats"
)

// TestBadCredentialsMySQLNATS: a MYSQL_URL or NATS_URL with a wrong or
// missing password, against a MariaDB and an embedded NATS server that
// require one, ends the run with exit 2 within a bound, naming the service,
// the problem and the variable that fixes it, and printing no password.
func TestBadCredentialsMySQLNATS(t *testing.T) {
	ctx := servertest.Slow(t, "starts real servers", 3*time.Minute)
	my := servertest.Start(t, ctx, servers.StartMariaDB, servers.WithAuth())
	nt := servertest.Start(t, ctx, nats.Start, servers.WithAuth())
	const wrong = "wrongpw0123456789"
	myPass := my.Secrets().Password
	natsUser, natsPass := nt.Secrets().User, nt.Secrets().Password
	for _, tc := range []struct {
		name, backend, env, value string
		want                      []string
	}{
		{"mysql wrong password", "mysql", "MYSQL_URL", strings.Replace(my.DSN(), ":"+myPass+"@", ":"+wrong+"@", 1),
			[]string{"mysql unavailable", "authentication failed", "fix: put the right user and password in MYSQL_URL"}},
		{"mysql no password", "mysql", "MYSQL_URL", my.Endpoint(),
			[]string{"mysql unavailable", "authentication failed", "MYSQL_URL"}},
		{"nats wrong password", "nats-kv", "NATS_URL", "nats://" + natsUser + ":" + wrong + "@" + nt.Addr(),
			[]string{"nats unavailable", "authentication failed", "fix: put the right credentials in NATS_URL"}},
		{"nats no password", "nats-kv", "NATS_URL", nt.Endpoint(),
			[]string{"nats unavailable", "authentication failed", "NATS_URL"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			refusedBaseline(t, tc.backend, tc.want, map[string]string{"the wrong password": wrong, "MariaDB's password": myPass, "NATS's password": natsPass})
		})
	}
}

// refusedBaseline runs the CLI's baseline on backend, with the environment
// the caller set, and checks that it ends with exit 2 within 30 s, that its
// standard error contains each of want, and that nothing it printed holds
// any of secrets (named by what they are).
func refusedBaseline(t *testing.T, backend string, want []string, secrets map[string]string) {
	t.Helper()
	var out, errb bytes.Buffer
	t0 := time.Now()
	code := cli([]string{"run", "--backends", backend, "--scenarios", "baseline", "--fencing", "on", "--duration", "200ms",
		"--log", filepath.Join(t.TempDir(), "spec.log")}, &out, &errb)
	d := time.Since(t0)
	t.Logf("%v: %s", d.Round(time.Millisecond), strings.TrimSpace(errb.String()))
	if code != 2 {
		t.Errorf("exit %d, want 2", code)
	}
	for _, w := range want {
		if !strings.Contains(errb.String(), w) {
			t.Errorf("stderr does not contain %q", w)
		}
	}
	if d > 30*time.Second {
		t.Errorf("took %v: a refused connection must be reported within 30s", d)
	}
	for what, sec := range secrets {
		if strings.Contains(out.String()+errb.String(), sec) {
			t.Errorf("%s printed", what)
		}
	}
}
