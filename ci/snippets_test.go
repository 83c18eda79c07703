package ci

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/servers"
)

// A Go snippet of the documentation: a fenced ```go block, and what it
// is, from the HTML comment on the line before it (invisible once
// rendered):
//
//   - no comment, and the block starts with "package": a whole file, built
//     (go vet) in a consumer module outside the repository, whose replace
//     points at this repository, as a lock library's would; a file with a
//     Test function is a _test.go file.
//   - <!-- snippet: in DIR -->: declarations added to the package in DIR of
//     this repository (go build -overlay: nothing is written there); its
//     imports are added from the package names it uses (snippetImports).
//   - <!-- snippet: in DIR, element of T -->: an element of a composite
//     literal of type T (a row of the suite's table), in DIR's package.
//   - <!-- snippet: excerpt of PATH -->: lines of a file of this repository
//     that a test compiles (ci/example's): every line of the block but
//     "// ..." must be in PATH, in order (spaces aside).
type snippet struct {
	where string // FILE:LINE, FILE relative to the repository root
	mark  string // the comment's text after "snippet:", "" without
	code  string
}

var snippetMark = regexp.MustCompile(`^\s*<!--\s*snippet:\s*(.*?)\s*-->\s*$`)

// snippets returns the ```go blocks of the Markdown file path (relative to
// the repository root).
func snippets(t *testing.T, path string) []snippet {
	t.Helper()
	b := readFile(t, filepath.Join("..", path))
	lines := strings.Split(string(b), "\n")
	var out []snippet
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "```") {
			continue
		}
		lang := strings.Fields(strings.TrimPrefix(l, "```") + " ")
		indent := lines[i][:strings.Index(lines[i], "```")]
		start := i
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			body = append(body, strings.TrimPrefix(lines[i], indent))
		}
		if len(lang) == 0 || lang[0] != "go" {
			continue
		}
		s := snippet{where: fmt.Sprintf("%s:%d", path, start+1), code: strings.Join(body, "\n") + "\n"}
		if start > 0 {
			if m := snippetMark.FindStringSubmatch(lines[start-1]); m != nil {
				s.mark = m[1]
			}
		}
		out = append(out, s)
	}
	return out
}

// snippetImports maps the package names a fragment may use to their paths.
var snippetImports = map[string]string{
	"context":  "context",
	"errors":   "errors",
	"fmt":      "fmt",
	"net":      "net",
	"time":     "time",
	"backends": "github.com/locksuite/locksuite/backends",
	"fencing":  "github.com/locksuite/locksuite/fencing",
	"faults":   "github.com/locksuite/locksuite/harness/faults",
	"report":   "github.com/locksuite/locksuite/harness/report",
	"run":      "github.com/locksuite/locksuite/harness/run",
	"suite":    "github.com/locksuite/locksuite/suite",
	"local":    "github.com/locksuite/locksuite/suite/local",
}

var selector = regexp.MustCompile(`(?:^|[^.\w])([a-z]\w*)\.[A-Z]`)

// fragmentFile is the Go file of a fragment in the package at dir (its
// last element is the package name).
func fragmentFile(dir string, s snippet, elementOf string) string {
	code := lineDirective(s) + s.code
	pkg := filepath.Base(dir)
	var imports []string
	for _, m := range selector.FindAllStringSubmatch(s.code, -1) {
		if p, ok := snippetImports[m[1]]; ok && m[1] != pkg && !slices.Contains(imports, p) {
			imports = append(imports, p)
		}
	}
	slices.Sort(imports)
	var b strings.Builder
	fmt.Fprintf(&b, "package %s\n\n", pkg)
	for _, p := range imports {
		fmt.Fprintf(&b, "import %q\n", p)
	}
	if elementOf != "" {
		fmt.Fprintf(&b, "\nvar _ = %s{\n%s}\n", elementOf, code)
	} else {
		b.WriteString("\n" + code)
	}
	return b.String()
}

// TestSnippets builds every Go snippet of the documentation (README.md,
// ci/README.md and the pages under docs/: docFiles), as its mark says (see
// snippet), runs the whole files that have a Test function, and fails on a
// ```go block that is neither a whole file nor marked.
func TestSnippets(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	var all []snippet
	for _, f := range docFiles(t) {
		all = append(all, snippets(t, f)...)
	}
	if len(all) == 0 {
		t.Fatal("no ```go blocks found")
	}
	overlay := map[string]string{}
	var pkgs []string
	var files []snippet
	ovDir := t.TempDir()
	for i, s := range all {
		switch {
		case s.mark == "" && strings.HasPrefix(strings.TrimSpace(s.code), "package "):
			files = append(files, s)
		case strings.HasPrefix(s.mark, "excerpt of "):
			checkExcerpt(t, s, filepath.Join(root, strings.TrimPrefix(s.mark, "excerpt of ")))
		case strings.HasPrefix(s.mark, "in "):
			dir, elem, _ := strings.Cut(strings.TrimPrefix(s.mark, "in "), ", element of ")
			if fi, err := os.Stat(filepath.Join(root, dir)); err != nil || !fi.IsDir() {
				t.Errorf("%s: marked in %q, which is not a package directory of this repository", s.where, dir)
				continue
			}
			src := filepath.Join(ovDir, fmt.Sprintf("snippet%d.go", i))
			if err := os.WriteFile(src, []byte(fragmentFile(dir, s, elem)), 0o644); err != nil {
				t.Fatal(err)
			}
			overlay[filepath.Join(root, dir, fmt.Sprintf("zz_doc_snippet%d.go", i))] = src
			if p := "./" + dir; !slices.Contains(pkgs, p) {
				pkgs = append(pkgs, p)
			}
		default:
			t.Errorf("%s: a ```go block that is neither a whole file (package …) nor marked <!-- snippet: in DIR | in DIR, element of T | excerpt of PATH --> on the line before it (mark %q)", s.where, s.mark)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env := append(cleanEnv(), "GOWORK=off")
	if len(overlay) > 0 {
		b, _ := json.Marshal(map[string]any{"Replace": overlay})
		ov := filepath.Join(ovDir, "overlay.json")
		if err := os.WriteFile(ov, b, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-overlay", ov}, pkgs...)...)
		cmd.Dir, cmd.Env = root, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("the fragments marked <!-- snippet: in … --> do not build in their packages: %v\n%s", err, out)
		}
		t.Logf("built %d fragments in %s", len(overlay), strings.Join(pkgs, " "))
	}
	if len(files) > 0 {
		dir := consumerModule(t, root)
		for i, s := range files {
			name := "snippet.go"
			if testFunc.MatchString(s.code) {
				name = "snippet_test.go"
			}
			d := filepath.Join(dir, fmt.Sprintf("s%d", i))
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(d, name), []byte(lineDirective(s)+s.code), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: a whole file, s%d/%s", s.where, i, name)
		}
		cmd := exec.CommandContext(ctx, "go", "vet", "./...")
		cmd.Dir, cmd.Env = dir, append(env, "GOFLAGS=-mod=mod")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("the whole-file snippets do not build in a consumer module (%s): %v\n%s", dir, err, out)
		}
		for i, s := range files {
			if m := testFunc.FindStringSubmatch(s.code); m != nil {
				t.Run(fmt.Sprintf("run %s %s", s.where, m[1]), func(t *testing.T) {
					runSnippet(t, filepath.Join(dir, fmt.Sprintf("s%d", i)), m[1], env)
				})
			}
		}
	}
}

var testFunc = regexp.MustCompile(`(?m)^func (Test\w*)\(t \*testing\.T\)`)

// runSnippet runs the test function fn of a whole-file snippet in dir
// against a Redis and a Postgres started for it (REDIS_URL, DATABASE_URL),
// on the core scenarios and the contract, and checks the verdicts of a lock
// with no fencing token whose Config asks for ExpectLoss.
func runSnippet(t *testing.T, dir, fn string, env []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rs, err := servers.StartRedis(ctx)
	if err != nil {
		t.Skipf("no redis-server to run the snippet against: %v", err)
	}
	defer rs.Stop()
	pg, err := servers.StartPostgres(ctx)
	if err != nil {
		t.Skipf("no PostgreSQL to run the snippet against: %v", err)
	}
	defer pg.Stop()
	jsonReport := filepath.Join(t.TempDir(), "report.json")
	t0 := time.Now()
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-run", "^"+fn+"$", ".", "-args",
		"-ginkgo.label-filter=baseline || control || deterministic-pause || release-after-expiry || contract", "-ginkgo.json-report="+jsonReport)
	cmd.Dir, cmd.Env = dir, append(env, "GOFLAGS=-mod=mod", "REDIS_URL="+rs.URL(), "DATABASE_URL="+pg.URL())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go test -run %s in %s: %v\n%s", fn, dir, err, out)
	}
	t.Logf("%s: go test took %v (build and run)", fn, time.Since(t0).Round(time.Millisecond))
	got := map[string]report.Verdict{}
	for _, r := range readRows(t, jsonReport) {
		got[fmt.Sprintf("fenced=%v %s", r.Fencing, r.Scenario)] = r.Verdict
		t.Logf("fenced=%v %s: %s %s", r.Fencing, r.Scenario, r.Verdict, r.Reason)
	}
	for k, want := range map[string]report.Verdict{
		"fenced=false baseline":             report.Kept,
		"fenced=false control":              report.Broken,
		"fenced=false deterministic-pause":  report.Broken,
		"fenced=false release-after-expiry": report.Kept,
	} {
		if got[k] != want {
			t.Errorf("%s: verdict %q, want %q", k, got[k], want)
		}
	}
}

// lineDirective makes the compiler's messages name the documentation's
// lines.
func lineDirective(s snippet) string {
	file, line, _ := strings.Cut(s.where, ":")
	n, _ := strconv.Atoi(line)
	return fmt.Sprintf("//line %s:%d\n", file, n+1)
}

// cleanEnv is the environment without a worker's variables or GOFLAGS.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LOCKSUITE_WORKER") && !strings.HasPrefix(kv, "GOFLAGS=") {
			env = append(env, kv)
		}
	}
	return env
}

// consumerModule makes a module outside the repository that requires
// locksuite, replaced by root, with locksuite's own requirements (so that
// it builds from the module cache), and returns its directory.
func consumerModule(t *testing.T, root string) string {
	t.Helper()
	dir := t.TempDir()
	mod := readFile(t, filepath.Join(root, "go.mod"))
	s := strings.Replace(string(mod), "module github.com/locksuite/locksuite", "module example.com/snippets", 1)
	s += "\nrequire github.com/locksuite/locksuite v0.0.0\n\nreplace github.com/locksuite/locksuite => " + root + "\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := readFile(t, filepath.Join(root, "go.sum"))
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// checkExcerpt checks that every line of s but "// ..." is a line of path,
// in order, leading and trailing spaces aside.
func checkExcerpt(t *testing.T, s snippet, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("%s: an excerpt of %s: %v", s.where, path, err)
		return
	}
	src := strings.Split(string(b), "\n")
	j := 0
	for _, l := range strings.Split(s.code, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || l == "// ..." {
			continue
		}
		for j < len(src) && strings.TrimSpace(src[j]) != l {
			j++
		}
		if j == len(src) {
			t.Errorf("%s: the excerpt's line %q is not in %s (after the lines before it)", s.where, l, path)
			return
		}
		j++
	}
}
