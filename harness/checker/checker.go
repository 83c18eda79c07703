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
//
// Judge adds a second, independent check of the same history:
// linearizability against a register model (Linearizable), and reports a
// disagreement between the two as such.
package checker

import (
	"fmt"
	"sort"
	"time"

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
	// Linearizable is the second checker's answer (see Judge); empty when
	// only Check ran.
	Linearizable Linearity
}

// Check judges sections against the final counter of a counter that started
// at 0. Ambiguous (Failed) writes may each have been applied or not: the run
// is Kept if the counter is between Writes and Writes + Failed.
func Check(secs []history.Section, counter int64) Result {
	r := Result{Counter: counter}
	for _, s := range secs {
		switch s.Outcome {
		case history.Accepted:
			r.Writes++
		case history.Rejected:
			r.Rejected++
		case history.Failed:
			r.Failed++
		}
	}
	r.Replayed = replays(secs)
	r.Lost = int64(r.Writes) - counter
	r.Overlaps = overlaps(secs)
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

// Overlap is a pair of accepted sections whose spans intersect: A and B
// index the sections given to Overlaps (A's started first, or at the same
// time), and [Start, End) is the time both held what each took for the lock.
type Overlap struct {
	A, B       int
	Start, End time.Duration
}

// Overlaps lists every pair of accepted sections whose [Start, End) spans
// intersect, ordered by A's start. Sections of other outcomes are ignored;
// Result.Overlaps is the number of sections that are in at least one pair.
func Overlaps(secs []history.Section) []Overlap {
	var idx []int
	for i, s := range secs {
		if s.Outcome == history.Accepted {
			idx = append(idx, i)
		}
	}
	sort.SliceStable(idx, func(i, j int) bool { return secs[idx[i]].Start < secs[idx[j]].Start })
	var out []Overlap
	for i, a := range idx {
		for _, b := range idx[i+1:] {
			if secs[b].Start >= secs[a].End {
				break
			}
			if secs[a].Start < secs[b].End {
				out = append(out, Overlap{A: a, B: b, Start: secs[b].Start, End: min(secs[a].End, secs[b].End)})
			}
		}
	}
	return out
}

// overlaps counts sections that overlap another.
func overlaps(secs []history.Section) int {
	in := map[int]bool{}
	for _, o := range Overlaps(secs) {
		in[o.A], in[o.B] = true, true
	}
	return len(in)
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
