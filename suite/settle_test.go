package suite

import (
	"strings"
	"testing"

	"github.com/locksuite/locksuite/harness/report"
)

// TestSettleMachineStall: a loss the machine's stalls explain makes an
// unfenced run that expected the invariant kept unknown, saying why; a
// fenced run, and one whose loss was expected, stay broken.
func TestSettleMachineStall(t *testing.T) {
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
		r, skip := settle(Config{Name: "redis", Fenced: tc.fenced}, "chaos-none", tc.want, row, nil, false)
		if skip || r.Verdict != tc.got {
			t.Errorf("%s: verdict %s (skip %v), want %s", tc.name, r.Verdict, skip, tc.got)
		}
		if r.Verdict == report.Unknown && !strings.HasPrefix(r.Reason, why) {
			t.Errorf("%s: reason %q, want it to start with the stall", tc.name, r.Reason)
		}
	}
}
