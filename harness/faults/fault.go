package faults

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Fault is one fault the harness can strike a run with: a client's network
// path frozen, cut or blackholed, a process stopped, a server's clock
// moved, a session ended, a leader killed. Each is made for one target (a
// client, a process, the lock service) and knows nothing of the run that
// uses it: the run decides when it strikes and how long it lasts.
//
// The contract, for implementers (toxiproxy's toxics are the model):
//
//   - Applies reports, before the run's load starts, whether the fault can
//     strike its target: nil if it can, an error wrapping ErrNotApplicable
//     (see NotApplicable) saying why not, or another error if it could not
//     find out (a service that does not answer). A fault that does not apply
//     makes the run skipped, never failed: it documents what the target
//     does not offer (no process to stop, no session to end).
//   - Inject strikes, and returns once the fault is in place. It may find
//     only then that it does not apply (the Lease it would end has no
//     session): it returns an error wrapping ErrNotApplicable and has struck
//     nothing. It may find nothing to strike at this moment (no worker holds
//     the lock, the process has exited): an error wrapping ErrNoTarget. On
//     any error nothing is left to heal. Inject returns, with an error
//     wrapping ctx.Err(), once ctx is done.
//   - The heal Inject returns undoes the fault (thaws, continues, heals the
//     path). It is idempotent: a second call does nothing and returns nil;
//     safe to call from any goroutine; it never blocks longer than its own
//     bounded work. A fault that cannot be undone (a jumped clock, an ended
//     session) returns a nil heal: there is nothing to undo. Log.Strike
//     returns a heal that is never nil. A run always heals what it struck,
//     also when it ends early, fails or panics (Log.HealAll).
//   - Span says what the fault records on the run's timeline: the lane it is
//     drawn on (a client, or ServiceLane for the lock service), its kind and its
//     name in the row's schedule. It is read after Inject and again after
//     the heal. Start and End are normally left zero and filled by Log with
//     the times the fault struck and healed; a fault that knows better (a
//     killed leader: the service was healthy again before the run healed
//     it) sets them itself, on the Log's clock.
//
// A fault may implement Restorer, for what must be put back after the run
// and its checks, not at heal time (a killed member restarted); the
// optional capabilities that loads read (Aimable, LagStep, Recovery) are in
// capability.go.
type Fault interface {
	Applies(ctx context.Context) error
	Inject(ctx context.Context) (heal func() error, err error)
	Span() Span
}

// Restorer is an optional capability of a Fault that leaves its target
// changed after the heal (a killed server is not running). Restore puts it
// back (restarts the member and waits until the service is healthy with
// it), so that the next run finds the target whole. A run calls it once,
// after its checks, whether or not the fault struck; Restore of a fault
// that never struck returns nil.
type Restorer interface {
	Restore(ctx context.Context) error
}

// ErrNotApplicable is wrapped by the error of Applies or Inject for a fault
// that cannot strike its target.
var ErrNotApplicable = errors.New("the fault does not apply")

// ErrNoTarget is wrapped by the error of an Inject that found nothing to
// strike at this moment, though the fault applies: no worker held the lock
// for a targeted pause, the process to stop had exited. Nothing was struck;
// a Schedule goes on with its next step (Log.Play).
var ErrNoTarget = errors.New("nothing to strike")

// NotApplicable returns an error wrapping ErrNotApplicable whose text is
// reason (and only reason: it is the skip's text).
func NotApplicable(reason string) error { return &notApplicable{reason} }

type notApplicable struct{ reason string }

func (n *notApplicable) Error() string { return n.reason }
func (n *notApplicable) Unwrap() error { return ErrNotApplicable }

// ServiceLane is the Span.Lane of a fault of the lock service itself: drawn on
// every client's lane.
const ServiceLane = -1

// Span is one fault as it happened, on the run's clock (the recorder's:
// history.Recorder.Now).
type Span struct {
	// Lane is the client the fault struck (0 is the first client, A), or
	// ServiceLane for the lock service.
	Lane int
	// Kind is what the timeline calls the fault ("freeze", "cut",
	// "sigstop", "clock jump").
	Kind string
	// What names the fault in the row's schedule ("cut A", "SIGSTOP
	// redis-server", "w1").
	What string
	// Start and End: when it struck and when it healed (End is Start for a
	// fault that was never healed, as a jumped clock).
	Start, End time.Duration
	// Until, if not empty, says what End marks when it is not the heal
	// ("healthy again"); the schedule then prints it.
	Until string
	// Held says the victim held the lock when the fault struck; set by the
	// Log from what the run knows (Log.Strike's held, Log.Play's Holders),
	// or by a fault that struck a holder (StopHolder).
	Held bool
	// Uncounted marks a span that is drawn on the timeline but neither
	// counted by Log.Injected nor printed by Log.Schedule: a stall of one
	// goroutine (Stall with Goroutine), which stops no process and cuts no
	// path.
	Uncounted bool
}

// Log records the spans of one run's faults and keeps the heal of each
// fault that has not healed yet. Its zero value is not usable: see NewLog.
// A Log is safe for concurrent use.
type Log struct {
	clock func() time.Duration
	mu    sync.Mutex
	spans []Span
	open  map[int]func() error // by index in spans
	// missed: why each of Play's steps that found nothing to strike
	// struck nothing
	missed []string
}

// NewLog returns a Log that reads time from clock.
func NewLog(clock func() time.Duration) *Log {
	return &Log{clock: clock, open: map[int]func() error{}}
}

// Strike injects f and records its span. The heal it returns is f's,
// made idempotent, and records the span's end; until it is called,
// HealAll heals f too. held is recorded in the span (Span.Held).
func (l *Log) Strike(ctx context.Context, f Fault, held bool) (heal func() error, err error) {
	return l.strike(ctx, f, func(Span) bool { return held })
}

// strike is Strike with held read from the span f reports once it struck.
func (l *Log) strike(ctx context.Context, f Fault, held func(Span) bool) (heal func() error, err error) {
	start := l.clock()
	h, err := f.Inject(ctx)
	if err != nil {
		return nil, err
	}
	s := f.Span()
	if s.Start == 0 {
		s.Start = start
	}
	s.Held = s.Held || held(s)
	l.mu.Lock()
	i := len(l.spans)
	l.spans = append(l.spans, s)
	var once sync.Once
	var herr error
	heal = func() error {
		once.Do(func() {
			if h != nil {
				herr = h()
			}
			end := l.clock()
			after := f.Span()
			l.mu.Lock()
			defer l.mu.Unlock()
			sp := &l.spans[i]
			sp.What, sp.Until = after.What, after.Until
			sp.End = end
			if after.End != 0 {
				sp.End = after.End
			}
			sp.End = max(sp.End, sp.Start)
			delete(l.open, i)
		})
		return herr
	}
	l.open[i] = heal
	l.mu.Unlock()
	return heal, nil
}

// HealAll heals every fault struck and not healed yet, and returns their
// errors joined. A run defers it: whatever happens, a stopped process is
// continued and a cut path healed.
func (l *Log) HealAll() error {
	l.mu.Lock()
	var heals []func() error
	for _, h := range l.open {
		heals = append(heals, h)
	}
	l.mu.Unlock()
	var errs []error
	for _, h := range heals {
		errs = append(errs, h())
	}
	return errors.Join(errs...)
}

// Spans returns the spans recorded so far, in the order they struck.
func (l *Log) Spans() []Span {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Span(nil), l.spans...)
}

// Missed says why each step Play left out found nothing to strike, in
// order ("no worker caught holding the lock before its write within 500ms
// (3 stops came too late): nothing to strike").
func (l *Log) Missed() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.missed)
}

// Injected counts the spans that were struck, Uncounted ones aside.
func (l *Log) Injected() int {
	n := 0
	for _, s := range l.Spans() {
		if !s.Uncounted {
			n++
		}
	}
	return n
}

// Schedule prints the struck spans compactly, times since t0 on the Log's
// clock: "w1@0.70s+0.80s* cut A@0.02s+0.21s" (* = the victim held the
// lock), or with Until "killed leader etcd-1@0.50s, healthy again +0.69s".
func (l *Log) Schedule(t0 time.Duration) string {
	var b strings.Builder
	for _, s := range l.Spans() {
		if s.Uncounted {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(" ")
		}
		if s.Until != "" {
			fmt.Fprintf(&b, "%s@%.2fs, %s +%.2fs", s.What, (s.Start - t0).Seconds(), s.Until, (s.End - s.Start).Seconds())
		} else {
			fmt.Fprintf(&b, "%s@%.2fs+%.2fs", s.What, (s.Start - t0).Seconds(), (s.End - s.Start).Seconds())
		}
		if s.Held {
			b.WriteString("*")
		}
	}
	return b.String()
}
