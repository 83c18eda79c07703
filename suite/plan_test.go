package suite

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/locksuite/locksuite/harness/report"
)

// TestPlanShards: the shards of a plan hold each of its runs once, and
// together all of them; a line given twice is planned once; an unknown
// scenario is an error naming it; Skipped gives one row per run.
func TestPlanShards(t *testing.T) {
	lines := []Line{{"etcd", false}, {"etcd", true}, {"redis", false}, {"etcd", false}}
	o := Options{Scenarios: []string{Baseline, Control, "deterministic-pause"}, Repeat: 3}
	whole, err := o.Plan(lines...)
	if err != nil {
		t.Fatal(err)
	}
	if len(whole) != 3*3*3 {
		t.Fatalf("whole plan: %d runs, want 27 (3 lines × 3 scenarios × 3 runs)", len(whole))
	}
	var union Plan
	for i := 1; i <= 4; i++ {
		o.Shard = Shard{Index: i, Total: 4}
		p, err := o.Plan(lines...)
		if err != nil {
			t.Fatal(err)
		}
		union = append(union, p...)
	}
	key := func(r Planned) string { return fmt.Sprintf("%+v", r) }
	got, want := make([]string, len(union)), make([]string, len(whole))
	for i := range union {
		got[i] = key(union[i])
	}
	for i := range whole {
		want[i] = key(whole[i])
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the four shards hold %d runs, not each of the whole plan's %d once:\n%v\n%v", len(got), len(want), got, want)
	}
	if _, err := (Options{Scenarios: []string{"no-such"}}).Plan(lines...); err == nil || !strings.Contains(err.Error(), `"no-such"`) {
		t.Errorf("unknown scenario: %v, want an error naming it", err)
	}
	rows := whole.Of("etcd", true).Skipped("down")
	if len(rows) != 9 || rows[0].Verdict != report.Skipped || rows[0].Reason != "down" || !rows[0].Fencing {
		t.Errorf("skipped rows of etcd fenced: %+v", rows)
	}
}
