package local

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// setupScript runs ci/setup.sh with args and returns its stdout.
func setupScript(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{"../../ci/setup.sh"}, args...)...)
	// The builds' overrides would change the plan's "build" lines.
	cmd.Env = append(cmd.Environ(), "LOCKSUITE_CONSUL=", "LOCKSUITE_KUBE_APISERVER=")
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		err = &scriptError{ee, string(ee.Stderr)}
	}
	return string(out), err
}

type scriptError struct {
	*exec.ExitError
	stderr string
}

func (e *scriptError) Error() string { return e.ExitError.Error() + ": " + e.stderr }

// TestSetupServices: ci/setup.sh takes the table's services (and
// "kube-cluster", the harness's own Kubernetes cluster, and "tests") as
// arguments, and installs nothing (--list) but what those need:
// `ci/setup.sh redis postgres` on a machine with none of the services
// would install redis-server, libfaketime and PostgreSQL only; without an
// argument, everything, as before services could be named; an unknown name
// is refused with the choices.
func TestSetupServices(t *testing.T) {
	help, err := setupScript(t, "--help")
	if err != nil {
		t.Fatal(err)
	}
	_, line, ok := strings.Cut(help, "services: ")
	if !ok {
		t.Fatalf("ci/setup.sh --help names no services:\n%s", help)
	}
	var want []string
	for _, s := range allServices() {
		want = append(want, s.Name)
	}
	want = append(want, "kube-cluster")
	want = append(append(want, Languages...), "languages", "tests")
	if got := strings.Fields(line); !slices.Equal(got, want) {
		t.Errorf("ci/setup.sh's services %q, the table's (and kube-cluster, the languages, tests) %q", got, want)
	}
	for _, n := range Languages {
		if _, err := setupScript(t, "--list", n); err != nil {
			t.Errorf("ci/setup.sh --list %s: %v", n, err)
		}
	}
	for _, s := range allServices() {
		if _, err := setupScript(t, "--list", s.Name); err != nil {
			t.Errorf("ci/setup.sh --list %s: %v", s.Name, err)
		}
	}

	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"redis", "postgres"}, []string{"apt redis-server", "apt faketime", "apt postgresql-15"}},
		{[]string{"etcd", "nats"}, nil},
		{[]string{"consul", "consul-cluster", "redis-3"}, []string{"build consul", "apt redis-server"}},
		{[]string{"kube", "zookeeper-ensemble", "mysql"}, []string{"build kube-apiserver", "apt zookeeper", "apt mariadb-server"}},
		// No argument: everything (what ci/setup.sh installed before it
		// took any, and PgBouncer since the poolers).
		{nil, []string{"build consul", "apt postgresql-15", "apt redis-server", "apt faketime", "apt zookeeper", "apt mariadb-server",
			"apt memcached", "build kube-apiserver", "apt redis-sentinel", "apt pgbouncer", "apt containerd", "apt runc", "apt containernetworking-plugins", "apt iptables",
			"build kubelet", "build kube-controller-manager", "build kube-scheduler", "apt python3-redis", "apt python3-kazoo", "apt nodejs", "apt npm",
			"apt openjdk-17-jdk-headless", "apt libcurator-recipes-java", "apt chromium", "apt docker-compose"}},
		{[]string{"kube-cluster"}, []string{"apt containerd", "apt runc", "apt containernetworking-plugins", "apt iptables",
			"build kube-apiserver", "build kubelet", "build kube-controller-manager", "build kube-scheduler"}},
		{[]string{"pgbouncer-session"}, []string{"apt postgresql-15", "apt pgbouncer"}},
		// A language's pieces only when it is named.
		{[]string{"redis", "redis-py"}, []string{"apt redis-server", "apt faketime", "apt python3-redis"}},
		{[]string{"curator"}, []string{"apt zookeeper", "apt openjdk-17-jdk-headless", "apt libcurator-recipes-java"}},
	} {
		out, err := setupScript(t, append([]string{"--list"}, tc.args...)...)
		var got []string
		if out = strings.TrimSpace(out); out != "" {
			got = strings.Split(out, "\n")
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ci/setup.sh --list %s: %q, %v; want %q", strings.Join(tc.args, " "), got, err, tc.want)
		}
	}

	_, err = setupScript(t, "--list", "redis", "hazelcast")
	if err == nil || !strings.Contains(err.Error(), `unknown service "hazelcast": choose from consul etcd`) {
		t.Errorf("ci/setup.sh --list redis hazelcast: %v, want an error naming hazelcast and the choices", err)
	}
}
