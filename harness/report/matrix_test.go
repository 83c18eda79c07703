package report

import (
	"bytes"
	"strings"
	"testing"
)

// TestMatrixCells: each cell's text from its runs, table-driven.
func TestMatrixCells(t *testing.T) {
	k := Row{Backend: "etcd", Scenario: "s", Verdict: Kept, Expected: Kept}
	b := Row{Backend: "etcd", Scenario: "s", Verdict: Broken, Lost: 4, Expected: Broken}
	u := Row{Backend: "etcd", Scenario: "s", Verdict: Unknown, Reason: "checkers disagree"}
	sk := Row{Backend: "etcd", Scenario: "s", Verdict: Skipped, Reason: "no sigstop here"}
	bad := b
	bad.Expected = Kept
	b0 := b
	b0.Lost = 0
	measured := b
	measured.Expected = Measured
	stuck := k
	stuck.Stuck = 3
	stalled := u
	stalled.MachineStall = "the machine stalled worker 1"
	for _, tc := range []struct {
		name  string
		rows  []Row
		text  string
		class string
	}{
		{"kept", []Row{k}, "kept", "kept"},
		{"broken", []Row{b}, "BROKEN 4 lost", "broken"},
		{"broken by overlaps alone", []Row{b0}, "BROKEN", "broken"},
		{"broken, expected kept", []Row{bad}, "BROKEN 4 lost !", "broken"},
		{"broken, measured", []Row{measured}, "BROKEN 4 lost", "broken"},
		{"unknown", []Row{u}, "unknown [1] !", "unknown"},
		{"unknown, the machine stalled", []Row{stalled}, "unknown [1]", "unknown"},
		{"skipped", []Row{sk}, "– [1]", "skipped"},
		{"repeated, all broken", []Row{b, b, b}, "broken 3/3", "broken"},
		{"repeated, mixed", []Row{k, b, u, k}, "broken 1/4, unknown 1/4 [1] !", "broken"},
		{"repeated, kept", []Row{k, k}, "kept 2/2", "kept"},
		{"kept, stuck", []Row{stuck}, "kept, stuck", "kept"},
		{"repeated, kept, some stuck", []Row{k, stuck, stuck}, "kept 3/3, stuck 2/3", "kept"},
		{"repeated, skipped", []Row{sk, sk}, "– [1]", "skipped"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMatrix(tc.rows)
			if len(m.Lines) != 1 || len(m.Scenarios) != 1 {
				t.Fatalf("want one cell, got %d lines × %v", len(m.Lines), m.Scenarios)
			}
			c := m.Lines[0].Cells[0]
			if c.Text() != tc.text || c.Class() != tc.class {
				t.Errorf("cell %q (%s), want %q (%s)", c.Text(), c.Class(), tc.text, tc.class)
			}
		})
	}
}

// TestWriteMatrix: lines backend × fencing, columns scenarios, a reason
// printed once however many cells share it, the same cells in Markdown.
func TestWriteMatrix(t *testing.T) {
	long := "consul: not installed | run ci/setup.sh <now>"
	rows := []Row{
		{Backend: "consul", Fencing: false, Scenario: "baseline", Verdict: Skipped, Reason: long},
		{Backend: "consul", Fencing: false, Scenario: "pause", Verdict: Skipped, Reason: long},
		{Backend: "etcd", Fencing: false, Scenario: "baseline", Verdict: Kept},
		{Backend: "etcd", Fencing: false, Scenario: "pause", Verdict: Broken, Lost: 4},
		{Backend: "etcd", Fencing: true, Scenario: "baseline", Verdict: Kept},
		{Backend: "etcd", Fencing: true, Scenario: "pause", Verdict: Kept},
	}
	for _, tc := range []struct {
		name  string
		write func(*bytes.Buffer, []Row) error
		want  []string
	}{
		{"text", func(b *bytes.Buffer, r []Row) error { return WriteMatrix(b, r) }, []string{
			"BACKEND  FENCING  baseline  pause",
			"consul   off      – [1]     – [1]",
			"etcd     off      kept      BROKEN 4 lost",
			"etcd     on       kept      kept",
			"[1] " + long,
		}},
		{"markdown", func(b *bytes.Buffer, r []Row) error { return WriteMatrixMarkdown(b, r) }, []string{
			"| backend | fencing | baseline | pause |\n|---|---|---|---|",
			"| consul | off | – [1] | – [1] |",
			"| etcd | off | kept | **BROKEN 4 lost** |",
			"| etcd | on | kept | kept |",
			"- [1] consul: not installed \\| run ci/setup.sh &lt;now>",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tc.write(&b, rows); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("lacks %q:\n%s", w, out)
				}
			}
			if n := strings.Count(out, "not installed"); n != 1 {
				t.Errorf("the reason is printed %d times, want once:\n%s", n, out)
			}
		})
	}
}
