package ci

import (
	"bytes"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/locksuite/locksuite/harness/report"
)

var update = flag.Bool("update", false, "rewrite the generated parts of the documentation (the README's matrix) from docs/data")

// docFiles lists the documentation's Markdown files, relative to the
// repository root: README.md, ci/README.md and every .md file under docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "ci/README.md"}
	err := filepath.WalkDir(filepath.Join("..", "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel("..", p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

var (
	fence      = regexp.MustCompile("^\\s*```")
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
	mdLink     = regexp.MustCompile(`\[([^\]]*)\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	atxHeading = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	scheme     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// prose returns the lines of a Markdown file outside fenced code blocks,
// with HTML comments (<!-- ... -->, over one line or several) blanked,
// and their 1-based numbers. A link or anchor in a comment is not shown,
// so it is neither followed nor defined.
func prose(md string) (lines []string, numbers []int) {
	in, comment := false, false
	for i, l := range strings.Split(md, "\n") {
		if !comment && fence.MatchString(l) {
			in = !in
			continue
		}
		if in {
			continue
		}
		var b strings.Builder
		for l != "" {
			if comment {
				end := strings.Index(l, "-->")
				if end < 0 {
					l = ""
					break
				}
				l, comment = l[end+3:], false
				continue
			}
			start := strings.Index(l, "<!--")
			if start < 0 {
				b.WriteString(l)
				break
			}
			b.WriteString(l[:start])
			l, comment = l[start+4:], true
		}
		lines = append(lines, b.String())
		numbers = append(numbers, i+1)
	}
	return lines, numbers
}

// anchors returns the fragment names a Markdown file defines: its headings
// as GitHub slugs them (lower case, punctuation dropped, spaces as hyphens,
// "-1", "-2" after a repeated one), and its <a id> and <a name> tags.
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	lines, _ := prose(md)
	for _, l := range lines {
		for _, m := range htmlAnchor.FindAllStringSubmatch(l, -1) {
			out[m[1]] = true
		}
		m := atxHeading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		s := slug(m[2])
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// slug is GitHub's anchor of a heading's text: links read as their text,
// code as its content, then lower case, every character but letters,
// digits, spaces, hyphens and underscores dropped, spaces as hyphens.
func slug(heading string) string {
	heading = mdLink.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestLinks: every relative link of the documentation (README.md,
// ci/README.md, docs/) names a file or directory of the repository, and
// every #fragment an anchor of its page (a heading or an <a id>); every
// page under docs/ is reached from README.md by following links. Links
// with a scheme (https:, mailto:) are not followed.
func TestLinks(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	files := docFiles(t)
	text := map[string]string{}
	for _, f := range files {
		b := readFile(t, filepath.Join(root, f))
		text[f] = string(b)
	}
	// pageOf is the Markdown file a link's path shows: the file, or a
	// directory's README.md.
	pageOf := func(p string) string {
		if fi, err := os.Stat(filepath.Join(root, p)); err == nil && fi.IsDir() {
			return filepath.ToSlash(filepath.Join(p, "README.md"))
		}
		return p
	}
	links := map[string][]string{} // page -> the pages it links to
	n := 0
	for _, f := range files {
		lines, numbers := prose(text[f])
		for i, l := range lines {
			for _, m := range mdLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(l, ""), -1) {
				target := m[2]
				if scheme.MatchString(target) {
					continue
				}
				n++
				where := fmt.Sprintf("%s:%d", f, numbers[i])
				path, frag, _ := strings.Cut(target, "#")
				page := f
				if path != "" {
					p := filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(f), path)))
					if p == ".." || strings.HasPrefix(p, "../") {
						t.Errorf("%s: link %q leaves the repository", where, target)
						continue
					}
					if _, err := os.Stat(filepath.Join(root, p)); err != nil {
						t.Errorf("%s: link %q: %s does not exist", where, target, p)
						continue
					}
					page = pageOf(p)
				}
				links[f] = append(links[f], page)
				if frag == "" {
					continue
				}
				md, ok := text[page]
				if !ok {
					b, err := os.ReadFile(filepath.Join(root, page))
					if err != nil || !strings.HasSuffix(page, ".md") {
						t.Errorf("%s: link %q: #%s in %s, which is not a Markdown page", where, target, frag, page)
						continue
					}
					md = string(b)
				}
				if !anchors(md)[frag] {
					t.Errorf("%s: link %q: %s has no anchor #%s", where, target, page, frag)
				}
			}
		}
	}
	reached := map[string]bool{"README.md": true}
	for queue := []string{"README.md"}; len(queue) > 0; queue = queue[1:] {
		for _, p := range links[queue[0]] {
			if !reached[p] {
				reached[p] = true
				queue = append(queue, p)
			}
		}
	}
	for _, f := range files {
		if strings.HasPrefix(f, "docs/") && !reached[f] {
			t.Errorf("%s: no chain of links reaches it from README.md: give it a row in docs/README.md's index", f)
		}
	}
	t.Logf("%d relative links in %d pages", n, len(files))
}

// matrixMark opens a generated matrix in a Markdown page:
// <!-- matrix of FILE: SCENARIO,SCENARIO,... --> (FILE relative to the
// repository root, a locksuite run --json file), closed by matrixEnd.
var matrixMark = regexp.MustCompile(`<!-- matrix of (\S+): (\S+) -->\n`)

const matrixEnd = "<!-- end of the matrix -->"

// docsMatrix is the matrix of the rows of the --json file at path (under
// root) for the given scenarios, as report.WriteMatrixMarkdown draws it.
func docsMatrix(root, path string, scenarios []string) (string, error) {
	f, err := os.Open(filepath.Join(root, path))
	if err != nil {
		return "", err
	}
	defer f.Close()
	rows, err := report.DecodeRows(f)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	var kept []report.Row
	for _, r := range rows {
		if slices.Contains(scenarios, r.Scenario) {
			kept = append(kept, r)
		}
	}
	for _, s := range scenarios {
		if !slices.ContainsFunc(kept, func(r report.Row) bool { return r.Scenario == s }) {
			return "", fmt.Errorf("%s has no row of the scenario %q", path, s)
		}
	}
	var b bytes.Buffer
	if err := report.WriteMatrixMarkdown(&b, kept); err != nil {
		return "", err
	}
	return b.String(), nil
}

// TestDocsMatrix: each matrix the README shows between
// <!-- matrix of FILE: SCENARIOS --> and <!-- end of the matrix --> is the
// one report.WriteMatrixMarkdown draws from FILE's rows of those scenarios,
// so that a matrix typed by hand, or left behind by a new run's data, fails.
// With -update it rewrites them instead (after a new run: see
// docs/data/README.md).
func TestDocsMatrix(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	readme := filepath.Join(root, "README.md")
	b := readFile(t, readme)
	s := string(b)
	marks := matrixMark.FindAllStringSubmatchIndex(s, -1)
	if len(marks) == 0 {
		t.Fatal("README.md shows no generated matrix (<!-- matrix of FILE: SCENARIOS -->)")
	}
	var out strings.Builder
	last := 0
	for _, m := range marks {
		path, scenarios := s[m[2]:m[3]], strings.Split(s[m[4]:m[5]], ",")
		end := strings.Index(s[m[1]:], matrixEnd)
		if end < 0 {
			t.Fatalf("README.md: the matrix of %s has no %q after it", path, matrixEnd)
		}
		want, err := docsMatrix(root, path, scenarios)
		if err != nil {
			t.Fatalf("README.md: %v", err)
		}
		if got := s[m[1] : m[1]+end]; got != want+"\n" && !*update {
			t.Errorf("README.md: the matrix of %s is not the one its rows give: run go test ./ci/ -run TestDocsMatrix -update\nREADME.md has:\n%s\nthe rows give:\n%s", path, got, want)
		}
		out.WriteString(s[last:m[1]] + want + "\n")
		last = m[1] + end
	}
	out.WriteString(s[last:])
	if *update && out.String() != s {
		if err := os.WriteFile(readme, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("README.md: %d matrices rewritten", len(marks))
	}
}

// TestCIRunsTheREADMEsCommand: .ci/run runs the test command that the
// README's "Two commands for a fresh machine" shows, as written there, so
// that the command a newcomer copies is the one CI passes.
func TestCIRunsTheREADMEsCommand(t *testing.T) {
	var text [2]string
	for i, f := range []string{"../README.md", "../.ci/run"} {
		b := readFile(t, f)
		text[i] = string(b)
	}
	readme, run := text[0], text[1]
	var cmd string
	for _, l := range strings.Split(readme, "\n") {
		if strings.HasPrefix(l, "ci/setup.sh && go test ") {
			cmd = l
		}
	}
	if cmd == "" {
		t.Fatal(`README.md shows no test command (a line "ci/setup.sh && go test ..." in a code block)`)
	}
	if !slices.Contains(strings.Split(run, "\n"), cmd) {
		t.Errorf(".ci/run does not run the README's test command %q: make them the same", cmd)
	}
}
