package run

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/locksuite/locksuite/harness/checker"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/history"
	"github.com/locksuite/locksuite/harness/traffic"
)

// ReleaseProbe checks the Lease contract that makes a stall survivable at
// all: a holder whose lease expired must not, when it wakes and releases,
// remove the next holder's lock. A (client 0) acquires and the run's fault
// (a freeze of A) stalls it until B gets the lock; the fault heals and A
// calls Release;
// then C tries to acquire for a quarter of the lease, while B still holds
// it. C getting in means A's Release deleted B's lock (a release without
// the ownership compare). It judges by itself: nobody writes.
type ReleaseProbe struct{}

func (ReleaseProbe) Prepare(ctx context.Context, fx *Fixture) error {
	if err := fx.Clients(ctx, 3, true); err != nil {
		return err
	}
	return fx.Probe(ctx, 0)
}

func (ReleaseProbe) Planned(fx *Fixture) time.Duration { return fx.Expiry() }

func (ReleaseProbe) Run(ctx context.Context, fx *Fixture, f faults.Fault) (Outcome, error) {
	a, b, c, rec := fx.Lockers[0], fx.Lockers[1], fx.Lockers[2], fx.Rec
	// The timeline: each client's hold, from Acquire returning to Release
	// (or the scenario's end), none of them writing.
	hold := func(id int, asked, start time.Duration) {
		rec.Add(history.Section{Client: id, Asked: asked, Start: start, End: rec.Now(), Outcome: history.Aborted})
	}
	t0 := time.Now()
	askedA := rec.Now()
	// A bound, for a Locker that never grants; long enough for the whole
	// scenario, in case the Lease depends on Acquire's context.
	actx, cancelA := context.WithTimeout(ctx, 2*probeTimeout+fx.StallBound())
	defer cancelA()
	la, err := traffic.Acquire(actx, a)
	if err != nil {
		return Outcome{}, fmt.Errorf("holder A: %w", err)
	}
	startA := rec.Now()
	heal, err := fx.Log.Strike(ctx, f, true)
	if err != nil {
		_ = la.Release(ctx)
		return Outcome{}, err
	}
	lb, askedB, startB, err := fx.takeover(ctx, b, heal)
	if err != nil {
		_ = la.Release(ctx)
		if errors.Is(err, context.DeadlineExceeded) {
			return Outcome{}, Skip("the lease did not expire while its holder stalled, so no second holder got in")
		}
		return Outcome{}, fmt.Errorf("holder B: %w", err)
	}
	defer lb.Release(context.WithoutCancel(ctx))
	if err := la.Release(ctx); err != nil {
		return Outcome{}, fmt.Errorf("holder A's late Release returned an error (it must return nil for a lease that is no longer its own): %w", err)
	}
	hold(0, askedA, startA)
	cctx, cancel := context.WithTimeout(ctx, max(fx.TTL()/4, 20*time.Millisecond))
	askedC := rec.Now()
	lc, err := traffic.Acquire(cctx, c)
	cancel()
	res := &checker.Result{Verdict: checker.Kept}
	switch {
	case err == nil:
		startC := rec.Now()
		_ = lc.Release(ctx)
		hold(2, askedC, startC)
		res.Verdict = checker.Broken
		res.Reason = "the expired holder's Release removed the next holder's lock: a third client acquired it while the second held it"
	case !errors.Is(err, context.DeadlineExceeded):
		return Outcome{}, fmt.Errorf("client C: %w", err)
	}
	hold(1, askedB, startB)
	return Outcome{Elapsed: time.Since(t0), Result: res}, nil
}
