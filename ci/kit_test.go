// Package ci holds the tests of the vendoring kit (ci/README.md): the
// GitHub Actions workflow a lock library copies, and the consumer module
// ci/example, which `go test ./...` skips because it is a module of its own.
package ci

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/suite"
)

type workflow struct {
	Name string `yaml:"name"`
	Jobs map[string]struct {
		RunsOn string            `yaml:"runs-on"`
		Env    map[string]string `yaml:"env"`
		Steps  []struct {
			Name string            `yaml:"name"`
			Uses string            `yaml:"uses"`
			Run  string            `yaml:"run"`
			With map[string]any    `yaml:"with"`
			Env  map[string]string `yaml:"env"`
		} `yaml:"steps"`
	} `yaml:"jobs"`
}

// readFile is the file's content; it fails the test if it cannot be read.
func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readmeSteps returns the workflow step names ci/README.md promises: the
// bold names after "Its steps:", up to the next numbered step.
func readmeSteps(t *testing.T) []string {
	b := readFile(t, "README.md")
	s := string(b)
	i := strings.Index(s, "Its steps:")
	if i < 0 {
		t.Fatal(`ci/README.md: no "Its steps:" list`)
	}
	s = s[i:]
	if j := strings.Index(s, "\n4. "); j >= 0 {
		s = s[:j]
	}
	var names []string
	for _, m := range regexp.MustCompile(`\*\*([^*]+)\*\*`).FindAllStringSubmatch(s, -1) {
		names = append(names, m[1])
	}
	return names
}

// TestKitWorkflow: the workflow parses as YAML, has exactly the steps the
// README names in that order, runs this repository's setup script, and
// runs the example's test function.
func TestKitWorkflow(t *testing.T) {
	b := readFile(t, "github/locksuite.yml")
	var w workflow
	if err := yaml.Unmarshal(b, &w); err != nil {
		t.Fatalf("ci/github/locksuite.yml does not parse: %v", err)
	}
	job, ok := w.Jobs["locksuite"]
	if !ok {
		t.Fatalf("no job named locksuite in %v", w.Jobs)
	}
	var names []string
	step := map[string]int{}
	for i, s := range job.Steps {
		names = append(names, s.Name)
		step[s.Name] = i
		if (s.Uses == "") == (s.Run == "") {
			t.Errorf("step %q: needs exactly one of uses and run", s.Name)
		}
	}
	if want := readmeSteps(t); !slices.Equal(names, want) {
		t.Errorf("workflow steps %q, README promises %q", names, want)
	}
	get := func(name string) (uses, run string, with map[string]any) {
		i, ok := step[name]
		if !ok {
			t.Fatalf("no step %q", name)
		}
		s := job.Steps[i]
		return s.Uses, s.Run, s.With
	}
	_, _, with := get("Check out locksuite")
	path, _ := with["path"].(string)
	_, run, _ := get("Install the servers")
	cmdline, ok := strings.CutPrefix(strings.TrimSpace(run), path+"/")
	script, services, _ := strings.Cut(cmdline, " ")
	if !ok || path == "" {
		t.Errorf("Install the servers runs %q, not a script in the locksuite checkout %q", run, path)
	} else if fi, err := os.Stat(filepath.Join("..", script)); err != nil || fi.Mode()&0o111 == 0 {
		t.Errorf("Install the servers runs %s, which is not an executable file of this repository (%v)", script, err)
	} else if out, err := exec.Command("bash", append([]string{filepath.Join("..", script), "--list"}, strings.Fields(services)...)...).CombinedOutput(); err != nil {
		t.Errorf("Install the servers runs %s with services %q, which it refuses: %v\n%s", script, services, err, out)
	}
	// The services it installs are those the example starts.
	example := readFile(t, "example/locksuite_test.go")
	if m := regexp.MustCompile(`local\.Start\([^,]+, \[\]string\{([^}]*)\}`).FindSubmatch(example); m == nil {
		t.Errorf("ci/example/locksuite_test.go calls no local.Start(ctx, []string{...})")
	} else if want := strings.Join(strings.Fields(strings.NewReplacer(`"`, " ", ",", " ").Replace(string(m[1]))), " "); services != want {
		t.Errorf("Install the servers installs %q, the example starts %q", services, want)
	}
	_, run, _ = get("Point the module at locksuite")
	if !strings.Contains(run, "-replace github.com/locksuite/locksuite=./"+path) {
		t.Errorf("Point the module at locksuite runs %q: it must replace the module with ./%s", run, path)
	}
	_, run, _ = get("Run locksuite")
	if !strings.Contains(run, "go test -v") || !strings.Contains(run, "$LOCKSUITE_RUN") {
		t.Errorf("Run locksuite runs %q: want go test -v -run \"$LOCKSUITE_RUN\" (-v: the matrix in the log)", run)
	}
	// The rows and the matrix: written by suite.Test into the report
	// directory, put in the job's summary, uploaded.
	dir := job.Steps[step["Run locksuite"]].Env[suite.ReportDirEnv]
	if dir != "${{ runner.temp }}/locksuite" {
		t.Errorf("Run locksuite sets %s=%q, want ${{ runner.temp }}/locksuite", suite.ReportDirEnv, dir)
	}
	if _, run, _ = get("Show the matrix"); !strings.Contains(run, `"$RUNNER_TEMP"/locksuite/*.md`) || !strings.Contains(run, ">> \"$GITHUB_STEP_SUMMARY\"") {
		t.Errorf("Show the matrix runs %q: want the report directory's Markdown appended to $GITHUB_STEP_SUMMARY", run)
	}
	if _, _, with = get("Keep the report"); with["path"] != dir+"/" {
		t.Errorf("Keep the report uploads %v, want the report directory %s/", with["path"], dir)
	}
	src := readFile(t, "example/locksuite_test.go")
	if fn := job.Env["LOCKSUITE_RUN"]; fn == "" || !strings.Contains(string(src), "func "+fn+"(t *testing.T)") {
		t.Errorf("LOCKSUITE_RUN is %q, not a test function of ci/example/locksuite_test.go", fn)
	}
}

// TestKitExample follows the kit's instructions in a new directory outside
// the repository: it copies ci/example there, points its replace at this
// repository (README step 2), runs its go test without the chaos scenarios,
// and checks the verdicts in Ginkgo's JSON report and the output (the
// sizes, fenced mode not registered, the matrix). Then it runs the example
// again, unchanged, against a Redis that requires a user and password,
// named by REDIS_URL. The time each takes (building the example's test
// binary, then running it) is logged, not asserted.
func TestKitExample(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if rel, err := filepath.Rel(root, dir); err == nil && !strings.HasPrefix(rel, "..") {
		t.Fatalf("temporary directory %s is inside the repository %s", dir, root)
	}
	entries, err := os.ReadDir("example")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b := readFile(t, filepath.Join("example", e.Name()))
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := append(cleanEnv(), "GOWORK=off")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	goCmd := func(extra []string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir, cmd.Env = dir, append(env, extra...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
		}
		return string(out)
	}
	goCmd(nil, "mod", "edit", "-replace", "github.com/locksuite/locksuite="+root)
	reports := t.TempDir()
	run := func(extra []string, filter string, want map[string]report.Verdict) string {
		t.Helper()
		jsonReport := filepath.Join(t.TempDir(), "report.json")
		t0 := time.Now()
		out := goCmd(extra, "test", "-v", "-count=1", "-run", "TestLocksuite", ".", "-args", "-ginkgo.label-filter="+filter, "-ginkgo.json-report="+jsonReport)
		t.Logf("kit example: go test in a new directory took %v (build and run; label filter %s)", time.Since(t0).Round(time.Millisecond), filter)
		got := map[string]report.Verdict{}
		for _, r := range readRows(t, jsonReport) {
			if r.Backend != "mylock" {
				t.Errorf("row of backend %q, want mylock", r.Backend)
			}
			mode := "unfenced"
			if r.Fencing {
				mode = "fenced"
			}
			got[mode+" "+r.Scenario] = r.Verdict
			t.Logf("%s %s: %s %s", mode, r.Scenario, r.Verdict, r.Reason)
		}
		for k, w := range want {
			if got[k] != w {
				t.Errorf("%s: verdict %q, want %q", k, got[k], w)
			}
		}
		// redsync has no token: suite.Test registers no fenced spec, and
		// says why in one line.
		for k := range got {
			if strings.HasPrefix(k, "fenced ") {
				t.Errorf("%s: a fenced spec ran for a lock without a fencing token", k)
			}
		}
		for _, w := range []string{
			"locksuite: mylock lock, fenced: not registered: " + suite.NoFence,
			"locksuite: mylock lock, unfenced: lease 200ms; ",
		} {
			if strings.Count(out, w) != 1 {
				t.Errorf("the output does not say once %q:\n%s", w, out)
			}
		}
		return out
	}
	out := run([]string{suite.ReportDirEnv + "=" + reports}, "!chaos", map[string]report.Verdict{
		"unfenced baseline":             report.Kept,
		"unfenced control":              report.Broken,
		"unfenced deterministic-pause":  report.Broken,
		"unfenced release-after-expiry": report.Kept,
		"unfenced contract":             report.Kept, // Acquire after Close: ErrClosed
	})
	// The matrix at the end of the output, and in the report directory.
	if i := strings.LastIndex(out, "BACKEND  FENCING  baseline"); i < 0 || !strings.Contains(out[i:], "\nmylock   off      kept") {
		t.Errorf("the output does not end with the matrix:\n%s", out)
	} else {
		t.Logf("the matrix:\n%s", out[i:])
	}
	b := readFile(t, filepath.Join(reports, "locksuite-TestLocksuite.json"))
	rows, err := report.DecodeRows(bytes.NewReader(b))
	if err != nil || len(rows) < 5 {
		t.Errorf("%s's rows: %d, %v", suite.ReportDirEnv, len(rows), err)
	}
	if md, err := os.ReadFile(filepath.Join(reports, "locksuite-TestLocksuite.md")); err != nil || !strings.Contains(string(md), "| mylock | off |") {
		t.Errorf("%s's Markdown matrix: %v\n%s", suite.ReportDirEnv, err, md)
	}

	// The same example, against a Redis with an ACL user and password.
	rs, err := servers.StartRedis(ctx, servers.WithAuth())
	if err != nil {
		t.Skipf("no redis-server for the run with a password: %v", err)
	}
	defer rs.Stop()
	out = run([]string{"REDIS_URL=" + rs.URL()}, "baseline || deterministic-pause || contract", map[string]report.Verdict{
		"unfenced baseline":            report.Kept,
		"unfenced deterministic-pause": report.Broken,
		"unfenced contract":            report.Kept,
	})
	if p := rs.Secrets().Password; p == "" || strings.Contains(out, p) {
		t.Errorf("the Redis password is empty, or in the output")
	}
}

// readRows returns the rows the suite attached to Ginkgo's JSON report.
func readRows(t *testing.T, path string) []report.Row {
	t.Helper()
	b := readFile(t, path)
	var suites []struct {
		SpecReports []struct {
			ReportEntries []struct {
				Name  string
				Value struct{ AsJSON string }
			}
		}
	}
	if err := json.Unmarshal(b, &suites); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var rows []report.Row
	for _, s := range suites {
		for _, sp := range s.SpecReports {
			for _, e := range sp.ReportEntries {
				if e.Name != "locksuite" {
					continue
				}
				var r report.Row
				if err := json.Unmarshal([]byte(e.Value.AsJSON), &r); err != nil {
					t.Fatalf("report entry %q: %v", e.Value.AsJSON, err)
				}
				rows = append(rows, r)
			}
		}
	}
	if len(rows) == 0 {
		t.Fatalf("%s has no locksuite rows", path)
	}
	return rows
}

// TestKitRowFields: the row's fields that ci/README.md lists, and those
// docs/cli.md lists for --json, are report.Row's JSON fields, all of them.
func TestKitRowFields(t *testing.T) {
	var want []string
	rt := reflect.TypeFor[report.Row]()
	for i := range rt.NumField() {
		if name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			want = append(want, name)
		}
	}
	slices.Sort(want)
	for _, c := range []struct{ file, from, to string }{
		{"README.md", "Its fields (`report.Row`", "(`TestKitRowFields`"},
		{"../docs/cli.md", "writes the rows as a JSON array of objects with the fields", "`--markdown` writes"},
	} {
		b := readFile(t, c.file)
		s := string(b)
		i := strings.Index(s, c.from)
		j := strings.Index(s[max(i, 0):], c.to)
		if i < 0 || j < 0 {
			t.Errorf("%s: no list of the row's fields between %q and %q", c.file, c.from, c.to)
			continue
		}
		var got []string
		for _, m := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(s[i:i+j], -1) {
			if !slices.Contains(got, m[1]) && !slices.Contains([]string{"kept", "broken", "measured", "ok", "illegal", "unknown"}, m[1]) {
				got = append(got, m[1])
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s lists the row's fields %v; report.Row has %v", c.file, got, want)
		}
	}
}
