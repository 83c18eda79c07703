// Package history records what the clients of a run did: one Section per
// critical section, every time measured on one clock from one base time, so
// that sections of different clients can be compared.
package history

import (
	"sort"
	"sync"
	"time"
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
	return [...]string{"accepted", "rejected", "failed", "aborted"}[o]
}

// Section is one critical section: from the moment Acquire returned to the
// moment the write returned.
type Section struct {
	Client  int           `json:"client"`
	Start   time.Duration `json:"start_ns"` // since the recorder's base
	End     time.Duration `json:"end_ns"`
	Fence   uint64        `json:"fence"`
	Read    int64         `json:"read"`  // the value read
	Wrote   int64         `json:"wrote"` // the value written
	Outcome Outcome       `json:"outcome"`
}

// Recorder collects Sections from concurrent clients.
type Recorder struct {
	base time.Time
	mu   sync.Mutex
	secs []Section
}

// NewRecorder returns a Recorder whose clock starts now.
func NewRecorder() *Recorder { return &Recorder{base: time.Now()} }

// Now is the time since the recorder's base, on the monotonic clock.
func (r *Recorder) Now() time.Duration { return time.Since(r.base) }

// Add records a finished section.
func (r *Recorder) Add(s Section) {
	r.mu.Lock()
	r.secs = append(r.secs, s)
	r.mu.Unlock()
}

// Sections returns a copy of the recorded sections, ordered by start.
func (r *Recorder) Sections() []Section {
	r.mu.Lock()
	out := append([]Section(nil), r.secs...)
	r.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}
