package run

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/harness/checker"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/traffic"
)

// Restart is the crash scenarios' load: the lock service itself fails
// while holder A's lease is valid. Before clients A and B (0 and 1, in
// turn) run Before critical sections, so that a fence counter has counted
// past them, and the service syncs what it wrote (faults.Syncer), as if it
// had run a while; then A acquires and reads, and the run's fault (faults.Crash:
// the service killed and started again) strikes before A writes; once the
// service serves again, B tries one section for at most Window, cut short
// so that A, writing next, is inside its lease by its own clock (three
// quarters of its TTL from its grant); A writes what it read and releases;
// then B, A, B, ... run After sections, each granted within Window or
// not at all. Unfenced, a service that forgot A's lock lets B in and A's
// write loses B's update; fenced, a fence counter that went back with the
// restart has its holders refused by the store. The row counts the
// sections after the restart that did not write, refused or not granted,
// as stuck (report.Row.Stuck): a lock that kept the counter right and
// stopped progress.
//
// The run's lease must outlast the restart and Window: a restart that
// leaves A no time to write inside its lease ends the run without a
// verdict, saying so. The service's health is checked before the fault
// and after it (Row.Health); the reason says what the restart did (how
// long the service was down, what a power loss dropped), whether the
// service still held A's lock (B's try), when B was granted against A's
// lease, and whether A was told its lease was lost
// (backends.LossNotifier) and when.
type Restart struct {
	Before, After int
	Window        time.Duration
}

func (l *Restart) Prepare(ctx context.Context, fx *Fixture) error { return fx.Standard(ctx, 2, false) }

// Planned is B's Window: the restart's own time is not known beforehand.
func (l *Restart) Planned(*Fixture) time.Duration { return l.Window }

func (l *Restart) Run(ctx context.Context, fx *Fixture, f faults.Fault) (Outcome, error) {
	r := newHolderRun(&Holder{Window: l.window, Health: true}, fx, f)
	ctx, cancel := r.bound(ctx)
	defer cancel()
	for i := range l.Before {
		if err := traffic.Increment(ctx, i%2, fx.Lockers[i%2], fx.Store, fx.Rec, 0, traffic.Hooks{}); err != nil {
			return Outcome{}, fmt.Errorf("section %d before the fault: %w", i+1, err)
		}
	}
	// What the service wrote so far is on its disks, as if it had run a
	// while: a power loss hits A's grant and what follows.
	if s, ok := f.(faults.Syncer); ok {
		if err := s.Sync(); err != nil {
			return Outcome{}, fmt.Errorf("syncing the service before A's section: %w", err)
		}
	}
	health, d, err := r.faulted(ctx)
	if err != nil {
		return Outcome{}, err
	}
	if end := r.grantedAt.Add(fx.TTL()); r.wroteAt.After(end) {
		return Outcome{}, fmt.Errorf("A wrote %v after its grant, past its lease (%v): the restart took too long for the run to say whether the service forgot A's lock; give the scenario a longer lease",
			r.wroteAt.Sub(r.grantedAt).Round(time.Millisecond), fx.TTL())
	}
	after := &afterRestart{}
	if r.bIn {
		after.tried++
		if errors.Is(r.errB, fencing.ErrStale) {
			after.refused++
		}
	}
	for i := range l.After {
		id := 1 - i%2
		sctx, cancel := context.WithTimeout(ctx, l.Window)
		err := traffic.Increment(sctx, id, fx.Lockers[id], fx.Store, fx.Rec, 0, traffic.Hooks{})
		cancel()
		after.tried++
		var se *traffic.StepError
		switch {
		case err == nil:
		case errors.Is(err, fencing.ErrStale):
			after.refused++
		case errors.As(err, &se) && se.Step == "acquire" && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			after.ungranted++
		default:
			return Outcome{}, fmt.Errorf("section %d after the fault: %w", i+1, err)
		}
	}
	return Outcome{Elapsed: d, Amend: func(res *checker.Result) { l.amend(r, after, res) }, Row: func(row *report.Row) {
		row.Health = health
		row.Stuck = after.refused + after.ungranted
	}}, nil
}

// window is how long B may try once the service serves again: Window,
// cut so that A's write comes before three quarters of its TTL.
func (l *Restart) window(fx *Fixture, granted time.Time) time.Duration {
	return max(min(l.Window, time.Until(granted.Add(fx.TTL()*3/4))), time.Millisecond)
}

// afterRestart counts the sections tried after the restart (B's try, if
// it was granted, and the sections after A's), those the fenced store
// refused, and those not granted within Window.
type afterRestart struct{ tried, refused, ungranted int }

// amend says in the result's reason what the restart did and what it
// meant for A and B.
func (l *Restart) amend(r *holderRun, after *afterRestart, res *checker.Result) {
	var notes []string
	if res.Reason != "" {
		notes = append(notes, res.Reason)
	}
	cr, crashed := faults.CrashReport{}, false
	if c, ok := r.f.(faults.Crashed); ok {
		cr, crashed = c.Crashed()
	}
	if crashed {
		n := fmt.Sprintf("the service was down %v", cr.Down().Round(time.Millisecond))
		if cr.PowerLoss {
			n += "; the power loss dropped " + cr.Dropped()
		}
		notes = append(notes, n)
	}
	leaseEnd := r.grantedAt.Add(r.fx.TTL())
	switch {
	case r.bIn && crashed:
		notes = append(notes, fmt.Sprintf("after the restart the service no longer held A's lock: B was granted %v after it served again, %v before A's lease would end",
			r.bGrantedAt.Sub(cr.Serving).Round(time.Millisecond), leaseEnd.Sub(r.bGrantedAt).Round(time.Millisecond)))
	case r.bIn:
		notes = append(notes, fmt.Sprintf("B was granted %v before A's lease would end", leaseEnd.Sub(r.bGrantedAt).Round(time.Millisecond)))
	case after.ungranted == l.After:
		notes = append(notes, fmt.Sprintf("after the restart no client was granted the lock: not B in %v, nor the %d sections after A's release in %v each",
			r.bWaited.Round(time.Millisecond), l.After, l.Window))
	default:
		notes = append(notes, fmt.Sprintf("after the restart the service still held A's lock: B waited %v in vain", r.bWaited.Round(time.Millisecond)))
	}
	if r.bIn && r.fx.Fenced {
		n := fmt.Sprintf("fences: A's %d, B's %d", r.aFence, r.bFence)
		if errors.Is(r.errB, fencing.ErrStale) {
			n += " (B's read refused)"
		}
		notes = append(notes, n)
	}
	notes = append(notes, fmt.Sprintf("A wrote %v after its grant (lease %v)", r.wroteAt.Sub(r.grantedAt).Round(time.Millisecond), r.fx.TTL()))
	notes = append(notes, toldOfCrash(r.fx.lease, r.told, cr.Killed, crashed))
	switch {
	case after.refused > 0 && after.ungranted > 0:
		notes = append(notes, fmt.Sprintf("stuck: of the %d sections after the restart, %d refused by the fenced store, %d not granted within %v",
			after.tried, after.refused, after.ungranted, l.Window))
	case after.refused > 0:
		notes = append(notes, fmt.Sprintf("stuck: %d of the %d sections after the restart refused by the fenced store", after.refused, after.tried))
	case after.ungranted > 0:
		notes = append(notes, fmt.Sprintf("stuck: %d of the %d sections after the restart not granted within %v", after.ungranted, after.tried, l.Window))
	}
	res.Reason = strings.Join(notes, "; ")
}

// toldOfCrash says whether A's lease reported itself lost (told, zero if
// not) before A wrote, and when against the crash (killed).
func toldOfCrash(l backends.Lease, told, killed time.Time, crashed bool) string {
	switch _, notifies := l.(backends.LossNotifier); {
	case !notifies:
		return "A's lease cannot tell that it was lost (no backends.LossNotifier)"
	case told.IsZero():
		return "A was not told its lease was lost before it wrote"
	case crashed:
		return fmt.Sprintf("A was told its lease was lost %v after the crash, before it wrote", told.Sub(killed).Round(time.Millisecond))
	}
	return "A was told its lease was lost before it wrote"
}
