package run

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/history"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/traffic"
	"github.com/locksuite/locksuite/internal/wait"
)

// Loop is Clients in-process clients incrementing for For. With Lockers
// set, those are the clients instead (the control's lock that grants
// everyone) and the counter is unfenced. With Retry, each client tries
// again after an error (a failover makes requests fail until the service
// has a new leader). The run's fault, if any, strikes at For/2 and lasts
// until the load ends; a fault with a lag step (faults.LagStep) lags
// LagLead before it strikes.
type Loop struct {
	Clients int
	For     time.Duration
	Work    time.Duration
	Lockers []backends.Locker
	Retry   bool
}

// LagLead is how long before a LeaderKill strikes a Loop makes the
// replicas lag: a replica stopped longer would no longer be eligible for
// promotion.
const LagLead = 200 * time.Millisecond

func (l *Loop) Prepare(ctx context.Context, fx *Fixture) error {
	if l.Lockers != nil {
		fx.Lockers = nil
		return fx.OpenStore(ctx, false)
	}
	return fx.Standard(ctx, l.Clients, false)
}

func (l *Loop) Planned(*Fixture) time.Duration { return l.For }

func (l *Loop) Run(ctx context.Context, fx *Fixture, f faults.Fault) (Outcome, error) {
	lockers := fx.Lockers
	if l.Lockers != nil {
		lockers = l.Lockers
	}
	if f == nil && !l.Retry {
		t0 := time.Now()
		err := traffic.Run(ctx, lockers, fx.Store, fx.Rec, l.Work, l.For)
		out := Outcome{Elapsed: time.Since(t0)}
		if l.Lockers != nil {
			out.Row = func(r *report.Row) { r.LeaseMS = 0 } // not the backend's lock
		}
		return out, err
	}
	t0 := fx.Now()
	lctx, stop := context.WithTimeout(ctx, l.For)
	defer stop()
	var (
		mu     sync.Mutex
		failed int
	)
	join := traffic.Clients(lctx, lockers, func(id int, lk backends.Locker) bool {
		n, _ := retrying(lctx, id, lk, fx.Store, fx.Rec, l.Work)
		mu.Lock()
		failed += n
		mu.Unlock()
		return true
	})
	var faultErr error
	if f != nil {
		faultErr = strikeHalfway(ctx, fx, f, l.For)
	}
	join()
	if faultErr != nil {
		return Outcome{}, faultErr
	}
	d := fx.Now() - t0
	return Outcome{Elapsed: d, Row: func(r *report.Row) {
		if r.Schedule != "" {
			r.Schedule += fmt.Sprintf(", %d failed attempts", failed)
		}
		availability(r, fx.Rec, d)
	}}, nil
}

// strikeHalfway strikes f at d/2, after its lag step (faults.LagStep)
// LagLead before; the fault lasts until the load ends.
func strikeHalfway(ctx context.Context, fx *Fixture, f faults.Fault, d time.Duration) error {
	lead := time.Duration(0)
	lg, lags := f.(faults.LagStep)
	if lags {
		lead = LagLead
	}
	if wait.For(ctx, d/2-lead) != nil {
		return nil
	}
	if lags {
		if err := lg.Lag(ctx); err != nil {
			return err
		}
	}
	if wait.For(ctx, lead) != nil {
		return nil
	}
	_, err := fx.Log.Strike(ctx, f, false)
	return err
}

// availability sets the row's accepted writes per second and the longest
// any client waited for the lock.
func availability(r *report.Row, rec *history.Recorder, d time.Duration) {
	if d > 0 {
		r.WritesPerSec = float64(r.Writes) / d.Seconds()
	}
	var maxWait time.Duration
	for _, sec := range rec.Sections() {
		maxWait = max(maxWait, sec.Start-sec.Asked)
	}
	r.MaxWaitMS = maxWait.Milliseconds()
}

// retrying runs one critical section of client id until it is accepted or
// rejected as stale, or ctx is done, trying again after errors. It returns
// the last error when ctx ends first, and how many attempts failed.
func retrying(ctx context.Context, id int, l backends.Locker, s fencing.Store, rec *history.Recorder, work time.Duration) (int, error) {
	failed := 0
	for {
		err := traffic.Increment(ctx, id, l, s, rec, work, traffic.Hooks{})
		if err == nil || errors.Is(err, fencing.ErrStale) {
			return failed, nil
		}
		if ctx.Err() != nil {
			return failed, err
		}
		failed++
		if wait.For(ctx, 50*time.Millisecond) != nil {
			return failed, err
		}
	}
}
