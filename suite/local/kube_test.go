package local_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/servers/servertest"
	"github.com/locksuite/locksuite/harness/services/kube"
	"github.com/locksuite/locksuite/suite"
	"github.com/locksuite/locksuite/suite/local"
	"github.com/locksuite/locksuite/suite/local/localtest"
)

// TestKube runs the two Kubernetes backends (local.WhenNamed) once through
// the deterministic pause on the kube-apiserver the harness starts:
// unfenced each loses the stalled holder's update, fenced neither does.
// Then the worker's path: a second Start given the first's Environ
// (KUBECONFIG and LOCKSUITE_KUBE_NAMESPACE) starts no server, and its
// client contends for the same Lease as the first Env's; a namespace
// that does not exist is reported as such.
func TestKube(t *testing.T) {
	ctx := servertest.Slow(t, "starts a real kube-apiserver", 3*time.Minute)
	if _, err := kube.APIServerBinary(); err != nil {
		t.Skipf("%v: run ci/setup.sh to build kube-apiserver %s (or set LOCKSUITE_KUBE_APISERVER)", err, kube.Version)
	}
	env := localtest.Start(t, ctx, local.WhenNamed)
	for _, n := range local.WhenNamed {
		if err := env.Unavailable[n]; err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		for _, fenced := range []bool{false, true} {
			row, err := suite.Run(ctx, env.Config(n, fenced), suite.DeterministicPause)
			want := map[bool]report.Verdict{false: report.Broken, true: report.Kept}[fenced]
			if err != nil || row.Verdict != want {
				t.Errorf("%s fenced=%v: %s (%s), %v; want %s", n, fenced, row.Verdict, row.Reason, err, want)
			}
		}
	}

	for _, v := range env.Environ() {
		if k, val, _ := strings.Cut(v, "="); k == "KUBECONFIG" || k == local.KubeNamespaceEnv {
			t.Setenv(k, val)
		}
	}
	worker := localtest.Start(t, ctx, []string{"k8s-lease"})
	if err := worker.Unavailable["k8s-lease"]; err != nil {
		t.Fatal(err)
	}
	wcfg := worker.Config("k8s-lease", false)
	if wcfg.Servers != nil {
		t.Error("a Kubernetes API named by the environment has Servers")
	}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	cl := suite.Client{Key: "locksuite/kube-test", Dial: dial, Lease: time.Second}
	var lockers []backends.Locker
	for _, cfg := range []suite.Config{env.Config("k8s-lease", false), wcfg} {
		l, err := cfg.NewLocker(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		lockers = append(lockers, l)
	}
	mine, theirs := lockers[0], lockers[1]
	held, err := mine.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if l, err := theirs.Acquire(actx); err == nil {
		l.Release(ctx)
		t.Error("the worker's client took the Lease the coordinator's holds: not the same namespace")
	}
	if err := held.Release(ctx); err != nil {
		t.Error(err)
	}

	t.Setenv(local.KubeNamespaceEnv, "locksuite-none")
	none := localtest.Start(t, ctx, []string{"k8s-lease"})
	if err := none.Unavailable["k8s-lease"]; err == nil || !strings.Contains(err.Error(), "namespace locksuite-none does not exist") {
		t.Errorf("a namespace that does not exist: %v", err)
	}
}
