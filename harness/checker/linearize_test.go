package checker

import (
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/locksuite/locksuite/harness/history"
)

// rmw is a section that read r and wrote r+1 (or w, when given).
func rmw(client, start, end int, r int64, o history.Outcome) history.Section {
	s := sec(client, start, end, o)
	s.Read, s.Wrote = r, r+1
	return s
}

// TestLinearizable: handmade histories with a known answer.
func TestLinearizable(t *testing.T) {
	A, R, F := history.Accepted, history.Rejected, history.Failed
	for _, tc := range []struct {
		name    string
		secs    []history.Section
		counter int64
		want    Linearity
	}{
		{"empty run", nil, 0, LinOK},
		{"empty run, counter moved", nil, 1, LinIllegal},
		{"serial increments", []history.Section{rmw(0, 0, 10, 0, A), rmw(1, 10, 20, 1, A), rmw(0, 20, 30, 2, A)}, 3, LinOK},
		{"lost update: the stalled holder's write overwrote the next one's", []history.Section{rmw(0, 0, 300, 0, A), rmw(1, 200, 220, 0, A)}, 1, LinIllegal},
		{"the stalled holder's write rejected by the fence", []history.Section{rmw(0, 0, 300, 0, R), rmw(1, 200, 220, 0, A)}, 1, LinOK},
		{"overlapping sections that saw each other", []history.Section{rmw(0, 0, 10, 0, A), rmw(1, 5, 15, 1, A)}, 2, LinOK},
		{"a read older than a write that had completed", []history.Section{rmw(0, 0, 10, 0, A), rmw(1, 20, 30, 0, A)}, 1, LinIllegal},
		{"final counter below the increments", []history.Section{rmw(0, 0, 10, 0, A), rmw(1, 10, 20, 1, A)}, 1, LinIllegal},
		{"ambiguous write applied", []history.Section{rmw(0, 0, 10, 0, A), rmw(1, 10, 20, 1, F)}, 2, LinOK},
		{"ambiguous write not applied", []history.Section{rmw(0, 0, 10, 0, A), rmw(1, 10, 20, 1, F)}, 1, LinOK},
		{"ambiguous write applied late, after a later section", []history.Section{rmw(1, 0, 10, 0, F), rmw(0, 20, 30, 0, A)}, 1, LinOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Linearizable(tc.secs, tc.counter, 0); got != tc.want {
				t.Errorf("Linearizable = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestJudgeReportsDisagreement: a recording the two checkers read
// differently makes the verdict unknown, saying so.
func TestJudgeReportsDisagreement(t *testing.T) {
	A := history.Accepted
	// The counts add up (3 writes, counter 3) but the third section read a
	// value two writes old: the counter check alone would say kept.
	inconsistent := []history.Section{rmw(0, 0, 10, 0, A), rmw(1, 20, 30, 1, A), rmw(2, 40, 50, 0, A)}
	// One section wrote 2 after reading 0: the counter check sees a write
	// from nowhere, the register model a valid history.
	jump := rmw(0, 0, 10, 0, A)
	jump.Wrote = 2
	for _, tc := range []struct {
		name    string
		secs    []history.Section
		counter int64
		lin     Linearity
		reason  string
	}{
		{"counter kept, history illegal", inconsistent, 3, LinIllegal, "checkers disagree: the counter check says kept"},
		{"counter broken, history linearizable", []history.Section{jump}, 2, LinOK, "checkers disagree: the counter check says broken"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Judge(tc.secs, tc.counter, time.Second)
			if r.Verdict != Unknown || r.Linearizable != tc.lin || !strings.HasPrefix(r.Reason, tc.reason) {
				t.Errorf("got %+v; want unknown, linearizable %s, reason starting %q", r, tc.lin, tc.reason)
			}
		})
	}
	r := Judge([]history.Section{rmw(0, 0, 300, 0, A), rmw(1, 200, 220, 0, A)}, 1, time.Second)
	if r.Verdict != Broken || r.Linearizable != LinIllegal {
		t.Errorf("lost update: got %+v, want broken and illegal", r)
	}
}

// simulate runs clients against a real register: each section reads at a
// random moment after its start and writes read+1 later; with exclusive,
// sections never overlap (a working lock), otherwise they overlap at random
// (a broken one). Some writes are rejected (not applied), as by a fence.
func simulate(rng *rand.Rand, clients, perClient int, exclusive bool) ([]history.Section, int64) {
	type step struct {
		t     int
		sec   int
		write bool
	}
	var secs []history.Section
	var steps []step
	t := 0
	for c := range clients {
		at := rng.IntN(20)
		for range perClient {
			start := at
			if exclusive {
				start = t
			}
			r := start + rng.IntN(5)
			w := r + 1 + rng.IntN(10)
			end := w + rng.IntN(3)
			o := history.Accepted
			if rng.IntN(10) == 0 {
				o = history.Rejected
			}
			secs = append(secs, history.Section{Client: c, Asked: time.Duration(start), Start: time.Duration(start), End: time.Duration(end), Outcome: o})
			steps = append(steps, step{r, len(secs) - 1, false}, step{w, len(secs) - 1, true})
			at = end + 1 + rng.IntN(10)
			t = end + 1
		}
	}
	sort.SliceStable(steps, func(i, j int) bool {
		if steps[i].t != steps[j].t {
			return steps[i].t < steps[j].t
		}
		return !steps[i].write && steps[j].write
	})
	var v int64
	for _, s := range steps {
		sec := &secs[s.sec]
		if !s.write {
			sec.Read, sec.Wrote = v, v+1
		} else if sec.Outcome == history.Accepted {
			v = sec.Wrote
		}
	}
	return secs, v
}

// TestCheckersAgree: on histories of a real register, with locks that work
// and locks that do not, the counter check and the linearizability check
// give the same answer every time.
func TestCheckersAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	kept, broken := 0, 0
	for i := range 1000 {
		secs, counter := simulate(rng, 1+rng.IntN(4), 1+rng.IntN(6), i%2 == 0)
		r := Judge(secs, counter, 10*time.Second)
		if r.Verdict == Unknown {
			t.Fatalf("history %d: %s\n%+v, counter %d", i, r.Reason, secs, counter)
		}
		if r.Verdict == Kept {
			kept++
		} else {
			broken++
		}
	}
	t.Logf("1000 simulated histories: %d kept and linearizable, %d broken and illegal, no disagreement", kept, broken)
	if kept == 0 || broken == 0 {
		t.Fatalf("the simulation produced %d kept and %d broken histories: it must produce both", kept, broken)
	}
}
