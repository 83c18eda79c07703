package report

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// TestDecodeRows: what EncodeRows writes reads back; JSON Lines read too;
// anything else is an error that says so.
func TestDecodeRows(t *testing.T) {
	rows := []Row{{Backend: "etcd", Scenario: "baseline", Verdict: Kept}, {Backend: "etcd", Fencing: true, Scenario: "pause", Verdict: Broken, Lost: 3}}
	var enc bytes.Buffer
	if err := EncodeRows(&enc, rows); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, in string
		n        int
		err      string
	}{
		{"array", enc.String(), 2, ""},
		{"empty array: a run that finished nothing", "[]\n", 0, ""},
		{"JSON Lines", `{"backend":"etcd","scenario":"a","verdict":"kept"}` + "\n" + `{"backend":"etcd","scenario":"b","verdict":"broken","lost":2}` + "\n", 2, ""},
		{"a field of a newer version", `[{"backend":"etcd","scenario":"a","verdict":"kept","new_field":1}]`, 1, ""},
		{"empty file", "", 0, "empty"},
		{"not rows", `{"name":"x"}`, 0, "not the rows of locksuite run --json"},
		{"cut JSON", `[{"backend":"etcd",`, 0, "unexpected EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeRows(strings.NewReader(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || len(got) != tc.n {
				t.Fatalf("%d rows, %v; want %d", len(got), err, tc.n)
			}
		})
	}
	got, _ := DecodeRows(&enc)
	if got[1].Lost != 3 || got[1].Verdict != Broken || !got[1].Fencing {
		t.Errorf("round trip: %+v", got[1])
	}
}

// TestSortOrder: rows sort by backend, fencing off first, then scenario in
// the order given, the scenarios it does not name after those, by name.
func TestSortOrder(t *testing.T) {
	var rows []Row
	for _, b := range []string{"redis", "etcd"} {
		for _, f := range []bool{true, false} {
			for _, s := range []string{"zeta", "pause", "alpha", "baseline"} {
				rows = append(rows, Row{Backend: b, Fencing: f, Scenario: s})
			}
		}
	}
	Sort(rows, "baseline", "pause")
	var got []string
	for _, r := range rows[:5] {
		got = append(got, fmt.Sprintf("%s/%v/%s", r.Backend, r.Fencing, r.Scenario))
	}
	want := "etcd/false/baseline etcd/false/pause etcd/false/alpha etcd/false/zeta etcd/true/baseline"
	if strings.Join(got, " ") != want {
		t.Errorf("sorted %v, want %s", got, want)
	}
	if rows[8].Backend != "redis" {
		t.Errorf("row 8 is %+v, want redis's first", rows[8])
	}
}

// TestWriteTiming: the medians per scenario, skipped rows and rows without
// a wall time left out, nothing written when none is left.
func TestWriteTiming(t *testing.T) {
	rows := []Row{
		{Scenario: "baseline", Verdict: Kept, SetupMS: 10, PlannedMS: 2000, DurationMS: 2001, WallMS: 2100},
		{Scenario: "baseline", Verdict: Kept, SetupMS: 30, PlannedMS: 2000, DurationMS: 2003, WallMS: 2300},
		{Scenario: "baseline", Verdict: Broken, SetupMS: 20, PlannedMS: 2000, DurationMS: 2002, WallMS: 2200},
		{Scenario: "chaos-none", Verdict: Skipped, WallMS: 0},
		{Scenario: "contract", Verdict: Kept, WallMS: 0}, // an older row
	}
	var b strings.Builder
	if err := WriteTiming(&b, rows); err != nil {
		t.Fatal(err)
	}
	want := "| baseline | 3 | 20ms | 2s | 2s | 2.2s | 200ms |\n"
	if !strings.HasSuffix(b.String(), want) || strings.Contains(b.String(), "chaos-none") || strings.Contains(b.String(), "contract") {
		t.Errorf("got:\n%s\nwant a last line %q", b.String(), want)
	}
	b.Reset()
	if err := WriteTiming(&b, rows[3:]); err != nil || b.Len() != 0 {
		t.Errorf("no timed row: wrote %q, %v", b.String(), err)
	}
}
