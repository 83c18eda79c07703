package run

import (
	"testing"
	"time"
)

// TestToldNote: a holder's reason says when its lease reported itself lost
// against B's grant, or that it had not.
func TestToldNote(t *testing.T) {
	b := time.Now()
	for _, tc := range []struct {
		told, granted time.Time
		want          string
	}{
		{time.Time{}, time.Time{}, "A had not been told its lease was lost"},
		{time.Time{}, b, "A had not been told its lease was lost by the end of B's turn"},
		{b, time.Time{}, "A's lease had reported itself lost"},
		{b.Add(-98 * time.Millisecond), b, "A was told its lease was lost 98ms before B got the lock"},
		{b.Add(1500 * time.Millisecond), b, "A was told its lease was lost 1.5s after B got the lock"},
	} {
		if got := toldNote(tc.told, tc.granted); got != tc.want {
			t.Errorf("toldNote(%v, %v) = %q, want %q", tc.told, tc.granted, got, tc.want)
		}
	}
}
