package local

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/harness/servers/servertest"
	"github.com/locksuite/locksuite/harness/services/kube"
	"github.com/locksuite/locksuite/suite"
)

// TestCrashScenarios starts every service kind of Names crashable
// (WithCrash) and runs one server-crash and one power-loss spec on each,
// unfenced (the CLI gives the whole table: docs/crash.md). Whether a
// service forgets A's lock is what the rows measure; the test asserts what
// holds whatever the service: the run ends with a verdict (a power loss is
// skipped only where FUSE is not available, with the reason), the row says
// how long the service was down and whether it still held A's lock, a
// power loss says what it dropped, and the history has the crash on the
// service's lane. One outcome follows from the design alone: Redis without
// persistence restarts empty, so B is granted while A's lease runs and A's
// write loses B's update. After Close no server process and no lazyfs
// mount of the Env remains.
func TestCrashScenarios(t *testing.T) {
	crashSpecs(t, Names, suite.ServerCrash, suite.PowerLoss)
}

// TestClusterCrashScenarios is TestCrashScenarios for the clusters
// (Clusters): one cluster-crash and one cluster-power-loss spec on each,
// every member killed at once.
func TestClusterCrashScenarios(t *testing.T) {
	crashSpecs(t, Clusters, suite.ClusterCrash, suite.ClusterPowerLoss)
}

// TestKubeCrashScenarios is TestCrashScenarios for the Kubernetes Lease
// (k8s-lease, on the kube-apiserver the harness starts, a backend run
// when named): kube-apiserver and its etcd killed at once and restarted.
// Skipped without the kube-apiserver build.
func TestKubeCrashScenarios(t *testing.T) {
	if _, err := kube.APIServerBinary(); err != nil {
		t.Skipf("%v: run ci/setup.sh to build kube-apiserver %s (or set LOCKSUITE_KUBE_APISERVER)", err, kube.Version)
	}
	crashSpecs(t, []string{"k8s-lease"}, suite.ServerCrash, suite.PowerLoss)
}

// crashSpecs starts names crashable and runs crash, then powerLoss, once
// on each, unfenced, checking each row (see TestCrashScenarios), and that
// Close leaves no process and no lazyfs mount of the Env.
func crashSpecs(t *testing.T, names []string, crash, powerLoss string) {
	ctx := servertest.Slow(t, "crashes and restarts real servers", 10*time.Minute)
	before := lazyMounts(t)
	env, err := Start(ctx, names, WithCrash())
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			env.Close()
		}
	}()
	var mounts []string
	for _, m := range lazyMounts(t) {
		if !slices.Contains(before, m) {
			mounts = append(mounts, m)
		}
	}
	for _, n := range names {
		if err := env.Unavailable[n]; err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		for _, scenario := range []string{crash, powerLoss} {
			t.Run(n+"/"+scenario, func(t *testing.T) {
				cfg := env.Config(n, false)
				cfg.ExpectLoss = true
				cfg.Artifacts = t.TempDir()
				row, err := suite.Run(ctx, cfg, scenario)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%s: %d writes, counter %d: %s", row.Verdict, row.Writes, row.Counter, row.Reason)
				if row.Verdict == report.Skipped {
					if scenario == powerLoss && len(mounts) == 0 && strings.Contains(row.Reason, "cannot lose power") {
						t.Skip(row.Reason)
					}
					t.Fatalf("skipped: %s", row.Reason)
				}
				if row.Verdict != report.Kept && row.Verdict != report.Broken {
					t.Fatalf("verdict %s: %s", row.Verdict, row.Reason)
				}
				for _, want := range []string{"the service was down", "A wrote"} {
					if !strings.Contains(row.Reason, want) {
						t.Errorf("the reason does not say %q: %s", want, row.Reason)
					}
				}
				if !strings.Contains(row.Reason, "still held A's lock") && !strings.Contains(row.Reason, "no longer held A's lock") {
					t.Errorf("the reason does not say whether the service still held A's lock: %s", row.Reason)
				}
				if scenario == powerLoss && !strings.Contains(row.Reason, "the power loss dropped") {
					t.Errorf("the reason does not say what the power loss dropped: %s", row.Reason)
				}
				checkCrashHistory(t, row, scenario == powerLoss)
				if n == "redis" && scenario == suite.ServerCrash && (row.Verdict != report.Broken || !strings.Contains(row.Reason, "no longer held A's lock")) {
					t.Errorf("Redis without persistence kept A's lock across a crash? %s: %s", row.Verdict, row.Reason)
				}
			})
		}
	}
	var pids []int
	for _, s := range env.servers {
		switch v := s.(type) {
		case interface{ Members() []*servers.Member }:
			for _, m := range v.Members() {
				pids = append(pids, m.Pid())
			}
		case *kube.APIServer:
			pids = append(pids, v.Pid())
		}
	}
	closed = true
	env.Close()
	for _, pid := range pids {
		if pid != 0 && syscall.Kill(pid, 0) == nil {
			t.Errorf("process %d still exists after Close", pid)
		}
	}
	after := lazyMounts(t)
	for _, m := range mounts {
		if slices.Contains(after, m) {
			t.Errorf("%s is still mounted after Close", m)
		}
	}
}

// lazyMounts are the lazyfs mount points in /proc/self/mounts.
func lazyMounts(t *testing.T) []string {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	var ms []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 2 && strings.Contains(f[2], "lazyfs") {
			ms = append(ms, f[1])
		}
	}
	return ms
}

// checkCrashHistory: the run's history has its sections and the crash, a
// fault of the whole service; a power loss says what it dropped.
func checkCrashHistory(t *testing.T, row report.Row, powerLoss bool) {
	t.Helper()
	var tl report.Timeline
	if len(row.Artifacts) != 2 {
		t.Errorf("artifacts %v, want a history and a timeline", row.Artifacts)
		return
	}
	b, err := os.ReadFile(row.Artifacts[0])
	if err == nil {
		err = json.Unmarshal(b, &tl)
	}
	if err != nil || len(tl.Sections) < 5 {
		t.Errorf("history %s: %v, %d sections", row.Artifacts[0], err, len(tl.Sections))
		return
	}
	if len(tl.Faults) != 1 || (tl.Faults[0].Kind != "crash" && tl.Faults[0].Kind != "power loss") || tl.Faults[0].Client != -1 {
		t.Errorf("history faults %+v, want the crash of the service", tl.Faults)
	} else if powerLoss && !strings.Contains(tl.Faults[0].What, "dropped") {
		t.Errorf("the timeline's power loss %q does not say what it dropped", tl.Faults[0].What)
	}
}
