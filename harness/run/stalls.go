package run

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/locksuite/locksuite/harness/checker"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/machine"
	"github.com/locksuite/locksuite/harness/report"
)

// pidOf is the process that runs client: its chaos worker's, or this
// one's (the in-process clients); 0 when the worker runs elsewhere (a
// pod), where nothing is measured.
func (fx *Fixture) pidOf(client int) int {
	if client >= 0 && client < len(fx.Workers) {
		if p, ok := fx.Workers[client].(interface{ Pid() int }); ok {
			return p.Pid()
		}
		return 0
	}
	return os.Getpid()
}

// watchStalls starts measuring, from outside, how long the machine keeps
// the run's client processes from running (machine.Watch).
func (fx *Fixture) watchStalls() *machine.Stalls {
	pids := []int{os.Getpid()}
	for i := range fx.Workers {
		pids = append(pids, fx.pidOf(i))
	}
	return machine.Watch(fx.Rec.Now, pids...)
}

// inFault reports whether [from, to) meets a fault the run injected: a
// stall there may be the fault's.
func (fx *Fixture) inFault(from, to time.Duration) bool {
	for _, s := range fx.Log.Spans() {
		if s.Start < to && s.End >= from {
			return true
		}
	}
	return false
}

// faulted is how much of [from, to) the run's faults covered (their
// union: two at once count once).
func (fx *Fixture) faulted(from, to time.Duration) time.Duration {
	spans := fx.Log.Spans()
	slices.SortFunc(spans, func(a, b faults.Span) int { return cmp.Compare(a.Start, b.Start) })
	var sum time.Duration
	at := from // covered up to here
	for _, s := range spans {
		lo, hi := max(s.Start, at), min(s.End, to)
		if hi > lo {
			sum += hi - lo
			at = hi
		}
	}
	return sum
}

// clientName is how a row names the process of client.
func (fx *Fixture) clientName(client int) string {
	if client >= 0 && client < len(fx.Workers) {
		return fmt.Sprintf("worker %d", client)
	}
	return fmt.Sprintf("client %d (in the suite's own process)", client)
}

// noteStalls records on row the largest stall that no fault made of the
// run's client processes, the machine's CPU pressure over the run, and,
// when its lost updates are the machine's doing (checker.MachineStalls),
// why in words (Row.MachineStall): the suite then judges the row unknown
// where it expected the invariant kept unfenced.
func (fx *Fixture) noteStalls(st *machine.Stalls, pressure float64, res checker.Result, row *report.Row) {
	row.CPUPressure = pressure
	clients := max(len(fx.Workers), 1)
	for c := range clients {
		d, at := machine.Largest(st.Intervals(fx.pidOf(c)), fx.inFault)
		if d.Milliseconds() > row.StallMS {
			row.StallMS, row.StallAtMS, row.StallOf = d.Milliseconds(), (at - fx.T0).Milliseconds(), fx.clientName(c)
			if len(fx.Workers) == 0 {
				row.StallOf = "the suite's own process (its clients)"
			}
		}
	}
	if res.Verdict != checker.Broken || res.Lost <= 0 || res.Replayed > 0 {
		return
	}
	ms, ok := checker.MachineStalls(fx.Rec.Sections(), checker.Machine{Lease: fx.TTL(), Work: fx.Work, Faulted: fx.faulted,
		Waited: func(client int, from, to time.Duration) time.Duration {
			return machine.Stalled(st.Intervals(fx.pidOf(client)), from, to, fx.inFault)
		}})
	if !ok {
		return
	}
	where := "with no fault injected"
	if len(fx.Log.Spans()) > 0 {
		where = "outside every injected fault"
	}
	row.MachineStall = fmt.Sprintf("the machine held %s up for %v %s, past its %v lease (its section took %v for %v of work, its read and write on this machine's counter store; its own process waited %v for a CPU or stopped; its write came %v after the next holder's section began; CPU pressure %.0f%% over the run): rerun with fewer runs at once (--parallel) or a longer --lease",
		fx.clientName(ms.Client), ms.Stalled.Round(time.Millisecond), where, ms.Lease, ms.Section.Round(time.Millisecond), ms.Work,
		ms.Waited.Round(time.Millisecond), ms.Late.Round(time.Millisecond), 100*pressure)
}
