package run

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/harness/checker"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/history"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/traffic"
)

// Failover is the holder case across a failover: A acquires (after the
// fault's lag step, faults.LagStep, where replication is asynchronous) and
// reads; the run's fault (faults.LeaderKill) strikes before A writes; B
// tries to acquire, again and again through the failover. A waits until
// B's section is done, or until the service has recovered
// (faults.Recovery) and A's lease would have expired since (expiry + 1 s):
// a lease that survived that long survived the failover. A writes what it
// read and releases; B gets its turn if it has not had it.
type Failover struct {
	// Recovery bounds how long the service may take to fail over.
	Recovery time.Duration
}

func (l *Failover) Prepare(ctx context.Context, fx *Fixture) error {
	return fx.Standard(ctx, 2, false)
}

func (l *Failover) Planned(fx *Fixture) time.Duration { return fx.Expiry() + time.Second }

func (l *Failover) Run(ctx context.Context, fx *Fixture, f faults.Fault) (Outcome, error) {
	a, b, s, rec := fx.Lockers[0], fx.Lockers[1], fx.Store, fx.Rec
	if lg, ok := f.(faults.LagStep); ok {
		if err := lg.Lag(ctx); err != nil {
			return Outcome{}, err
		}
	}
	recovered := make(<-chan struct{})
	if r, ok := f.(faults.Recovery); ok {
		recovered = r.Recovered()
	}
	t0 := fx.Now()
	expiry := fx.Expiry()
	var (
		wg        sync.WaitGroup
		errB      error
		failedB   int
		faultErr  error
		hooked    bool
		bDone                        = make(chan struct{})
		cancelB   context.CancelFunc = func() {}
		waitedFor string
	)
	errA := traffic.Increment(ctx, 0, a, s, rec, 0, traffic.Hooks{BeforeWrite: func(ctx context.Context) {
		hooked = true
		if _, faultErr = fx.Log.Strike(ctx, f, false); faultErr != nil {
			close(bDone)
			return
		}
		var bctx context.Context
		bctx, cancelB = context.WithTimeout(ctx, l.Recovery+expiry+10*time.Second)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(bDone)
			failedB, errB = retrying(bctx, 1, b, s, rec, 0)
		}()
		// Wait for B, or for the lease to outlive the failover.
		select {
		case <-bDone:
			waitedFor = "B got in while A held its grant"
			return
		case <-recovered:
		case <-ctx.Done():
			return
		}
		select {
		case <-bDone:
			waitedFor = "B got in while A held its grant"
		case <-time.After(expiry + time.Second):
			waitedFor = fmt.Sprintf("A's lease outlived the failover by %v: B waited", expiry+time.Second)
		case <-ctx.Done():
		}
	}})
	if faultErr != nil {
		return Outcome{}, faultErr
	}
	if !hooked {
		return Outcome{}, fmt.Errorf("holder A: %w", errA)
	}
	// A has released: B gets its turn now if it has not had it.
	select {
	case <-bDone:
	case <-ctx.Done():
		cancelB()
	}
	wg.Wait()
	cancelB()
	d := fx.Now() - t0
	if errA != nil && !errors.Is(errA, fencing.ErrStale) {
		return Outcome{}, fmt.Errorf("holder A: %w", errA)
	}
	out := Outcome{Elapsed: d, Row: func(r *report.Row) {
		if failedB > 0 {
			r.Schedule += fmt.Sprintf(", B failed %d attempts", failedB)
		}
	}}
	if errB != nil {
		out.Result = &checker.Result{Verdict: checker.Unknown, Reason: fmt.Sprintf("B never completed a section after the failover (%d failed attempts): %v", failedB, errB)}
		return out, nil
	}
	out.Amend = func(res *checker.Result) {
		if waitedFor == "" {
			return
		}
		w := waitedFor
		if fa, fb := fences(rec.Sections()); fa != 0 && fb != 0 && fx.Fenced {
			w += fmt.Sprintf(" (fences: A %d, B %d)", fa, fb)
		}
		if res.Reason != "" {
			res.Reason += "; "
		}
		res.Reason += w
	}
	return out, nil
}

// fences are the fences of A's (client 0) and B's (client 1) first grants.
func fences(secs []history.Section) (a, b uint64) {
	for _, sec := range secs {
		switch {
		case sec.Client == 0 && a == 0:
			a = sec.Fence
		case sec.Client == 1 && b == 0:
			b = sec.Fence
		}
	}
	return a, b
}
