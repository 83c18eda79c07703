package suite

import (
	"context"
	"strings"
	"testing"

	"github.com/locksuite/locksuite/harness/report"
)

// TestJudgedMachineStall: a loss the machine's stalls explain makes an
// unfenced run that expected the invariant kept unknown, saying why; a
// fenced run, and one whose loss was expected, stay broken.
func TestJudgedMachineStall(t *testing.T) {
	why := "the machine held worker 1 up for 491ms with no fault injected, past its 200ms lease"
	for _, tc := range []struct {
		name   string
		fenced bool
		want   Expectation
		stall  string
		got    report.Verdict
	}{
		{"unfenced, expected kept", false, Keeps, why, report.Unknown},
		{"unfenced, no stall to blame", false, Keeps, "", report.Broken},
		{"fenced", true, Keeps, why, report.Broken},
		{"an expected loss", false, Loses, why, report.Broken},
		{"measured", false, Measures, why, report.Broken},
	} {
		row := report.Row{Verdict: report.Broken, Lost: 2, Reason: "99 writes reported, counter is 97: 2 lost", MachineStall: tc.stall}
		r := judged(Config{Name: "redis", Fenced: tc.fenced}, tc.want, row)
		if r.Verdict != tc.got {
			t.Errorf("%s: verdict %s, want %s", tc.name, r.Verdict, tc.got)
		}
		if r.Verdict == report.Unknown && !strings.HasPrefix(r.Reason, why) {
			t.Errorf("%s: reason %q, want it to start with the stall", tc.name, r.Reason)
		}
	}
}

// TestSettleInterrupted: a run whose context ended before it returned is
// unknown and says it was interrupted, whether it returned an error or a
// row without a verdict (its final read cancelled); a skip stays a skip.
func TestSettleInterrupted(t *testing.T) {
	c := Config{Name: "etcd", Fenced: true}
	for _, tc := range []struct {
		name string
		row  report.Row
		err  error
		want report.Verdict
	}{
		{"an error", report.Row{}, context.Canceled, report.Unknown},
		{"a row without a verdict", report.Row{Verdict: report.Unknown, Reason: "reading the final counter: context canceled"}, nil, report.Unknown},
		{"a verdict it reached as the interrupt came", report.Row{Verdict: report.Kept}, nil, report.Unknown},
		{"a skip", report.Row{Verdict: report.Skipped, Reason: "not offered"}, nil, report.Skipped},
	} {
		r, _ := settle(c, "baseline", Keeps, tc.row, tc.err, true)
		if r.Verdict != tc.want {
			t.Errorf("%s: verdict %s, want %s", tc.name, r.Verdict, tc.want)
		}
		if tc.want == report.Unknown && !strings.Contains(r.Reason, "interrupted") {
			t.Errorf("%s: reason %q does not say the run was interrupted", tc.name, r.Reason)
		}
	}
}

// TestJudgedUnsafe: a broken row of a lock unsafe by design says why.
func TestJudgedUnsafe(t *testing.T) {
	c := Config{Name: "postgres-pgbouncer", Unsafe: "the lock belongs to the server session"}
	r := judged(c, Measures, report.Row{Verdict: report.Broken, Reason: "9 lost"})
	if want := "9 lost; unsafe by design: the lock belongs to the server session"; r.Reason != want {
		t.Errorf("reason %q, want %q", r.Reason, want)
	}
	if r := judged(c, Measures, report.Row{Verdict: report.Kept}); r.Reason != "" {
		t.Errorf("a kept row's reason %q, want none", r.Reason)
	}
}
