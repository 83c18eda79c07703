package ci

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestWorkerAction runs the bash steps of the composite action
// ci/github/worker/action.yml as a runner would (its inputs in their env,
// GITHUB_ACTION_PATH, RUNNER_TEMP, GITHUB_OUTPUT, GITHUB_STEP_SUMMARY), on
// the shipped redis-py worker: it installs (nothing, here), builds the CLI,
// checks the worker and runs two scenarios, leaving the matrix in the
// summary and the rows in the report directory it outputs.
func TestWorkerAction(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import redis").Run(); err != nil {
		t.Skip("/usr/bin/python3 without redis (apt install python3-redis, or ci/setup.sh redis-py)")
	}
	var a struct {
		Inputs map[string]struct {
			Required bool   `yaml:"required"`
			Default  string `yaml:"default"`
		} `yaml:"inputs"`
		Runs struct {
			Using string `yaml:"using"`
			Steps []struct {
				ID    string            `yaml:"id"`
				Uses  string            `yaml:"uses"`
				Shell string            `yaml:"shell"`
				Env   map[string]string `yaml:"env"`
				Run   string            `yaml:"run"`
			} `yaml:"steps"`
		} `yaml:"runs"`
	}
	if err := yaml.Unmarshal(readFile(t, "github/worker/action.yml"), &a); err != nil {
		t.Fatalf("ci/github/worker/action.yml does not parse: %v", err)
	}
	if a.Runs.Using != "composite" {
		t.Fatalf("runs.using %q, want composite", a.Runs.Using)
	}
	root, _ := filepath.Abs("..")
	inputs := map[string]string{
		"worker":    "/usr/bin/python3 " + filepath.Join(root, "backends/foreign/workers/python/redis_py_worker.py"),
		"service":   "redis",
		"scenarios": "baseline,deterministic-pause",
	}
	for n, in := range a.Inputs {
		if _, ok := inputs[n]; !ok {
			if in.Required {
				t.Fatalf("input %s is required: give it here", n)
			}
			inputs[n] = in.Default
		}
	}
	ref := regexp.MustCompile(`\$\{\{\s*inputs\.([a-z-]+)\s*\}\}`)
	tmp := t.TempDir()
	output, summary := filepath.Join(tmp, "output"), filepath.Join(tmp, "summary")
	ran := 0
	for _, s := range a.Runs.Steps {
		if s.Uses != "" {
			continue // actions/setup-go: this machine's Go
		}
		if s.Shell != "bash" {
			t.Fatalf("step %q: shell %q, want bash", s.Run, s.Shell)
		}
		env := append(os.Environ(), "GITHUB_ACTION_PATH="+filepath.Join(root, "ci/github/worker"), "RUNNER_TEMP="+tmp,
			"GITHUB_OUTPUT="+output, "GITHUB_STEP_SUMMARY="+summary)
		for k, v := range s.Env {
			v = ref.ReplaceAllStringFunc(v, func(m string) string {
				n := ref.FindStringSubmatch(m)[1]
				if _, ok := inputs[n]; !ok {
					t.Errorf("step %q uses input %s, which the action does not declare", s.Run, n)
				}
				return inputs[n]
			})
			env = append(env, k+"="+v)
		}
		if ref.MatchString(s.Run) {
			t.Errorf("step %q puts an input in its script: pass it in env", s.Run)
		}
		cmd := exec.Command("bash", "-e", "-c", s.Run)
		cmd.Dir, cmd.Env = root, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("step %q: %v\n%s", s.Run, err, out)
		}
		ran++
	}
	if ran != 4 {
		t.Errorf("%d bash steps, want 4 (install, build, check, run)", ran)
	}
	out := string(readFile(t, output))
	dir, ok := strings.CutPrefix(strings.TrimSpace(out), "report-dir=")
	if !ok {
		t.Fatalf("GITHUB_OUTPUT %q: want report-dir=", out)
	}
	if b := readFile(t, filepath.Join(dir, "locksuite.json")); !strings.Contains(string(b), `"library": "redis-py 4.`) && !strings.Contains(string(b), `"library":"redis-py 4.`) {
		t.Errorf("the rows do not name the worker's library:\n%.600s", b)
	}
	if s := string(readFile(t, summary)); !strings.Contains(s, "deterministic-pause") || !strings.Contains(s, "worker") {
		t.Errorf("the job summary lacks the matrix:\n%s", s)
	}
}
