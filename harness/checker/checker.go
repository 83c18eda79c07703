// Package checker judges a run: does the counter reflect every acknowledged
// write exactly once?
//
// The invariant is about the data, not the lock: every write the store
// accepted must be in the final counter, once. Lost updates are
// accepted writes − counter, and the verdict rests on them alone.
//
// A second, independent figure helps diagnose: Overlaps counts accepted
// sections whose time span intersects another accepted section's, that is,
// writes made while the lock was not exclusive. It is not part of the
// verdict: a section ends when its write's reply arrives, so a holder stopped
// after the store applied its write but before it read the reply has a long
// section that overlaps the next holder's although nothing went wrong. With
// no faults at all it must be 0 (the suite's baseline asserts that).
// A rejected (stale) section is not counted: the store refused it.
package checker

import (
	"fmt"

	"github.com/locksuite/locksuite/harness/history"
)

// Verdict has three states, because a check can fail to reach a conclusion.
type Verdict int

const (
	// Unknown: no conclusion (the run timed out, the counter could not be
	// read). Neither a pass nor a failure.
	Unknown Verdict = iota
	// Kept: the invariant held.
	Kept
	// Broken: the invariant was violated; Result.Reason says how.
	Broken
)

func (v Verdict) String() string { return [...]string{"unknown", "kept", "broken"}[v] }

// Result is the checker's judgement of one run.
type Result struct {
	Writes   int   // accepted writes
	Counter  int64 // the final counter
	Lost     int64 // Writes − Counter (negative: writes appeared from nowhere)
	Overlaps int   // accepted sections overlapping another accepted section
	Rejected int   // stale reads and writes the store refused
	Failed   int   // ambiguous writes (error: may or may not be applied)
	// Replayed counts sections that followed a rejection of the same client
	// without a new acquisition and a new read: a holder that retried its
	// stale write. The worker rule forbids it; it makes the run Broken.
	Replayed int
	Verdict  Verdict
	Reason   string // why Broken or Unknown; empty when Kept
}

// Check judges sections against the final counter of a counter that started
// at 0. Ambiguous (Failed) writes may each have been applied or not: the run
// is Kept if the counter is between Writes and Writes + Failed.
func Check(secs []history.Section, counter int64) Result {
	r := Result{Counter: counter}
	var accepted []history.Section
	for _, s := range secs {
		switch s.Outcome {
		case history.Accepted:
			r.Writes++
			accepted = append(accepted, s)
		case history.Rejected:
			r.Rejected++
		case history.Failed:
			r.Failed++
		}
	}
	r.Replayed = replays(secs)
	r.Lost = int64(r.Writes) - counter
	r.Overlaps = overlaps(accepted)
	r.Verdict = Kept
	switch {
	case counter < int64(r.Writes):
		r.Verdict = Broken
		r.Reason = fmt.Sprintf("%d writes reported, counter is %d: %d lost", r.Writes, counter, r.Lost)
	case counter > int64(r.Writes+r.Failed):
		r.Verdict = Broken
		r.Reason = fmt.Sprintf("%d writes reported (%d ambiguous), counter is %d: writes appeared that no client made", r.Writes, r.Failed, counter)
	case r.Replayed > 0:
		r.Verdict = Broken
		r.Reason = fmt.Sprintf("%d sections retried a rejected write without acquiring and reading again", r.Replayed)
	}
	if r.Overlaps > 0 && r.Verdict == Broken && r.Lost > 0 {
		r.Reason += fmt.Sprintf(" (%d overlapping sections)", r.Overlaps)
	}
	return r
}

// overlaps counts sections (sorted or not) whose [Start, End] intersects
// another's. Sweep in start order, remembering the section that ends last.
func overlaps(secs []history.Section) int {
	if len(secs) < 2 {
		return 0
	}
	s := append([]history.Section(nil), secs...)
	sortByStart(s)
	marked := make([]bool, len(s))
	last := 0 // index of the section with the latest End so far
	for i := 1; i < len(s); i++ {
		if s[i].Start < s[last].End {
			marked[i], marked[last] = true, true
		}
		if s[i].End > s[last].End {
			last = i
		}
	}
	n := 0
	for _, m := range marked {
		if m {
			n++
		}
	}
	return n
}

// replays counts, per client, sections after a Rejected one that did not
// start with a new acquisition (Asked before the rejection's End) or that
// wrote something other than their own read + 1.
func replays(secs []history.Section) int {
	last := map[int]*history.Section{}
	s := append([]history.Section(nil), secs...)
	sortByStart(s)
	n := 0
	for i := range s {
		c := &s[i]
		if p := last[c.Client]; p != nil && p.Outcome == history.Rejected {
			if c.Asked < p.End || (c.Outcome == history.Accepted && c.Wrote != c.Read+1) {
				n++
			}
		}
		last[c.Client] = c
	}
	return n
}
