package checker

import (
	"time"

	"github.com/locksuite/locksuite/harness/history"
)

// Machine is what MachineStalls knows of a run besides its history.
type Machine struct {
	// Lease is the clients' lease, and Work the time each section planned
	// to spend between its read and its write.
	Lease, Work time.Duration
	// Waited is how long the machine kept a client's process from running
	// within [from, to) outside every fault the run injected, measured
	// from outside the process (machine.Stalled); nil: not measured.
	Waited func(client int, from, to time.Duration) time.Duration
	// Faulted is how much of [from, to) the run's injected faults covered;
	// nil: none was injected.
	Faulted func(from, to time.Duration) time.Duration
}

// MachineStall is the stall that explains a run's lost updates: the
// machine held Client up for Stalled while it held its Lease (Section: its
// section took that long outside every fault, for Work planned; Waited:
// its process waited that long for a CPU or sat stopped), and its write
// came Late after the next holder's section began.
type MachineStall struct {
	Client                   int
	Stalled, Section, Waited time.Duration
	Late, Lease, Work        time.Duration
}

// MachineStalls reports whether stalls that no fault made explain every
// overlap of the accepted sections of secs, and so the updates the run
// lost, with the overlap whose holder stalled longest. It explains nothing
// when no section overlaps another.
//
// An overlap of two accepted sections, A's begun first and B's begun
// before A's write returned, is explained when both hold:
//
//   - A's write returned more than a lease after A asked for the lock: A's
//     lease may have expired. If not, the lock granted B while A's lease
//     ran, whatever the machine did: a double grant, broken.
//   - The machine held A up for at least as long as A's write came after
//     B's section began (without the stall, A would have written first):
//     A's section took that much longer than its planned work, outside
//     every injected fault (the gap between a holder's planned and actual
//     steps: its read and write are on this machine, neither is the lock's),
//     or A's process waited that long for a CPU, or sat stopped, from the
//     later of A's ask and B's start less the lease until A's write
//     returned (measured from outside it).
//
// The rule speaks of a run's safety under a lease: it is for unfenced runs
// that expect to keep the invariant. A fenced run must keep it under any
// pause, and a run whose loss was expected lost it anyway: the caller
// judges those as they are.
func MachineStalls(secs []history.Section, m Machine) (MachineStall, bool) {
	ov := Overlaps(secs)
	if len(ov) == 0 || m.Lease <= 0 {
		return MachineStall{}, false
	}
	var worst MachineStall
	for _, o := range ov {
		a, b := secs[o.A], secs[o.B]
		if a.End-a.Asked <= m.Lease {
			return MachineStall{}, false
		}
		s := MachineStall{Client: a.Client, Late: a.End - b.Start, Lease: m.Lease, Work: m.Work, Section: a.End - a.Start}
		if m.Faulted != nil {
			s.Section -= m.Faulted(a.Start, a.End)
		}
		if m.Waited != nil {
			s.Waited = m.Waited(a.Client, max(a.Asked, b.Start-m.Lease), a.End)
		}
		s.Stalled = max(s.Section-m.Work, s.Waited)
		if s.Stalled < s.Late {
			return MachineStall{}, false
		}
		if s.Stalled > worst.Stalled {
			worst = s
		}
	}
	return worst, true
}
