package ci

import (
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestShardsWorkflow: ci/github/locksuite-shards.yml parses, its job
// matrix lists the shards 1..N of its --shard I/N, a shard's finding
// neither cancels the other shards nor keeps its rows from being uploaded,
// the merge job runs after every shard whatever their status and merges
// the directory the shards' artifacts are downloaded to, and ci/setup.sh
// accepts the services it installs. (cmd/locksuite's TestShardsWorkflowFlags
// parses its locksuite command lines.)
func TestShardsWorkflow(t *testing.T) {
	var w struct {
		Jobs map[string]struct {
			Needs    string `yaml:"needs"`
			If       string `yaml:"if"`
			Strategy struct {
				FailFast *bool `yaml:"fail-fast"`
				Matrix   struct {
					Shard []int `yaml:"shard"`
				} `yaml:"matrix"`
			} `yaml:"strategy"`
			Steps []struct {
				Name            string         `yaml:"name"`
				Uses            string         `yaml:"uses"`
				Run             string         `yaml:"run"`
				If              string         `yaml:"if"`
				ContinueOnError bool           `yaml:"continue-on-error"`
				With            map[string]any `yaml:"with"`
			} `yaml:"steps"`
		} `yaml:"jobs"`
	}
	if err := yaml.Unmarshal(readFile(t, "github/locksuite-shards.yml"), &w); err != nil {
		t.Fatalf("ci/github/locksuite-shards.yml does not parse: %v", err)
	}
	shard, merge := w.Jobs["shard"], w.Jobs["merge"]
	if len(shard.Steps) == 0 || len(merge.Steps) == 0 {
		t.Fatalf("jobs %v: want shard and merge", slices.Collect(maps.Keys(w.Jobs)))
	}
	n := len(shard.Strategy.Matrix.Shard)
	for i, s := range shard.Strategy.Matrix.Shard {
		if s != i+1 {
			t.Errorf("matrix shard %v: want 1..%d", shard.Strategy.Matrix.Shard, n)
			break
		}
	}
	if f := shard.Strategy.FailFast; f == nil || *f {
		t.Error("the shard job's fail-fast is not false: a shard's finding would cancel the others")
	}
	var run, upload, install string
	for _, s := range shard.Steps {
		switch {
		case strings.Contains(s.Run, "locksuite run"):
			run = s.Run
			if !s.ContinueOnError {
				t.Errorf("step %q: no continue-on-error: a finding (exit 1) would keep its rows from the merge", s.Name)
			}
		case strings.HasPrefix(s.Uses, "actions/upload-artifact@"):
			upload = fmt.Sprint(s.With["name"])
			if s.If != "always()" {
				t.Errorf("step %q runs if %q, want always()", s.Name, s.If)
			}
		case strings.Contains(s.Run, "ci/setup.sh"):
			install = s.Run
		}
	}
	if !strings.Contains(run, fmt.Sprintf("--shard ${{ matrix.shard }}/%d ", n)) {
		t.Errorf("the shard's run %q: want --shard ${{ matrix.shard }}/%d, the matrix's %d shards", run, n, n)
	}
	if services, ok := strings.CutPrefix(strings.TrimSpace(install), "ci/setup.sh "); !ok {
		t.Errorf("no step runs ci/setup.sh SERVICE...: %q", install)
	} else if out, err := exec.Command("bash", append([]string{filepath.Join("..", "ci", "setup.sh"), "--list"}, strings.Fields(services)...)...).CombinedOutput(); err != nil {
		t.Errorf("ci/setup.sh refuses the services %q: %v\n%s", services, err, out)
	}
	if merge.Needs != "shard" || merge.If != "always()" {
		t.Errorf("the merge job needs %q if %q: want needs: shard, if: always() (after every shard, a finding or not)", merge.Needs, merge.If)
	}
	var dir, mergeRun string
	for _, s := range merge.Steps {
		if strings.HasPrefix(s.Uses, "actions/download-artifact@") {
			dir = fmt.Sprint(s.With["path"])
			if p := fmt.Sprint(s.With["pattern"]); !matchGlob(p, upload) || s.With["merge-multiple"] != true {
				t.Errorf("the merge job downloads %q (merge-multiple %v), the shards upload %q", p, s.With["merge-multiple"], upload)
			}
		}
		if strings.Contains(s.Run, "locksuite merge") {
			mergeRun = s.Run
		}
	}
	if f := strings.Fields(mergeRun); len(f) == 0 || f[len(f)-1] != dir {
		t.Errorf("the merge job runs %q: want the shards' directory %q as its last argument", mergeRun, dir)
	}
}

// matchGlob reports whether name, with ${{ ... }} as any text, matches
// the artifact pattern p (a * glob).
func matchGlob(p, name string) bool {
	name = regexp.MustCompile(`\$\{\{[^}]*\}\}`).ReplaceAllString(name, "x")
	ok, err := filepath.Match(p, name)
	return ok && err == nil
}
