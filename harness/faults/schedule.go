package faults

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Pause is one planned process pause: at At (since the run's start) stop
// worker Victim for For. Victim -1 means whichever worker holds the lock at
// that moment (a targeted pause).
type Pause struct {
	At     time.Duration
	For    time.Duration
	Victim int
}

// Plan is the chaos loop of "Testing Distributed Locks Under Pauses" (the
// pause-testing guide locksuite follows) as a schedule: k pauses of length
// d, the first after interval, each next one interval after the previous
// ended (sleep interval; stop a victim; sleep d; continue it). Victims are drawn
// from a PCG generator seeded with seed, so a seed gives the same schedule
// every time; targeted pauses have Victim -1.
func Plan(seed uint64, k int, interval, d time.Duration, workers int, targeted bool) []Pause {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var out []Pause
	at := time.Duration(0)
	for range k {
		at += interval
		v := -1
		if !targeted {
			v = rng.IntN(workers)
		}
		out = append(out, Pause{At: at, For: d, Victim: v})
		at += d
	}
	return out
}

// End is when the last pause of the plan ends.
func End(plan []Pause) time.Duration {
	if len(plan) == 0 {
		return 0
	}
	p := plan[len(plan)-1]
	return p.At + p.For
}

// Injected is a pause as it happened.
type Injected struct {
	At     time.Duration `json:"at_ns"` // since the run's start
	For    time.Duration `json:"for_ns"`
	Victim int           `json:"victim"`
	Held   bool          `json:"held"` // the victim held the lock when stopped
}

// Describe prints injected pauses compactly: "w1@0.70s+0.80s*" (* = held).
func Describe(ps []Injected) string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "w%d@%.2fs+%.2fs", p.Victim, p.At.Seconds(), p.For.Seconds())
		if p.Held {
			b.WriteString("*")
		}
	}
	return b.String()
}
