package report

import (
	"strings"
	"testing"
	"time"

	"github.com/locksuite/locksuite/harness/checker"
	"github.com/locksuite/locksuite/harness/history"
)

// TestLegendMatchesChecker keeps the matrix legend true against the
// checker: each way checker.Check gives Broken is drawn as the legend says
// (BROKEN n lost when writes were lost, BROKEN alone for the others, which
// the legend names), and sections that overlapped with nothing lost are
// kept, as the legend's silence on overlaps says.
func TestLegendMatchesChecker(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	sec := func(client, start, end int, read int64, o history.Outcome) history.Section {
		return history.Section{Client: client, Asked: ms(start), Start: ms(start), End: ms(end), Read: read, Wrote: read + 1, Outcome: o}
	}
	for _, tc := range []struct {
		name    string
		secs    []history.Section
		counter int64
		text    string // the cell the matrix draws
		legend  string // what the legend says of it
	}{
		{"updates lost", []history.Section{sec(1, 0, 10, 0, history.Accepted), sec(2, 5, 15, 0, history.Accepted)}, 1,
			"BROKEN 1 lost", "BROKEN n lost: n acknowledged writes lost"},
		{"writes no client made", []history.Section{sec(1, 0, 10, 0, history.Accepted)}, 3,
			"BROKEN", "BROKEN alone: none lost, but writes no client made appeared"},
		{"a rejected write retried", []history.Section{sec(1, 0, 10, 0, history.Rejected), sec(1, 5, 20, 0, history.Accepted)}, 1,
			"BROKEN", "or a rejected write was retried"},
		{"sections overlapped, nothing lost", []history.Section{sec(1, 0, 10, 0, history.Accepted), sec(2, 5, 15, 1, history.Accepted)}, 2,
			"kept", "kept: every acknowledged write counted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := checker.Check(tc.secs, tc.counter)
			row := Row{Backend: "b", Scenario: "s", Verdict: Verdict(res.Verdict.String()), Lost: res.Lost, Overlaps: res.Overlaps, Reason: res.Reason}
			c := NewMatrix([]Row{row}).Lines[0].Cells[0]
			if c.Text() != tc.text {
				t.Errorf("checker %s (%s): cell %q, want %q", res.Verdict, res.Reason, c.Text(), tc.text)
			}
			if !strings.Contains(legend, tc.legend) {
				t.Errorf("the legend does not say %q, which the checker's %s (%s) draws:\n%s", tc.legend, res.Verdict, res.Reason, legend)
			}
		})
	}
	if strings.Contains(strings.ToLower(legend), "overlap") {
		t.Errorf("the legend speaks of overlaps, which alone never break a run:\n%s", legend)
	}
}
