package run

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/locksuite/locksuite/harness/checker"
	"github.com/locksuite/locksuite/harness/faults"
)

// TestHoldersUntilTheWriteIsDue: a worker holds the lock from its read
// until its write is due (read + work), and while it waits for a stall
// before its write, whenever the run hears of it; its section ends it.
func TestHoldersUntilTheWriteIsDue(t *testing.T) {
	var now time.Duration
	h := &holders{now: func() time.Duration { return now }, work: 20 * time.Millisecond, by: map[int]time.Duration{}}
	h.read(1, 100*time.Millisecond)
	for _, c := range []struct {
		at    time.Duration
		holds bool
	}{{110 * time.Millisecond, true}, {119 * time.Millisecond, true}, {120 * time.Millisecond, false}, {500 * time.Millisecond, false}} {
		now = c.at
		if id, ok := h.Holder(); h.Holds(1) != c.holds || ok != c.holds || (ok && id != 1) {
			t.Errorf("read at 100ms, work 20ms: at %v Holds %v, Holder %d %v; want %v", c.at, h.Holds(1), id, ok, c.holds)
		}
	}
	h.asked(1)
	if now = time.Hour; !h.Holds(1) {
		t.Error("a worker waiting for its stall before its write does not hold the lock")
	}
	if h.done(1); h.Holds(1) {
		t.Error("a worker holds the lock after its section")
	}
	if _, ok := h.Holder(); ok {
		t.Error("Holder found someone after every section ended")
	}
}

// TestUntested: a kept row whose schedule struck none of its faults is
// unknown, saying why the first one struck nothing; a loss stands, and a
// row whose schedule struck one keeps its verdict.
func TestUntested(t *testing.T) {
	w := &stopper{}
	nobody := &faults.StopHolder{Procs: []faults.Stopper{w}, Holders: &holders{now: func() time.Duration { return 0 }, by: map[int]time.Duration{}}, Wait: time.Millisecond}
	s := faults.Schedule{Steps: []faults.Step{{Fault: nobody, For: time.Millisecond}}}
	log := faults.NewLog(func() time.Duration { return 0 })
	if err := log.Play(context.Background(), s, 0, nil); err != nil {
		t.Fatal(err)
	}
	res := checker.Result{Verdict: checker.Kept}
	if untested(&res, s, log); res.Verdict != checker.Unknown || !strings.Contains(res.Reason, "none of the schedule's 1 faults struck (no worker caught holding the lock") {
		t.Errorf("kept with nothing struck: %v %q, want unknown saying no holder was caught", res.Verdict, res.Reason)
	}
	lost := checker.Result{Verdict: checker.Broken}
	if untested(&lost, s, log); lost.Verdict != checker.Broken {
		t.Errorf("a loss with nothing struck became %v", lost.Verdict)
	}
	struck := faults.NewLog(func() time.Duration { return 0 })
	heal, err := struck.Strike(context.Background(), &faults.Stop{Proc: w, What: "w0"}, false)
	if err != nil {
		t.Fatal(err)
	}
	_ = heal()
	kept := checker.Result{Verdict: checker.Kept}
	if untested(&kept, s, struck); kept.Verdict != checker.Kept {
		t.Errorf("kept with a fault struck became %v", kept.Verdict)
	}
}

// stopper is a process that takes every signal.
type stopper struct{}

func (stopper) Stop() error { return nil }
func (stopper) Cont() error { return nil }
