package faults

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"
)

// proc is a Stopper that counts its signals; gone makes it a process
// that has exited.
type proc struct {
	mu          sync.Mutex
	stops, cont int
	gone        bool
}

func (p *proc) Stop() error { return p.signal(&p.stops) }
func (p *proc) Cont() error { return p.signal(&p.cont) }

// signal counts a signal in n, or fails as for a process that has exited.
func (p *proc) signal(n *int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone {
		return syscall.ESRCH
	}
	*n++
	return nil
}

// holders says client holder holds the lock (-1: nobody).
type holders struct{ holder int }

func (h holders) Holder() (int, bool) { return h.holder, h.holder >= 0 }
func (h holders) Holds(c int) bool    { return c == h.holder }
func (h holders) Now() time.Duration  { return 0 }

func victims(s Schedule) string {
	out := ""
	for _, st := range s.Steps {
		out += fmt.Sprintf("%s@%v+%v ", st.Fault.Span().What, st.At, st.For)
	}
	return out
}

// TestPausesAreReproducible: the same seed draws the same victims at the
// same times (the pause-testing guide's loop), another seed others; a
// targeted schedule draws nobody.
func TestPausesAreReproducible(t *testing.T) {
	procs := []Stopper{&proc{}, &proc{}, &proc{}}
	a := Pauses(42, 6, 700*time.Millisecond, 800*time.Millisecond, procs, nil)
	b := Pauses(42, 6, 700*time.Millisecond, 800*time.Millisecond, procs, nil)
	if victims(a) != victims(b) {
		t.Fatalf("same seed, different schedules:\n%s\n%s", victims(a), victims(b))
	}
	if c := Pauses(43, 6, 700*time.Millisecond, 800*time.Millisecond, procs, nil); victims(a) == victims(c) {
		t.Errorf("seeds 42 and 43 gave the same victims %s", victims(a))
	}
	if a.Steps[0].At != 700*time.Millisecond || a.Steps[1].At != 2200*time.Millisecond || a.End() != 9700*time.Millisecond {
		t.Errorf("times %s, end %v: want the pause-testing guide's loop: first at 0.7s, every 1.5s, the last ending at 9s, then 0.7s more", victims(a), a.End())
	}
	for _, st := range Pauses(1, 4, time.Second, time.Second, procs, holders{1}).Steps {
		if _, ok := st.Fault.(*StopHolder); !ok {
			t.Errorf("targeted schedule has step %T, want a StopHolder", st.Fault)
		}
	}
}

// TestPlay: a schedule's steps strike in order and heal; a step with
// nothing to strike (no holder, an exited process) is left out; Held is
// what the Holders said.
func TestPlay(t *testing.T) {
	w0, w1, gone := &proc{}, &proc{}, &proc{gone: true}
	procs := []Stopper{w0, w1, gone}
	s := Schedule{Steps: []Step{
		{At: 0, For: time.Millisecond, Fault: &Stop{Proc: w0, Lane: 0, Kind: "sigstop", What: "w0"}},
		{At: 2 * time.Millisecond, For: time.Millisecond, Fault: &StopHolder{Procs: procs, Holders: holders{-1}}},
		{At: 4 * time.Millisecond, For: time.Millisecond, Fault: &Stop{Proc: gone, Lane: 2, Kind: "sigstop", What: "w2"}},
		{At: 6 * time.Millisecond, For: time.Millisecond, Fault: &StopHolder{Procs: procs, Holders: holders{1}}},
	}}
	t0 := time.Now()
	log := NewLog(func() time.Duration { return time.Since(t0) })
	if err := log.Play(context.Background(), s, 0, holders{1}); err != nil {
		t.Fatal(err)
	}
	spans := log.Spans()
	if len(spans) != 2 || spans[0].What != "w0" || spans[0].Held || spans[1].What != "w1" || !spans[1].Held {
		t.Fatalf("spans %+v, want w0 (not holding), then w1 (holding)", spans)
	}
	if w0.stops != 1 || w0.cont != 1 || w1.stops != 1 || w1.cont != 1 {
		t.Errorf("w0 stopped %d, continued %d; w1 %d, %d: want each once", w0.stops, w0.cont, w1.stops, w1.cont)
	}
	if spans[1].Start < 6*time.Millisecond {
		t.Errorf("the last step struck at %v, before its At (6ms)", spans[1].Start)
	}
}

// late is the Holders of one worker whose report of its read comes late:
// the run hears of each hold once its write is already due, so Holds is
// false once a stop has been sent (stopped counts the worker's stops).
type late struct{ stopped *proc }

func (h late) Holder() (int, bool) { return 0, true }
func (h late) Holds(int) bool {
	h.stopped.mu.Lock()
	defer h.stopped.mu.Unlock()
	return h.stopped.stops == 0
}
func (h late) Now() time.Duration { return 0 }

// TestStopHolderTakesBackLateStops: a stop that lands after its victim's
// write was due (a busy machine delayed the worker's report) is taken
// back at once, and the pause is not struck; a stop in time is struck,
// Held, and timed from the stop.
func TestStopHolderTakesBackLateStops(t *testing.T) {
	w := &proc{}
	f := &StopHolder{Procs: []Stopper{w}, Holders: late{w}, Wait: 20 * time.Millisecond}
	if _, err := f.Inject(context.Background()); !errors.Is(err, ErrNoTarget) {
		t.Fatalf("Inject with only late stops: %v, want ErrNoTarget", err)
	}
	if w.stops == 0 || w.stops != w.cont {
		t.Errorf("worker stopped %d times, continued %d: want every late stop taken back", w.stops, w.cont)
	}
	in := &proc{}
	f = &StopHolder{Procs: []Stopper{in}, Holders: clocked{holders{0}, 7 * time.Second}, Wait: time.Second}
	heal, err := f.Inject(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if in.stops != 1 || in.cont != 0 {
		t.Errorf("stopped %d, continued %d before the heal: want 1 and 0", in.stops, in.cont)
	}
	if sp := f.Span(); !sp.Held || sp.Start != 7*time.Second || sp.What != "w0" {
		t.Errorf("span %+v: want w0, Held, starting at the stop (7s)", sp)
	}
	if err := heal(); err != nil || in.cont != 1 {
		t.Errorf("heal: %v, continued %d: want the stop healed once", err, in.cont)
	}
}

// clocked is Holders at a fixed time.
type clocked struct {
	holders
	at time.Duration
}

func (h clocked) Now() time.Duration { return h.at }
