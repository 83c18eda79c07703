package checker

import (
	"testing"
	"time"

	"github.com/locksuite/locksuite/harness/history"
)

// TestMachineStalls: an overlap is the machine's doing only if the first
// holder may have outlived its lease and was held up, outside every fault,
// at least as long as its write came late; every overlap must be.
func TestMachineStalls(t *testing.T) {
	ms := time.Millisecond
	sec := func(c int, asked, start, end time.Duration) history.Section {
		return history.Section{Client: c, Asked: asked * ms, Start: start * ms, End: end * ms, Outcome: history.Accepted}
	}
	// A holds from 10 to 500 ms for 20 ms of work; B begins at 250 ms: A's
	// write came 250 ms after B's start.
	late := []history.Section{sec(0, 0, 10, 500), sec(1, 20, 250, 260)}
	waited := func(d time.Duration) func(int, time.Duration, time.Duration) time.Duration {
		return func(c int, from, to time.Duration) time.Duration {
			if c != 0 || from != 50*ms || to != 500*ms { // B's start less the lease, to A's write
				t.Errorf("asked the wait of client %d in [%v, %v), want client 0 in [50ms, 500ms)", c, from, to)
			}
			return d
		}
	}
	faulted := func(d time.Duration) func(time.Duration, time.Duration) time.Duration {
		return func(time.Duration, time.Duration) time.Duration { return d }
	}
	for _, tc := range []struct {
		name string
		secs []history.Section
		m    Machine
		want bool
	}{
		{"a slow section, no fault", late, Machine{Lease: 200 * ms, Work: 20 * ms}, true},
		{"a slow section, the fault's", late, Machine{Lease: 200 * ms, Work: 20 * ms, Faulted: faulted(300 * ms)}, false},
		{"a fault, and the machine longer", late, Machine{Lease: 200 * ms, Work: 20 * ms, Faulted: faulted(200 * ms)}, true},
		{"a fault, and the machine shorter", late, Machine{Lease: 200 * ms, Work: 20 * ms, Faulted: faulted(250 * ms)}, false},
		{"the fault's, but the process waited", late, Machine{Lease: 200 * ms, Work: 20 * ms, Faulted: faulted(490 * ms), Waited: waited(250 * ms)}, true},
		{"the fault's, the process waited less", late, Machine{Lease: 200 * ms, Work: 20 * ms, Faulted: faulted(490 * ms), Waited: waited(240 * ms)}, false},
		{"planned work", late, Machine{Lease: 200 * ms, Work: 300 * ms}, false},
		{"within its lease: a double grant", []history.Section{sec(0, 0, 10, 150), sec(1, 20, 100, 110)}, Machine{Lease: 200 * ms}, false},
		{"no overlap", []history.Section{sec(0, 0, 10, 300), sec(1, 20, 300, 310)}, Machine{Lease: 200 * ms}, false},
	} {
		got, ok := MachineStalls(tc.secs, tc.m)
		if ok != tc.want {
			t.Errorf("%s: explained %v, want %v (%+v)", tc.name, ok, tc.want, got)
		}
		if ok && (got.Client != 0 || got.Late != 250*ms || got.Stalled < got.Late) {
			t.Errorf("%s: %+v", tc.name, got)
		}
	}
}
