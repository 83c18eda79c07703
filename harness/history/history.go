// Package history records what the clients of a run did: one Section per
// critical section, every time measured on one clock from one base time, so
// that sections of different clients, and of different worker processes, can
// be compared. The clock is the system's CLOCK_MONOTONIC, which every process
// on the machine shares and which wall-clock jumps do not move.
package history

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Outcome is how a critical section's write ended.
type Outcome int

const (
	// Accepted: the store acknowledged the write. It must be in the counter.
	Accepted Outcome = iota
	// Rejected: a fenced store refused the write as stale. It must not be.
	Rejected
	// Failed: the write returned another error; it may or may not have been
	// applied (an ambiguous write), and the checker allows for both.
	Failed
	// Aborted: the section ended before writing (read failed, run ended).
	Aborted
)

func (o Outcome) String() string {
	if o < Accepted || o > Aborted {
		return fmt.Sprintf("outcome(%d)", int(o))
	}
	return [...]string{"accepted", "rejected", "failed", "aborted"}[o]
}

// Section is one critical section: from the moment Acquire returned to the
// moment the write returned.
type Section struct {
	Client  int           `json:"client"`
	Asked   time.Duration `json:"asked_ns"` // when Acquire was called
	Start   time.Duration `json:"start_ns"` // when Acquire returned; since the recorder's base
	End     time.Duration `json:"end_ns"`
	Fence   uint64        `json:"fence"`
	Read    int64         `json:"read"`  // the value read
	Wrote   int64         `json:"wrote"` // the value written
	Outcome Outcome       `json:"outcome"`
	// Session is the server-side session that held the grant, if the
	// lease names it (backends.Sessioner): "pid 4242".
	Session string `json:"session,omitempty"`
}

// Valid reports whether s could have been recorded: a known Outcome, times
// in order (0 ≤ Asked ≤ Start ≤ End). A Section decoded from another
// process is checked with it before the checker sees it.
func (s Section) Valid() error {
	switch {
	case s.Outcome < Accepted || s.Outcome > Aborted:
		return fmt.Errorf("history: section of client %d: unknown outcome %d", s.Client, int(s.Outcome))
	case s.Asked < 0 || s.Start < s.Asked || s.End < s.Start:
		return fmt.Errorf("history: section of client %d: times out of order (asked %d, start %d, end %d ns)", s.Client, s.Asked, s.Start, s.End)
	}
	return nil
}

// Clock reads CLOCK_MONOTONIC: the same clock in every process.
func Clock() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // cannot happen on Linux
	}
	return time.Duration(ts.Nano())
}

// Recorder collects Sections from concurrent clients.
type Recorder struct {
	base time.Duration
	mu   sync.Mutex
	secs []Section
	sink func(Section)
}

// NewRecorder returns a Recorder whose clock starts now.
func NewRecorder() *Recorder { return &Recorder{base: Clock()} }

// NewRecorderAt returns a Recorder whose clock starts at base (a Clock
// reading), so that another process's Recorder measures from the same zero.
// sink, if not nil, is called with each section as it is added.
func NewRecorderAt(base time.Duration, sink func(Section)) *Recorder {
	return &Recorder{base: base, sink: sink}
}

// Base is the Clock reading the recorder measures from.
func (r *Recorder) Base() time.Duration { return r.base }

// Now is the time since the recorder's base.
func (r *Recorder) Now() time.Duration { return Clock() - r.base }

// Add records a finished section.
func (r *Recorder) Add(s Section) {
	r.mu.Lock()
	r.secs = append(r.secs, s)
	r.mu.Unlock()
	if r.sink != nil {
		r.sink(s)
	}
}

// Sections returns a copy of the recorded sections, ordered by start.
func (r *Recorder) Sections() []Section {
	r.mu.Lock()
	out := append([]Section(nil), r.secs...)
	r.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}
