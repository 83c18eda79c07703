package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/suite"
)

const diffUsage = `Usage: locksuite diff [flags] OLD.json NEW.json

Compares two runs' rows (written by locksuite run --json) backend by backend,
fencing mode by fencing mode, scenario by scenario, and prints what changed:
kept → broken (a regression), broken → kept, lost updates, unknown results,
runs skipped now or before, rows new in NEW and rows vanished from OLD. With
--repeat runs, a cell's runs are counted (broken 3/10).

Exit status: 1 when something kept in OLD (every run) has a broken run in
NEW; 0 otherwise; 2 for bad usage or a file that cannot be read.

A library upgrade: run the same backends before and after, and compare.
  locksuite run --backends redsync --json before.json
  go get github.com/go-redsync/redsync/v4@latest && go install ./cmd/locksuite
  locksuite run --backends redsync --json after.json
  locksuite diff before.json after.json

A migration from one backend to another: the names differ, so say which
old backend the new one replaces, and the rows are compared by scenario and
fencing mode.
  locksuite run --backends redis --json redis.json
  locksuite run --backends etcd --json etcd.json
  locksuite diff --as redis=etcd redis.json etcd.json

For a pull-request comment: locksuite diff --markdown OLD.json NEW.json > diff.md

Flags:
`

// renames is --as: old backend name to new, repeatable or comma-separated.
type renames map[string]string

func (r renames) String() string {
	var out []string
	for k, v := range r {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

func (r renames) Set(v string) error {
	for _, p := range strings.Split(v, ",") {
		o, n, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok || o == "" || n == "" {
			return fmt.Errorf("%q: write OLDNAME=NEWNAME, e.g. redis=etcd", p)
		}
		r[o] = n
	}
	return nil
}

// diffKey is what rows are matched by: a backend (OLD's renamed by --as),
// fencing mode and scenario.
type diffKey struct {
	backend  string
	fencing  bool
	scenario string
}

// row is a Row of k's cell, to order keys as a report orders rows.
func (k diffKey) row() report.Row {
	return report.Row{Backend: k.backend, Fencing: k.fencing, Scenario: k.scenario}
}

// change is one key's comparison.
type change struct {
	key        diffKey
	oldName    string // OLD's backend name, when --as renamed it
	old, new   string // the cells' texts; "" when absent
	what       string
	regression bool
}

func diffCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("locksuite diff", flag.ContinueOnError)
	fs.SetOutput(stderr)
	as := renames{}
	fs.Var(as, "as", "`OLDNAME=NEWNAME`: compare OLD's backend OLDNAME with NEW's NEWNAME (a migration); repeatable or comma-separated: redis=etcd,postgres=consul (default: none, backends matched by name)")
	md := fs.Bool("markdown", false, "print Markdown, for a pull-request comment (default: an aligned text table)")
	all := fs.Bool("all", false, "list the unchanged rows too (default: the changes only)")
	fs.Usage = func() { fmt.Fprint(stderr, diffUsage); fs.PrintDefaults() }
	files, err := parseAll(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{err.Error()}
	}
	if len(files) != 2 {
		return &usageError{fmt.Sprintf("diff takes two files, OLD.json and NEW.json (from locksuite run --json), got %d arguments (see locksuite diff --help)", len(files))}
	}
	var sides [2][]report.Row
	for i, p := range files {
		f, err := os.Open(p)
		if err != nil {
			return &usageError{fmt.Sprintf("%v: give the file locksuite run --json wrote", err)}
		}
		sides[i], err = report.DecodeRows(f)
		f.Close()
		if err != nil {
			return &usageError{fmt.Sprintf("%s: %v: give the file locksuite run --json wrote", p, err)}
		}
	}
	for o := range as {
		if !hasBackend(sides[0], o) {
			return &usageError{fmt.Sprintf("--as %s=%s: OLD (%s) has no backend %q: it has %s", o, as[o], files[0], o, strings.Join(backendsOf(sides[0]), ","))}
		}
	}
	changes, unchanged := compareAll(sides[0], sides[1], as)
	if unchanged == 0 && len(sides[0]) > 0 && len(sides[1]) > 0 && onlyNewAndVanished(changes) {
		fmt.Fprintf(stderr, "locksuite: no row of OLD matches one of NEW: OLD has %s, NEW has %s; for a migration, name the pairs with --as OLDNAME=NEWNAME\n",
			strings.Join(backendsOf(sides[0]), ","), strings.Join(backendsOf(sides[1]), ","))
	}
	if !*all {
		changes = slices.DeleteFunc(changes, func(c change) bool { return c.what == "" })
	}
	if *md {
		writeDiffMarkdown(stdout, changes, unchanged, files[0], files[1])
	} else {
		writeDiffTable(stdout, changes, unchanged)
	}
	for _, c := range changes {
		if c.regression {
			return errFinding
		}
	}
	return nil
}

func hasBackend(rows []report.Row, b string) bool {
	for _, r := range rows {
		if r.Backend == b {
			return true
		}
	}
	return false
}

func backendsOf(rows []report.Row) []string {
	var out []string
	for _, r := range rows {
		if !slices.Contains(out, r.Backend) {
			out = append(out, r.Backend)
		}
	}
	return out
}

func onlyNewAndVanished(cs []change) bool {
	for _, c := range cs {
		if c.old != "" && c.new != "" {
			return false
		}
	}
	return true
}

// cellOf is the matrix cell of rows (one key's runs), without a note
// number (notes belong to a whole matrix).
func cellOf(rows []report.Row) report.Cell {
	if len(rows) == 0 {
		return report.Cell{}
	}
	c := report.NewMatrix(rows).Lines[0].Cells[0]
	c.Note = 0
	return c
}

// compareAll matches OLD's rows (renamed by as) with NEW's and returns
// every key, in backend, fencing, scenario order, with what changed ("":
// nothing), and how many did not change.
func compareAll(old, new []report.Row, as renames) ([]change, int) {
	group := func(rows []report.Row, rename bool) map[diffKey][]report.Row {
		m := map[diffKey][]report.Row{}
		for _, r := range rows {
			b := r.Backend
			if n, ok := as[b]; ok && rename {
				b = n
			}
			k := diffKey{b, r.Fencing, r.Scenario}
			m[k] = append(m[k], r)
		}
		return m
	}
	om, nm := group(old, true), group(new, false)
	var keys []diffKey
	for k := range om {
		keys = append(keys, k)
	}
	for k := range nm {
		if _, ok := om[k]; !ok {
			keys = append(keys, k)
		}
	}
	order := suite.Order()
	sort.Slice(keys, func(i, j int) bool { return report.Compare(keys[i].row(), keys[j].row(), order) < 0 })
	var out []change
	unchanged := 0
	for _, k := range keys {
		oc, nc := cellOf(om[k]), cellOf(nm[k])
		c := change{key: k, old: oc.Text(), new: nc.Text()}
		if rs := om[k]; len(rs) > 0 && rs[0].Backend != k.backend {
			c.oldName = rs[0].Backend
		}
		oclass, nclass := oc.Class(), nc.Class()
		switch {
		case len(om[k]) == 0:
			c.what = "new"
		case len(nm[k]) == 0:
			c.what = "vanished"
		case oclass == string(report.Kept) && oc.Broken == 0 && oc.Unknown == 0 && nc.Broken > 0:
			c.what, c.regression = "REGRESSION: kept → broken", true
			if nc.Lost > 0 {
				c.what += fmt.Sprintf(", %d lost", nc.Lost)
			}
		case oclass != nclass && nclass == string(report.Skipped):
			c.what = "now skipped: " + lastReason(nm[k])
		case oclass != nclass && oclass == string(report.Skipped):
			c.what = "ran (skipped before)"
		case oclass != nclass && nclass == string(report.Unknown):
			c.what = oclass + " → unknown: " + lastReason(nm[k])
		case oclass != nclass:
			c.what = oclass + " → " + nclass
		case oc.Lost != nc.Lost:
			c.what = fmt.Sprintf("lost updates %d → %d", oc.Lost, nc.Lost)
		case c.old != c.new:
			c.what = "changed"
		default:
			unchanged++
		}
		out = append(out, c)
	}
	return out, unchanged
}

func lastReason(rows []report.Row) string {
	for i := len(rows) - 1; i >= 0; i-- {
		if rows[i].Reason != "" {
			return rows[i].Reason
		}
	}
	return ""
}

func (c change) backend() string {
	if c.oldName != "" {
		return c.oldName + " → " + c.key.backend
	}
	return c.key.backend
}

func orDash(s string) string {
	if s == "" {
		return "·"
	}
	return s
}

func diffSummary(cs []change, unchanged int) string {
	n := map[string]int{}
	changed := 0
	for _, c := range cs {
		switch {
		case c.regression:
			n["kept → broken"]++
		case c.what == "new" || c.what == "vanished":
			n[c.what]++
		case c.what != "":
			n["other changes"]++
		}
		if c.what != "" {
			changed++
		}
	}
	parts := []string{fmt.Sprintf("%d unchanged", unchanged)}
	for _, k := range []string{"kept → broken", "other changes", "new", "vanished"} {
		if n[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n[k], k))
		}
	}
	return strings.Join(parts, ", ")
}

func writeDiffTable(w io.Writer, cs []change, unchanged int) {
	if len(cs) == 0 {
		fmt.Fprintf(w, "no change: %d rows compared, every verdict and lost count the same\n", unchanged)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BACKEND\tFENCING\tSCENARIO\tOLD\tNEW\tCHANGE")
	for _, c := range cs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.backend(), onOff(c.key.fencing), c.key.scenario, orDash(c.old), orDash(c.new), orDash(c.what))
	}
	tw.Flush()
	fmt.Fprintln(w, "\n"+diffSummary(cs, unchanged))
}

func writeDiffMarkdown(w io.Writer, cs []change, unchanged int, oldPath, newPath string) {
	fmt.Fprintf(w, "**locksuite diff** `%s` → `%s`: %s\n\n", oldPath, newPath, diffSummary(cs, unchanged))
	if len(cs) == 0 {
		return
	}
	esc := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	fmt.Fprintln(w, "| backend | fencing | scenario | old | new | change |\n|---|---|---|---|---|---|")
	for _, c := range cs {
		what := esc(orDash(c.what))
		if c.regression {
			what = "**" + what + "**"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", c.backend(), onOff(c.key.fencing), c.key.scenario, esc(orDash(c.old)), esc(orDash(c.new)), what)
	}
}
