package run

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/harness/checker"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/history"
	"github.com/locksuite/locksuite/harness/traffic"
)

// Contract checks the promises of backends.Locker and backends.Lease that
// a caller relies on, each within Bound:
//
//   - Acquire honours its context: B's Acquire, waiting while A holds the
//     lock, returns an error wrapping ctx.Err() once its context is
//     cancelled.
//   - Release of an expired lease returns nil and harms no one: A stalls
//     under the run's fault (a freeze of A: its fault path frozen, or
//     backends.Freezer) until B holds the lock, then releases, twice; C
//     must not get in while B holds the lock.
//   - Acquire after Close returns an error wrapping backends.ErrClosed.
//   - A second Close returns nil, without panicking.
//
// It judges by itself (nobody writes): kept when every promise held,
// broken with each broken one named. A promise that cannot be exercised
// on this lock (its lease does not expire while its holder stalls, or the
// freeze does not apply and the lock declares no TTL to wait out) is
// noted in the reason, not judged: Contract runs whether or not its fault
// applies (OptionalFault).
type Contract struct {
	// Bound is how long each call may take once it should return: after
	// Acquire's context is cancelled, Acquire after Close, Release of an
	// expired lease, the second Close.
	Bound time.Duration
}

// Prepare makes A, B and C; A, acquiring and releasing the free lock once,
// dials through its path (or not), so that the freeze knows whether it
// applies. A lock without a fencing token is judged too: nobody writes.
func (Contract) Prepare(ctx context.Context, fx *Fixture) error {
	if err := fx.Clients(ctx, 3, true); err != nil {
		return err
	}
	_, err := firstGrant(ctx, fx.Lockers[0])
	return err
}

func (c Contract) Planned(fx *Fixture) time.Duration { return fx.Expiry() + 2*c.Bound }

// OptionalFault: the contract runs whether or not the freeze applies.
func (Contract) OptionalFault() {}

// called is the outcome of one call of the Locker or Lease under test,
// panicked set when it panicked.
type called struct {
	traffic.Called
	panicked any
}

// within is traffic.Call, with a panic taken out of the error.
func within(bound time.Duration, ready <-chan struct{}, f func() (backends.Lease, error)) called {
	r := called{Called: traffic.Call(ready, bound, f)}
	var pe *traffic.PanicError
	if errors.As(r.Err, &pe) {
		r.panicked, r.Err = pe, nil
	}
	return r
}

func (c Contract) Run(ctx context.Context, fx *Fixture, freeze faults.Fault) (Outcome, error) {
	a, b, cc, rec := fx.Lockers[0], fx.Lockers[1], fx.Lockers[2], fx.Rec
	t0 := time.Now()
	var broken, notes []string
	hold := func(id int, asked, start time.Duration) {
		rec.Add(history.Section{Client: id, Asked: asked, Start: start, End: rec.Now(), Outcome: history.Aborted})
	}
	release := func(l backends.Lease) {
		if l != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = l.Release(rctx)
		}
	}

	// A holds the lock.
	la, askedA, startA, err := fx.holdFree(ctx)
	if err != nil {
		return Outcome{}, err
	}

	// 1. B's Acquire, waiting for A, is cancelled.
	bctx, cancelB := context.WithCancel(ctx)
	cancelled := make(chan struct{})
	go func() {
		select {
		case <-time.After(min(max(fx.TTL()/4, 20*time.Millisecond), 100*time.Millisecond)):
		case <-ctx.Done():
		}
		cancelB()
		close(cancelled)
	}()
	r := within(c.Bound, cancelled, func() (backends.Lease, error) { return b.Acquire(bctx) })
	<-cancelled
	switch {
	case !r.Returned:
		broken = append(broken, fmt.Sprintf("Acquire did not return within %v of its context's cancel (it must return an error wrapping ctx.Err() once ctx is done)", c.Bound))
	case r.panicked != nil:
		broken = append(broken, fmt.Sprintf("Acquire panicked: %v", r.panicked))
	case r.Err == nil && r.Took > cancelSlack:
		release(r.Lease)
		broken = append(broken, fmt.Sprintf("Acquire returned a lease %v after its context was cancelled (once ctx is done it must return an error wrapping ctx.Err() and hold nothing)", r.Took.Round(time.Millisecond)))
	case r.Err == nil:
		// Granted before the cancel: A's lease ran out meanwhile.
		notes = append(notes, "Acquire's cancel not checked: B was granted before it (A's lease ran out first)")
		release(r.Lease)
		release(la)
		actx, cancelA := context.WithTimeout(ctx, probeTimeout)
		la, err = traffic.Acquire(actx, a)
		cancelA()
		if err != nil {
			return Outcome{}, fmt.Errorf("holder A, again: %w", err)
		}
	case !errors.Is(r.Err, context.Canceled):
		broken = append(broken, fmt.Sprintf("Acquire whose context was cancelled returned %q, which does not wrap ctx.Err() (context.Canceled)", r.Err))
	}

	// 2. A stalls past its lease; B gets the lock; A releases its expired
	// lease, twice.
	_, _, declared := backends.TTLOf(a)
	applies := freeze != nil && freeze.Applies(ctx) == nil
	switch {
	case !applies && !declared:
		notes = append(notes, "Release of an expired lease not checked: "+faults.NoDial+", and it declares no TTL (backends.TTLer)")
		release(la)
		hold(0, askedA, startA)
	default:
		heal := func() error { return nil }
		if applies {
			if heal, err = fx.Log.Strike(ctx, freeze, true); err != nil {
				release(la)
				return Outcome{}, err
			}
		}
		lb, askedB, startB, err := fx.takeover(ctx, b, heal)
		switch {
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, traffic.ErrIgnoredContext):
			notes = append(notes, fmt.Sprintf("Release of an expired lease not checked: A's lease did not expire in %v while A stalled", fx.StallBound()))
			release(la)
			hold(0, askedA, startA)
		case err != nil:
			release(la)
			return Outcome{}, fmt.Errorf("holder B: %w", err)
		default:
			for i, what := range []string{"Release of an expired lease", "a second Release of an expired lease"} {
				rctx, cancel := context.WithTimeout(ctx, c.Bound)
				r := within(c.Bound, nil, func() (backends.Lease, error) { return nil, la.Release(rctx) })
				cancel()
				switch {
				case !r.Returned:
					broken = append(broken, fmt.Sprintf("%s did not return within %v", what, c.Bound))
				case r.panicked != nil:
					broken = append(broken, fmt.Sprintf("%s panicked: %v", what, r.panicked))
				case r.Err != nil:
					broken = append(broken, fmt.Sprintf("%s returned %q (it must return nil when the lock is no longer this lease's)", what, r.Err))
				}
				if i == 0 {
					hold(0, askedA, startA)
				}
			}
			// Harm: C must not get in while B holds the lock.
			cctx, cancel := context.WithTimeout(ctx, max(fx.TTL()/4, 20*time.Millisecond))
			askedC := rec.Now()
			lc, err := traffic.Acquire(cctx, cc)
			late := cctx.Err() != nil
			cancel()
			switch {
			case err == nil && late:
				// Granted after its context ended: no evidence about
				// Release, but a broken promise of Acquire.
				release(lc)
				broken = append(broken, "Acquire returned a lease after its context ended (once ctx is done it must return an error wrapping ctx.Err() and hold nothing)")
			case err == nil:
				startC := rec.Now()
				release(lc)
				hold(2, askedC, startC)
				broken = append(broken, "Release of an expired lease removed the next holder's lock: a third client acquired it while the second held it")
			case !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, traffic.ErrIgnoredContext):
				release(lb)
				return Outcome{}, fmt.Errorf("client C: %w", err)
			}
			release(lb)
			hold(1, askedB, startB)
		}
	}

	// 3. Acquire after Close; 4. a second Close.
	closeC := func() called {
		return within(c.Bound, nil, func() (backends.Lease, error) { return nil, cc.Close() })
	}
	if r := closeC(); !r.Returned || r.panicked != nil {
		broken = append(broken, fmt.Sprintf("Close did not return within %v, or panicked (%v)", c.Bound, r.panicked))
	} else {
		actx, cancel := context.WithTimeout(ctx, c.Bound)
		r := within(c.Bound, actx.Done(), func() (backends.Lease, error) { return cc.Acquire(actx) })
		late := actx.Err() != nil // it returned only once its context ended
		cancel()
		switch {
		case !r.Returned || late && !errors.Is(r.Err, backends.ErrClosed) && r.panicked == nil:
			broken = append(broken, fmt.Sprintf("Acquire after Close did not return backends.ErrClosed: it was still trying when its context ended after %v (%v)", c.Bound, r.Err))
		case r.panicked != nil:
			broken = append(broken, fmt.Sprintf("Acquire after Close panicked (it must return backends.ErrClosed): %v", r.panicked))
		case r.Err == nil:
			release(r.Lease)
			broken = append(broken, "Acquire after Close granted a lease (it must return backends.ErrClosed)")
		case !errors.Is(r.Err, backends.ErrClosed):
			broken = append(broken, fmt.Sprintf("Acquire after Close returned %q, which does not wrap backends.ErrClosed", r.Err))
		}
		switch r := closeC(); {
		case !r.Returned:
			broken = append(broken, fmt.Sprintf("a second Close did not return within %v", c.Bound))
		case r.panicked != nil:
			broken = append(broken, fmt.Sprintf("a second Close panicked: %v", r.panicked))
		case r.Err != nil:
			broken = append(broken, fmt.Sprintf("a second Close returned %q (closing twice must be harmless)", r.Err))
		}
	}
	// C is closed (or broken): the run's end does not close it again.
	fx.Lockers[2] = closedLocker{}

	res := &checker.Result{Verdict: checker.Kept}
	if len(broken) > 0 {
		res.Verdict = checker.Broken
		res.Reason = "the Locker breaks its contract (backends.Locker, backends.Lease): " + strings.Join(broken, "; ")
	}
	if len(notes) > 0 {
		res.Reason = strings.TrimPrefix(res.Reason+"; "+strings.Join(notes, "; "), "; ")
	}
	return Outcome{Elapsed: time.Since(t0), Result: res}, nil
}

// cancelSlack is how long after its context's cancel an Acquire may still
// return a grant (one that raced with the cancel).
const cancelSlack = 100 * time.Millisecond

// closedLocker stands for a Locker the contract closed itself.
type closedLocker struct{}

func (closedLocker) Acquire(context.Context) (backends.Lease, error) { return nil, backends.ErrClosed }
func (closedLocker) Close() error                                    { return nil }
