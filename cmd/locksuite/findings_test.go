package main

import (
	"slices"
	"testing"

	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/suite"
)

// TestFindings: a run whose verdict is not its spec's expectation, or that
// stayed unknown, is a finding; the runs of one spec with the same verdict
// (--repeat) are one line that counts them and gives the first reason.
func TestFindings(t *testing.T) {
	row := func(backend string, fenced bool, sc string, v, want report.Verdict, reason string) report.Row {
		return report.Row{Backend: backend, Fencing: fenced, Scenario: sc, Verdict: v, Expected: want, Reason: reason}
	}
	var rows []report.Row
	for i := range 3 {
		rows = append(rows, row("redis-sentinel", true, suite.Failover, report.Broken, report.Kept, string(rune('a'+i))))
	}
	rows = append(rows,
		row("redis-sentinel", true, suite.Failover, report.Kept, report.Kept, ""),
		row("redis-sentinel", false, suite.Failover, report.Broken, report.Broken, ""),
		row("etcd", false, suite.DeterministicPause, report.Unknown, report.Broken, "timed out"),
		row("etcd", true, suite.DeterministicPause, report.Skipped, report.Kept, ""),
		row("etcd", true, suite.ServerStall, report.Broken, report.Measured, ""),
	)
	// The machine's doing: counted apart, no finding.
	stall := row("redis", false, suite.ChaosNone, report.Unknown, report.Kept, "the machine stalled worker 1 ...")
	stall.MachineStall = stall.Reason
	rows = append(rows, stall)
	want := []string{
		"redis-sentinel fencing=true failover: broken in 3 of 4 runs, expected kept (the first: a)",
		"etcd fencing=false deterministic-pause: unknown (timed out)",
	}
	if got := findings(rows); !slices.Equal(got, want) {
		t.Errorf("findings:\n%q\nwant\n%q", got, want)
	}
	if n := stalled(rows); n != 1 {
		t.Errorf("stalled: %d rows, want 1", n)
	}
}
