package faults

import (
	"reflect"
	"testing"
	"time"
)

func TestPlanIsReproducible(t *testing.T) {
	a := Plan(42, 6, 700*time.Millisecond, 800*time.Millisecond, 3, false)
	b := Plan(42, 6, 700*time.Millisecond, 800*time.Millisecond, 3, false)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different plans:\n%v\n%v", a, b)
	}
	c := Plan(43, 6, 700*time.Millisecond, 800*time.Millisecond, 3, false)
	if reflect.DeepEqual(a, c) {
		t.Errorf("seeds 42 and 43 gave the same victims %v", a)
	}
	if a[0].At != 700*time.Millisecond || a[1].At != 2200*time.Millisecond || End(a) != 9*time.Second {
		t.Errorf("times %v, want the pause-testing guide's loop: first at 0.7s, every 1.5s, last ending at 9s", a)
	}
	for _, p := range Plan(1, 4, time.Second, time.Second, 3, true) {
		if p.Victim != -1 {
			t.Errorf("targeted plan has victim %d", p.Victim)
		}
	}
}
