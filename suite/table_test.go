package suite

import (
	"slices"
	"testing"
)

// TestEveryRowNamesWhatStrikes: every row of the table names its fault or
// its fault schedule, never both, except the rows with no fault by
// definition; and every row has a load.
func TestEveryRowNamesWhatStrikes(t *testing.T) {
	faultless := []string{Baseline, Control, ChaosNone, MixedLease, ReleaseRace}
	for _, sc := range table {
		if sc.load == nil {
			t.Errorf("%s: no load", sc.Name)
		}
		switch strikes := sc.fault != nil || sc.schedule != nil; {
		case sc.fault != nil && sc.schedule != nil:
			t.Errorf("%s: both a fault and a schedule: name one", sc.Name)
		case slices.Contains(faultless, sc.Name) && strikes:
			t.Errorf("%s: a fault or a schedule in a row with no fault by definition", sc.Name)
		case !slices.Contains(faultless, sc.Name) && !strikes:
			t.Errorf("%s: names no fault and no schedule", sc.Name)
		}
	}
}
