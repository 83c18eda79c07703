package local

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/locksuite/locksuite/harness/nodes"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/servers/servertest"
	"github.com/locksuite/locksuite/internal/owner"
	"github.com/locksuite/locksuite/suite"
)

// TestNodeScenarios runs each node scenario once, fencing off, on the
// cluster it is written for: split-brain and split-brain-min-replicas on
// redis-sentinel (measured: the row must have a verdict and the one
// isolation of the primary and A in its schedule), isolate-leader on
// etcd-cluster and partition-random (one fault) on etcd-cluster, which must
// keep the invariant. partition-random's fault must be on its timeline, as
// a band over every lane. Without root every one must be skipped with the
// reason and how to run. Afterwards no link of this process is left.
func TestNodeScenarios(t *testing.T) {
	ctx := servertest.Slow(t, "starts real clusters on network namespaces", 5*time.Minute)
	env, err := Start(ctx, []string{"redis-sentinel", "etcd-cluster"})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	root := nodes.Check() == nil
	for _, tc := range []struct {
		backend, scenario string
		want              report.Verdict // "" : measured
	}{
		{"redis-sentinel", suite.SplitBrain, ""},
		{"redis-sentinel", suite.SplitBrainMinReplicas, ""},
		{"etcd-cluster", suite.IsolateLeader, report.Kept},
		{"etcd-cluster", suite.PartitionRandom, report.Kept},
	} {
		t.Run(tc.backend+"/"+tc.scenario, func(t *testing.T) {
			if err := env.Unavailable[tc.backend]; err != nil {
				t.Fatal(err)
			}
			cfg := env.Config(tc.backend, false)
			cfg.Chaos.Pauses = 1
			cfg.Artifacts = t.TempDir()
			row, err := suite.Run(ctx, cfg, tc.scenario)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %s; schedule %s; health %s", row.Verdict, row.Reason, row.Schedule, row.Health)
			if !root {
				if row.Verdict != report.Skipped || !strings.Contains(row.Reason, "sudo") {
					t.Fatalf("without root: %s (%s), want skipped saying how to run", row.Verdict, row.Reason)
				}
				return
			}
			switch {
			case row.Verdict == report.Skipped || row.Verdict == report.Unknown:
				t.Fatalf("%s: %s", row.Verdict, row.Reason)
			case tc.want != "" && row.Verdict != tc.want:
				t.Errorf("verdict %s, want %s: %s", row.Verdict, tc.want, row.Reason)
			case row.Faults != 1:
				t.Errorf("%d faults struck, want 1 (%s)", row.Faults, row.Schedule)
			}
			if tc.scenario == suite.PartitionRandom {
				checkBand(t, row)
			}
		})
	}
	if links := ownLinks(t); len(links) > 0 {
		t.Errorf("links of this process left after the runs: %v", links)
	}
}

// checkBand: the run's timeline has its fault over every lane.
func checkBand(t *testing.T, row report.Row) {
	t.Helper()
	for _, a := range row.Artifacts {
		if filepath.Ext(a) != ".json" {
			continue
		}
		b, err := os.ReadFile(a)
		if err != nil {
			t.Fatal(err)
		}
		var tl report.Timeline
		if err := json.Unmarshal(b, &tl); err != nil {
			t.Fatal(err)
		}
		for _, f := range tl.Faults {
			if f.Client == -1 && f.End > f.Start {
				return
			}
		}
		t.Errorf("no fault band of the lock service on the timeline: %+v", tl.Faults)
		return
	}
	t.Errorf("no history kept: %v", row.Artifacts)
}

// ownLinks are the links whose alias names this process as their owner
// ("locksuite owner <pid> <start>").
func ownLinks(t *testing.T) []string {
	t.Helper()
	self, err := owner.Self()
	if err != nil {
		t.Fatal(err)
	}
	dirs, _ := os.ReadDir("/sys/class/net")
	var out []string
	for _, d := range dirs {
		alias, _ := os.ReadFile(filepath.Join("/sys/class/net", d.Name(), "ifalias"))
		if strings.HasPrefix(d.Name(), "locksuite") && strings.HasSuffix(strings.TrimSpace(string(alias)), " "+self) {
			out = append(out, d.Name())
		}
	}
	return out
}
