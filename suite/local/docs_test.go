package local

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/locksuite/locksuite/harness/services/kube"
)

// TestDocsNameTheTable: the hand-written lists agree with the table. This
// package's doc names every service's variable; the docs of Names,
// Libraries, Clusters, WhenNamed, Variants and Poolers name each of their
// backends; docs/servers.md's table of variables ("Your own servers")
// names every service's variable and no variable the suite does not read;
// docs/your-lock.md's list of services names every service; backends'
// package doc names every backend package.
func TestDocsNameTheTable(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "local.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	pkgDoc := f.Doc.Text()
	for _, s := range allServices() {
		if !strings.Contains(pkgDoc, s.Vars[0]) {
			t.Errorf("the package doc (local.go) does not name %s, the variable of %s", s.Vars[0], s.Name)
		}
	}
	lists := map[string][]string{"Names": Names, "Libraries": Libraries, "Clusters": Clusters, "WhenNamed": WhenNamed, "Variants": Variants, "Poolers": Poolers}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.VAR {
			continue
		}
		for _, sp := range g.Specs {
			name := sp.(*ast.ValueSpec).Names[0].Name
			members, ok := lists[name]
			if !ok {
				continue
			}
			delete(lists, name)
			for _, m := range members {
				if !hasWord(g.Doc.Text(), m) {
					t.Errorf("the doc of %s does not name %s", name, m)
				}
			}
		}
	}
	for name := range lists {
		t.Errorf("no doc comment found for %s in local.go", name)
	}

	serversMD, err := os.ReadFile("../../docs/servers.md")
	if err != nil {
		t.Fatal(err)
	}
	vars := section(t, "docs/servers.md", string(serversMD), "## Your own servers", "\nEverything the suite makes")
	known := map[string]bool{"LOCKSUITE_CONSUL": true, StoreEnv: true} // binaries the harness starts; the store's server
	for _, c := range kube.Components {
		known[kube.BinaryEnv(c)] = true
	}
	for _, s := range allServices() {
		if !strings.Contains(vars, "`"+s.Vars[0]+"`") {
			t.Errorf("docs/servers.md's table of variables does not name %s, the variable of %s", s.Vars[0], s.Name)
		}
		for _, v := range slices.Concat(s.Vars, s.Shared) {
			known[v] = true
		}
	}
	for _, row := range strings.Split(vars, "\n") {
		if !strings.HasPrefix(row, "| ") {
			continue
		}
		first := strings.Split(row, " | ")[0] // the variables' column
		for _, m := range regexp.MustCompile("`([A-Z][A-Z0-9_]+)`").FindAllStringSubmatch(first, -1) {
			if !known[m[1]] {
				t.Errorf("docs/servers.md's table of variables names %s, which the suite does not read", m[1])
			}
		}
	}
	yourLock, err := os.ReadFile("../../docs/your-lock.md")
	if err != nil {
		t.Fatal(err)
	}
	svcs := section(t, "docs/your-lock.md", string(yourLock), "The services are ", "\n\n")
	for _, s := range allServices() {
		if !strings.Contains(svcs, "`"+s.Name+"`") {
			t.Errorf("docs/your-lock.md's list of services (%q) does not name %s", svcs, s.Name)
		}
	}

	f, err = parser.ParseFile(fset, "../../backends/locker.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	dirs, err := os.ReadDir("../../backends")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if d.IsDir() && d.Name() != "internal" && !hasWord(f.Doc.Text(), d.Name()) {
			t.Errorf("backends' package doc (backends/locker.go) does not name the package %s", d.Name())
		}
	}
}

// hasWord reports whether text contains w between non-word characters
// ("-" is a word character: redsync is not in redsync-3).
func hasWord(text, w string) bool {
	return regexp.MustCompile(`(^|[^\w-])` + regexp.QuoteMeta(w) + `($|[^\w-])`).MatchString(text)
}

// section is the text of s, the file named file, from the first start up
// to the next end.
func section(t *testing.T, file, s, start, end string) string {
	t.Helper()
	i := strings.Index(s, start)
	if i < 0 {
		t.Fatalf("%s: no %q", file, start)
	}
	s = s[i:]
	if j := strings.Index(s[len(start):], end); j >= 0 {
		s = s[:len(start)+j]
	}
	return s
}
