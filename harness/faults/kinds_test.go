package faults

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestStall: a stall aimed at worker 1 stops worker 1's process (kind
// "stall") until the heal; aimed with Goroutine it stops nothing and its
// span is drawn but neither counted nor scheduled; struck without aiming
// it strikes nothing and says so.
func TestStall(t *testing.T) {
	ctx := context.Background()
	w0, w1 := &proc{}, &proc{}
	log := NewLog(func() time.Duration { return time.Second })
	heal, err := log.Strike(ctx, (&Stall{Procs: []Stopper{w0, w1}}).Aim(1), true)
	if err != nil {
		t.Fatal(err)
	}
	if w1.stops != 1 || w0.stops != 0 {
		t.Errorf("stall of worker 1 stopped w0 %d, w1 %d times", w0.stops, w1.stops)
	}
	if err := heal(); err != nil || w1.cont != 1 {
		t.Errorf("heal: %v, w1 continued %d times", err, w1.cont)
	}
	if _, err := log.Strike(ctx, (&Stall{Goroutine: true}).Aim(0), true); err != nil {
		t.Fatal(err)
	}
	spans := log.Spans()
	if len(spans) != 2 || spans[0].Kind != "stall" || spans[0].What != "w1" || spans[1].Kind != "sleep" || !spans[1].Uncounted {
		t.Fatalf("spans %+v, want a stall of w1, then an uncounted sleep of w0", spans)
	}
	if n, s := log.Injected(), log.Schedule(0); n != 1 || s != "w1@1.00s+0.00s*" {
		t.Errorf("injected %d, schedule %q: want the process stall alone", n, s)
	}
	if _, err := (&Stall{Procs: []Stopper{w0}}).Inject(ctx); !errors.Is(err, ErrNotApplicable) {
		t.Errorf("a stall struck without aiming: %v, want ErrNotApplicable", err)
	}
}
