package checker

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/locksuite/locksuite/harness/history"
)

func sec(client int, start, end int, o history.Outcome) history.Section {
	return history.Section{Client: client, Start: time.Duration(start) * time.Millisecond, End: time.Duration(end) * time.Millisecond, Outcome: o}
}

func TestCheck(t *testing.T) {
	A, R, F := history.Accepted, history.Rejected, history.Failed
	for _, tc := range []struct {
		name     string
		secs     []history.Section
		counter  int64
		verdict  Verdict
		lost     int64
		overlaps int
		reason   string
	}{
		{"empty run", nil, 0, Kept, 0, 0, ""},
		{"serial writes", []history.Section{sec(0, 0, 10, A), sec(1, 10, 20, A), sec(0, 20, 30, A)}, 3, Kept, 0, 0, ""},
		{"the pause-testing guide's paused holder, unfenced", []history.Section{sec(0, 0, 300, A), sec(1, 200, 220, A)}, 1, Broken, 1, 2, "2 writes reported, counter is 1"},
		{"the pause-testing guide's paused holder, fenced", []history.Section{sec(0, 0, 300, R), sec(1, 200, 220, A)}, 1, Kept, 0, 0, ""},
		{"overlap without loss is diagnosed, not a violation", []history.Section{sec(0, 0, 10, A), sec(1, 5, 15, A)}, 2, Kept, 0, 2, ""},
		{"counter above writes", []history.Section{sec(0, 0, 10, A)}, 2, Broken, -1, 0, "appeared"},
		{"a rejected holder that writes again without a new read", []history.Section{
			{Client: 0, Asked: 0, Start: 0, End: 300 * time.Millisecond, Read: 0, Wrote: 1, Outcome: R},
			{Client: 1, Asked: 200 * time.Millisecond, Start: 200 * time.Millisecond, End: 220 * time.Millisecond, Read: 0, Wrote: 1, Outcome: A},
			{Client: 0, Asked: 250 * time.Millisecond, Start: 310 * time.Millisecond, End: 320 * time.Millisecond, Read: 1, Wrote: 1, Outcome: A},
		}, 2, Broken, 0, 0, "retried a rejected write"},
		{"ambiguous write applied", []history.Section{sec(0, 0, 10, A), sec(1, 10, 20, F)}, 2, Kept, -1, 0, ""},
		{"ambiguous write not applied", []history.Section{sec(0, 0, 10, A), sec(1, 10, 20, F)}, 1, Kept, 0, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Check(tc.secs, tc.counter)
			if r.Verdict != tc.verdict || r.Lost != tc.lost || r.Overlaps != tc.overlaps || !strings.Contains(r.Reason, tc.reason) {
				t.Errorf("got %+v; want verdict %v lost %d overlaps %d reason containing %q", r, tc.verdict, tc.lost, tc.overlaps, tc.reason)
			}
		})
	}
}

// TestOverlapsMatchesBruteForce compares the sweep with the obvious O(n²)
// count on random histories.
func TestOverlapsMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		n := rng.IntN(8)
		var secs []history.Section
		for range n {
			s := rng.IntN(50)
			secs = append(secs, sec(0, s, s+1+rng.IntN(15), history.Accepted))
		}
		want := 0
		for i := range secs {
			for j := range secs {
				if i != j && secs[i].Start < secs[j].End && secs[j].Start < secs[i].End {
					want++
					break
				}
			}
		}
		if got := overlaps(secs); got != want {
			t.Fatalf("overlaps(%v) = %d, brute force %d", secs, got, want)
		}
		pairs := 0
		for i := range secs {
			for j := i + 1; j < len(secs); j++ {
				if secs[i].Start < secs[j].End && secs[j].Start < secs[i].End {
					pairs++
				}
			}
		}
		ps := Overlaps(secs)
		if len(ps) != pairs {
			t.Fatalf("Overlaps(%v) has %d pairs, brute force %d", secs, len(ps), pairs)
		}
		for _, p := range ps {
			a, b := secs[p.A], secs[p.B]
			if p.Start != max(a.Start, b.Start) || p.End != min(a.End, b.End) || p.Start >= p.End {
				t.Fatalf("pair %+v of %v, %v: wrong intersection", p, a, b)
			}
		}
	}
}
