package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/locksuite/locksuite/internal/wait"
)

// Schedule is a seeded list of faults over a run's time (Jepsen's
// nemesis schedule): each Step strikes its Fault At after the load started
// and heals it For later. The same Seed gives the same Steps: a row prints
// it so that a run can be replayed.
type Schedule struct {
	// Seed is what the steps were drawn from (0: not drawn).
	Seed  uint64
	Steps []Step
	// After is how long the load goes on after the last step has healed.
	After time.Duration
}

// Step is one fault of a Schedule.
type Step struct {
	// At is when it strikes, since the load started.
	At time.Duration
	// For is how long it lasts: the heal comes For after the strike.
	For   time.Duration
	Fault Fault
}

// End is when the schedule is over, since the load started: the last
// step's heal plus After (0 for no steps).
func (s Schedule) End() time.Duration {
	if len(s.Steps) == 0 {
		return 0
	}
	last := s.Steps[len(s.Steps)-1]
	return last.At + last.For + s.After
}

// Play strikes s's steps through l, in order, each At after start on l's
// clock, and heals each For after it struck (or once ctx is done). holds,
// if not nil, tells whether a client holds the lock as a step strikes
// (Span.Held). A step whose Inject finds nothing to strike (ErrNoTarget)
// is left out: no span is recorded, and its error is kept (Log.Missed).
// Play returns nil once every step has healed or ctx is done, or the first
// other error of a strike or a heal (whatever struck is left for
// Log.HealAll).
func (l *Log) Play(ctx context.Context, s Schedule, start time.Duration, holds Holders) error {
	for _, st := range s.Steps {
		if wait.For(ctx, st.At-(l.clock()-start)) != nil {
			return nil
		}
		heal, err := l.strike(ctx, st.Fault, func(sp Span) bool { return holds != nil && holds.Holds(sp.Lane) })
		switch {
		case errors.Is(err, ErrNoTarget):
			l.mu.Lock()
			l.missed = append(l.missed, err.Error())
			l.mu.Unlock()
			continue
		case ctx.Err() != nil:
			return nil
		case err != nil:
			return fmt.Errorf("%s: %w", st.Fault.Span().What, err)
		}
		_ = wait.For(ctx, st.For)
		if err := heal(); err != nil {
			return fmt.Errorf("heal %s: %w", st.Fault.Span().What, err)
		}
	}
	return nil
}

// Spaced is a Schedule of fs, in order: the first strikes at first, each
// lasts on, then off passes before the next strikes, and off more after
// the last.
func Spaced(fs []Fault, first, on, off time.Duration) Schedule {
	s := Schedule{After: off}
	for i, f := range fs {
		s.Steps = append(s.Steps, Step{At: first + time.Duration(i)*(on+off), For: on, Fault: f})
	}
	return s
}

// Pauses is the chaos loop of "Testing Distributed Locks Under Pauses" (the
// pause-testing guide locksuite follows) as a Schedule over the worker
// processes procs (procs[i] is client i): k pauses of length d, the first
// after interval, each next one interval after the previous ended (sleep
// interval; stop a victim; sleep d; continue it), and interval more after
// the last (Spaced). Each pause is a Stop of a victim drawn from a PCG
// generator seeded with seed, so a seed gives the same schedule every time.
// With holders (a targeted schedule), each pause is instead a StopHolder
// that stops whichever worker holds the lock, waiting up to interval (at
// least 100 ms) for one; the seed then draws nothing.
func Pauses(seed uint64, k int, interval, d time.Duration, procs []Stopper, holders Holders) Schedule {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	fs := make([]Fault, k)
	for i := range fs {
		if holders != nil {
			fs[i] = &StopHolder{Procs: procs, Holders: holders, Wait: max(interval, 100*time.Millisecond)}
			continue
		}
		v := rng.IntN(len(procs))
		fs[i] = &Stop{Proc: procs[v], Lane: v, Kind: "sigstop", What: workerName(v)}
	}
	s := Spaced(fs, interval, d, interval)
	s.Seed = seed
	return s
}

// workerName is worker process i's name in a schedule: "w1".
func workerName(i int) string { return fmt.Sprintf("w%d", i) }
