package report_test

import (
	"fmt"
	"strings"

	"github.com/locksuite/locksuite/harness/report"
)

// Reading a run's rows: locksuite run --json FILE writes them (as does
// EncodeRows), and DecodeRows reads that file, or JSON Lines. A row is a
// finding when its spec expected a verdict (kept or broken) and the run
// gave another.
func ExampleDecodeRows() {
	rows, err := report.DecodeRows(strings.NewReader(`[
  {"backend": "redis", "fencing": false, "scenario": "deterministic-pause", "writes": 2, "counter": 1, "lost": 1,
   "verdict": "broken", "expected": "broken"},
  {"backend": "redis", "fencing": true, "scenario": "deterministic-pause", "writes": 2, "counter": 1, "rejected": 1,
   "verdict": "kept", "expected": "kept"},
  {"backend": "my-lock", "fencing": true, "scenario": "stall-in-section", "writes": 110, "counter": 109, "lost": 1,
   "verdict": "broken", "expected": "kept"}
]`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range rows {
		finding := ""
		if r.Finding() {
			finding = " (a finding)"
		}
		fmt.Printf("%s fenced=%v %s: %s, %d lost, %d rejected%s\n", r.Backend, r.Fencing, r.Scenario, r.Verdict, r.Lost, r.Rejected, finding)
	}
	// Output:
	// redis fenced=false deterministic-pause: broken, 1 lost, 0 rejected
	// redis fenced=true deterministic-pause: kept, 0 lost, 1 rejected
	// my-lock fenced=true stall-in-section: broken, 1 lost, 0 rejected (a finding)
}
