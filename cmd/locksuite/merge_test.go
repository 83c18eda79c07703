package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/suite"
)

// TestShardsMerge: a run split with --shard 1/2 and --shard 2/2 runs each
// spec in exactly one shard, and locksuite merge of the two gives the
// unsharded run's verdicts, matrix and exit status (on the embedded etcd,
// with the deterministic scenarios, fenced and not).
func TestShardsMerge(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the suite")
	}
	tmp := t.TempDir()
	args := []string{"run", "--backends", "etcd", "--scenarios", "baseline,control,deterministic-pause,release-after-expiry,contract", "--duration", "500ms"}
	js := func(name string) string { return filepath.Join(tmp, name) }
	code, wholeOut, errs := runCLI(t, tmp, append(args, "--json", js("whole.json"))...)
	if code != 0 {
		t.Fatalf("whole run: exit %d\n%s\n%s", code, wholeOut, errs)
	}
	for i := 1; i <= 2; i++ {
		code, out, errs := runCLI(t, tmp, append(args, "--shard", fmt.Sprintf("%d/2", i), "--json", js(fmt.Sprintf("s%d.json", i)))...)
		if code != 0 {
			t.Fatalf("shard %d/2: exit %d\n%s\n%s", i, code, out, errs)
		}
	}
	// Merged by name, then by their directory, merge's --json in it (its
	// flag after the files, as most people type it): the second merge must
	// not read the first's --json as a shard.
	var out, errb bytes.Buffer
	if code := cli([]string{"merge", "--json", js("merged.json"), js("s1.json"), js("s2.json")}, &out, &errb); code != 0 {
		t.Fatalf("merge: exit %d, want 0 as the whole run's\n%s\n%s", code, out.String(), errb.String())
	}
	shards := filepath.Join(tmp, "shards")
	os.Mkdir(shards, 0o755)
	for _, f := range []string{"s1.json", "s2.json", "merged.json"} {
		if err := os.Rename(js(f), filepath.Join(shards, f)); err != nil {
			t.Fatal(err)
		}
	}
	byDir := filepath.Join(shards, "merged.json")
	if code := cli([]string{"merge", shards, "--json", byDir}, new(bytes.Buffer), &errb); code != 0 {
		t.Fatalf("merge %s: exit %d, want 0 as the whole run's\n%s", shards, code, errb.String())
	}
	for _, f := range []string{"s1.json", "s2.json"} {
		os.Rename(filepath.Join(shards, f), js(f))
	}
	os.Rename(byDir, js("merged.json"))
	cell := func(r report.Row) string { return fmt.Sprintf("%s/%v/%s", r.Backend, r.Fencing, r.Scenario) }
	verdicts := func(rows []report.Row) map[string]report.Verdict {
		m := map[string]report.Verdict{}
		for _, r := range rows {
			m[cell(r)] = r.Verdict
		}
		return m
	}
	whole, s1, s2 := readRowsFile(t, js("whole.json")), readRowsFile(t, js("s1.json")), readRowsFile(t, js("s2.json"))
	if len(s1) == 0 || len(s2) == 0 || len(s1)+len(s2) != len(whole) {
		t.Errorf("shards of %d and %d rows, the whole run %d: each spec must run in exactly one shard", len(s1), len(s2), len(whole))
	}
	in1 := verdicts(s1)
	for _, r := range s2 {
		if _, dup := in1[cell(r)]; dup {
			t.Errorf("%s ran in both shards", cell(r))
		}
	}
	got, want := verdicts(readRowsFile(t, js("merged.json"))), verdicts(whole)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: merged %q, whole run %q", k, got[k], v)
		}
	}
	// The matrix: the same cells, up to the numbers of lost updates.
	shape := func(m string) string {
		f := strings.Fields(m[:strings.Index(m, "\n\n")])
		for i, w := range f {
			if _, err := fmt.Sscan(w, new(int)); err == nil {
				f[i] = "n"
			}
		}
		return strings.Join(f, " ")
	}
	if a, b := shape(out.String()), shape(wholeOut); a != b {
		t.Errorf("merged matrix:\n%s\nwhole run's:\n%s", out.String(), wholeOut)
	}
}

// TestMergeRefuses: merge's exit status is the whole run's (1 for a
// finding) and it refuses a missing shard, a shard given twice, shards of
// two splits, a file that is not rows, and no file, with status 2 and the
// fix.
func TestMergeRefuses(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, rows ...report.Row) string {
		p := filepath.Join(dir, name)
		var b bytes.Buffer
		if err := report.EncodeRows(&b, rows); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	row := func(shard, scenario string, v, want report.Verdict) report.Row {
		return report.Row{Backend: "etcd", Scenario: scenario, Verdict: v, Expected: want, Shard: shard}
	}
	a := write("a.json", row("1/2", suite.Baseline, report.Kept, report.Kept))
	b := write("b.json", row("2/2", suite.DeterministicPause, report.Kept, report.Broken)) // a finding
	c := write("c.json", row("1/3", suite.Baseline, report.Kept, report.Kept))
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte("not json"), 0o644)
	empty, pair := t.TempDir(), t.TempDir()
	for _, p := range []string{a, b} {
		if err := os.Link(p, filepath.Join(pair, filepath.Base(p))); err != nil {
			t.Fatal(err)
		}
	}
	os.Mkdir(filepath.Join(pair, "sub.json"), 0o755) // a directory: not a shard
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{a, b}, 1, "finding: etcd fencing=false deterministic-pause: kept, expected broken"},
		{[]string{a}, 2, "shard 2/2 missing"},
		{[]string{a, a, b}, 2, "are both shard 1/2"},
		{[]string{a, c}, 2, "give the shards of one split"},
		{[]string{a, bad}, 2, bad},
		{nil, 2, "no file"},
		{[]string{empty}, 2, "a directory without .json files"},
		{[]string{pair}, 1, "finding: etcd fencing=false deterministic-pause"}, // a.json and b.json
	} {
		var out, errb bytes.Buffer
		code := cli(append([]string{"merge"}, tc.args...), &out, &errb)
		if code != tc.code || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("merge %v: exit %d, stderr %q; want exit %d and %q", tc.args, code, errb.String(), tc.code, tc.want)
		}
	}
}

// TestShardFromJob: --shard job/N takes the shard from an Indexed Job's
// JOB_COMPLETION_INDEX (0 to N-1), and names the variable when it is
// missing or out of range.
func TestShardFromJob(t *testing.T) {
	for _, tc := range []struct {
		flag, env string
		want      string // the shard, or a part of the error
	}{
		{"job/4", "0", "1/4"},
		{"job/4", "3", "4/4"},
		{"2/4", "", "2/4"},
		{"job/4", "", "JOB_COMPLETION_INDEX is not set"},
		{"job/4", "4", "the Job's index must be below N"},
		{"job/4", "x", `JOB_COMPLETION_INDEX="x" is not an index`},
		{"job/x", "0", "write INDEX/TOTAL"},
	} {
		sh, err := parseShard(tc.flag, func(string) string { return tc.env })
		got := sh.String()
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, tc.want) || (err != nil) == (tc.want == "1/4" || tc.want == "4/4" || tc.want == "2/4") {
			t.Errorf("--shard %s, %s=%q: %q, want %q", tc.flag, jobIndexEnv, tc.env, got, tc.want)
		}
	}
}

// TestShardsWorkflowFlags: the locksuite command lines of
// ci/github/locksuite-shards.yml, each shard of its matrix substituted,
// are ones the CLI accepts (ci's TestShardsWorkflow checks the rest).
func TestShardsWorkflowFlags(t *testing.T) {
	b, err := os.ReadFile("../../ci/github/locksuite-shards.yml")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	m := regexp.MustCompile(`shard: \[([0-9, ]+)\]`).FindStringSubmatch(s)
	if m == nil {
		t.Fatal("ci/github/locksuite-shards.yml: no matrix shard: [...]")
	}
	var runs, merges int
	for _, cmd := range regexp.MustCompile(`go run \./cmd/locksuite ((?:.*\n)*?)\n`).FindAllStringSubmatch(s, -1) {
		for _, i := range strings.Split(m[1], ",") {
			args := strings.Fields(strings.ReplaceAll(cmd[1], "${{ matrix.shard }}", strings.TrimSpace(i)))
			switch args[0] {
			case "run":
				runs++
				o, err := parseRun(args[1:], io.Discard)
				if err != nil {
					t.Errorf("locksuite %s: %v", strings.Join(args, " "), err)
				} else if fmt.Sprint(o.shard.Index) != strings.TrimSpace(i) {
					t.Errorf("locksuite %s: shard %s", strings.Join(args, " "), o.shard)
				}
			case "merge":
				merges++
				// No shard files here: the flags parse, and the error is about
				// the directory, not a flag.
				var errb bytes.Buffer
				code := cli(append(args[:len(args)-1], filepath.Join(t.TempDir(), "shards")), io.Discard, &errb)
				if code != 2 || !strings.Contains(errb.String(), "no such file") {
					t.Errorf("locksuite %s (no shards): exit %d, %s", strings.Join(args, " "), code, errb.String())
				}
			}
		}
	}
	if runs == 0 || merges == 0 {
		t.Errorf("%d run and %d merge command lines found, want both", runs, merges)
	}
}

// TestParseAll: the flags are read before the files and after them, and
// after "--" every argument is a file.
func TestParseAll(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		files string
		json  string
	}{
		{[]string{"--json", "m.json", "a.json", "b.json"}, "a.json b.json", "m.json"},
		{[]string{"a.json", "b.json", "--json", "m.json"}, "a.json b.json", "m.json"},
		{[]string{"a.json", "--json", "m.json", "b.json"}, "a.json b.json", "m.json"},
		{[]string{"a.json", "--", "--json", "b.json"}, "a.json --json b.json", ""},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		js := fs.String("json", "", "")
		files, err := parseAll(fs, tc.args)
		if err != nil || strings.Join(files, " ") != tc.files || *js != tc.json {
			t.Errorf("parseAll(%q) = %q, --json %q, %v; want %q, --json %q", tc.args, files, *js, err, tc.files, tc.json)
		}
	}
}
