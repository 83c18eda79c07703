package nodes

import (
	"slices"
	"strings"
	"testing"
)

// The partition algebra's tests: no network is made, so they run without
// root.

// TestScheduleReproducible: a seed gives the same faults every time, and
// another seed others; every drawn fault is valid on its network.
func TestScheduleReproducible(t *testing.T) {
	a, err := Schedule(42, All(5), 20)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Schedule(42, All(5), 20)
	c, _ := Schedule(43, All(5), 20)
	str := func(fs []Fault) string {
		var s []string
		for _, f := range fs {
			s = append(s, f.String())
		}
		return strings.Join(s, "; ")
	}
	if str(a) != str(b) {
		t.Errorf("seed 42 twice:\n%s\n%s", str(a), str(b))
	}
	if str(a) == str(c) {
		t.Errorf("seeds 42 and 43 give the same schedule: %s", str(a))
	}
	kinds := map[Kind]bool{}
	for _, f := range a {
		kinds[f.Kind()] = true
	}
	if len(kinds) != 5 {
		t.Errorf("20 faults drawn from all kinds have kinds %v, want all five", kinds)
	}
	if _, err := Schedule(1, All(3), 1, KindRing); err == nil {
		t.Error("a ring of 3 nodes: no error")
	}
	if _, err := Schedule(1, All(5), 1, "delay"); err == nil {
		t.Error(`kind "delay": no error`)
	}
	t.Logf("seed 42: %s", str(a))
}

// TestFaultChecks: faults that do not fit their network are refused with
// a reason.
func TestFaultChecks(t *testing.T) {
	for _, c := range []struct {
		f    Fault
		want string
	}{
		{Partition{Groups: [][]int{{0, 1}, {1, 2, 3}}}, "n1 is in two groups"},
		{Partition{Groups: [][]int{{0, 1, 2, 3}, {}}}, "empty group"},
		{Isolate(All(4), 7), "no node 7"},
		{Ring{Order: []int{0, 1, 2, 2}}, "n2 is on the ring twice"},
		{OneWay{From: []int{0}, To: []int{0, 1}}, "n0 is in From and To"},
		{OneWay{From: []int{0}}, "must not be empty"},
		{Stop{}, "no node to stop"},
	} {
		_, err := c.f.effect(4)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s on 4 nodes: %v, want an error with %q", c.f, err, c.want)
		}
	}
	if _, err := (Ring{Order: []int{2, 0, 1}}).effect(3); err == nil || !strings.Contains(err.Error(), "at least 4") {
		t.Errorf("ring of 3: %v", err)
	}
}

// TestRingAmong: a ring of four of six nodes cuts only the ring's pairs at
// distance 2; the two other nodes keep every link.
func TestRingAmong(t *testing.T) {
	r := Ring{Order: []int{5, 1, 3, 0}}
	e, err := r.effect(6)
	if err != nil {
		t.Fatal(err)
	}
	// Distance 2 on the ring: 5–3 and 1–0.
	want := [][]int{0: {1}, 1: {0}, 3: {5}, 5: {3}}
	for to := range 6 {
		var w []int
		if to < len(want) {
			w = want[to]
		}
		if !slices.Equal(e.drop[to], w) {
			t.Errorf("%s: n%d drops from %v, want %v", r, to, e.drop[to], w)
		}
	}
}
