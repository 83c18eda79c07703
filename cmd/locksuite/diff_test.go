package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/locksuite/locksuite/harness/report"
)

// TestDiff: locksuite diff on two sets of rows: what it prints and its
// exit status, table-driven.
func TestDiff(t *testing.T) {
	row := func(b string, fenced bool, sc string, v string, lost int64) report.Row {
		r := report.Row{Backend: b, Fencing: fenced, Scenario: sc, Lost: lost}
		switch v {
		case "kept":
			r.Verdict = report.Kept
		case "broken":
			r.Verdict = report.Broken
		case "unknown":
			r.Verdict, r.Reason = report.Unknown, "checkers disagree"
		default:
			r.Verdict, r.Reason = report.Skipped, "not here"
		}
		return r
	}
	base := []report.Row{
		row("redis", false, "baseline", "kept", 0), row("redis", false, "pause", "broken", 4),
		row("redis", true, "baseline", "kept", 0), row("redis", true, "pause", "kept", 0),
	}
	with := func(i int, r report.Row) []report.Row {
		out := append([]report.Row(nil), base...)
		out[i] = r
		return out
	}
	renamed := func(b string) []report.Row {
		var out []report.Row
		for _, r := range base {
			r.Backend = b
			out = append(out, r)
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		old, new []report.Row
		args     []string
		code     int
		want     []string
		wantNot  []string
	}{
		{"identical", base, base, nil, 0, []string{"no change: 4 rows compared"}, nil},
		{"kept now broken", base, with(3, row("redis", true, "pause", "broken", 2)), nil, 1,
			[]string{"redis    on       pause     kept  BROKEN 2 lost  REGRESSION: kept → broken, 2 lost", "3 unchanged, 1 kept → broken"}, nil},
		{"broken now kept", base, with(1, row("redis", false, "pause", "kept", 0)), nil, 0, []string{"BROKEN 4 lost  kept", "broken → kept"}, nil},
		{"more lost", base, with(1, row("redis", false, "pause", "broken", 9)), nil, 0, []string{"lost updates 4 → 9"}, nil},
		{"now skipped", base, with(2, row("redis", true, "baseline", "skipped", 0)), nil, 0, []string{"now skipped: not here"}, nil},
		{"now unknown", base, with(2, row("redis", true, "baseline", "unknown", 0)), nil, 0, []string{"kept → unknown: checkers disagree"}, nil},
		{"new and vanished", base[:3], append(append([]report.Row(nil), base[1:]...), row("redis", true, "chaos", "kept", 0)), nil, 0,
			[]string{"baseline  kept  ·", "vanished", "chaos     ·     kept", "new"}, nil},
		{"repeated runs", append(base, base[3]), append(base, row("redis", true, "pause", "broken", 1)), nil, 1,
			[]string{"kept 2/2  broken 1/2", "REGRESSION"}, nil},
		{"migration without --as", base, renamed("etcd"), nil, 0, []string{"4 new, 4 vanished"}, nil},
		{"migration", base, renamed("etcd"), []string{"--as", "redis=etcd"}, 0, []string{"no change: 4 rows compared"}, nil},
		{"migration, a regression", base, with(3, row("redis", true, "pause", "broken", 2)), []string{"--as", "redis=redis"}, 1, []string{"REGRESSION"}, nil},
		{"markdown", base, with(3, row("redis", true, "pause", "broken", 2)), []string{"--markdown"}, 1,
			[]string{"| backend | fencing | scenario | old | new | change |", "| redis | on | pause | kept | BROKEN 2 lost | **REGRESSION: kept → broken, 2 lost** |"}, []string{"redis on"}},
		{"--all lists the unchanged", base, base, []string{"--all"}, 0, []string{"redis    off      baseline  kept  kept  ·"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			paths := []string{filepath.Join(dir, "old.json"), filepath.Join(dir, "new.json")}
			for i, rows := range [][]report.Row{tc.old, tc.new} {
				f, err := os.Create(paths[i])
				if err != nil {
					t.Fatal(err)
				}
				report.EncodeRows(f, rows)
				f.Close()
			}
			var out, errb bytes.Buffer
			code := cli(append(append([]string{"diff"}, tc.args...), paths...), &out, &errb)
			if code != tc.code {
				t.Errorf("exit %d, want %d\n%s%s", code, tc.code, out.String(), errb.String())
			}
			// Compared with runs of spaces as one: the columns' widths vary.
			text := strings.Join(strings.Fields(out.String()+errb.String()), " ")
			for _, w := range tc.want {
				if !strings.Contains(text, strings.Join(strings.Fields(w), " ")) {
					t.Errorf("lacks %q:\n%s%s", w, out.String(), errb.String())
				}
			}
			for _, w := range tc.wantNot {
				if strings.Contains(text, strings.Join(strings.Fields(w), " ")) {
					t.Errorf("has %q:\n%s", w, out.String())
				}
			}
		})
	}
}

// TestDiffBadInput: exit 2 and a message naming the problem and the fix.
func TestDiffBadInput(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "r.json")
	os.WriteFile(good, []byte(`[{"backend":"etcd","scenario":"baseline","verdict":"kept"}]`), 0o644)
	notRows := filepath.Join(dir, "x.json")
	os.WriteFile(notRows, []byte(`{"hello":1}`), 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"diff", good}, "diff takes two files, OLD.json and NEW.json"},
		{[]string{"diff", good, filepath.Join(dir, "missing.json")}, "no such file or directory: give the file locksuite run --json wrote"},
		{[]string{"diff", good, notRows}, "not the rows of locksuite run --json"},
		{[]string{"diff", "--as", "redis", good, good}, `"redis": write OLDNAME=NEWNAME`},
		{[]string{"diff", "--as", "redis=etcd", good, good}, `--as redis=etcd: OLD (` + good + `) has no backend "redis": it has etcd`},
	} {
		t.Run(strings.Join(tc.args[1:], " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := cli(tc.args, &out, &errb); code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if !strings.Contains(errb.String(), tc.want) {
				t.Errorf("stderr %q lacks %q", errb.String(), tc.want)
			}
		})
	}
}
