package run

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/harness/checker"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/history"
	"github.com/locksuite/locksuite/harness/load"
	"github.com/locksuite/locksuite/harness/report"
)

// Loop is Clients in-process clients incrementing for For. With Lockers
// set, those are the clients instead (the control's lock that grants
// everyone) and the counter is unfenced. With Retry, each client tries
// again after an error (a failover makes requests fail until the service
// has a new leader). A fault, if any, strikes at For/2 and lasts until the
// load ends; a fault with a Lag step (faults.LeaderKill) lags LagLead
// before it strikes.
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

func (l *Loop) Prepare(ctx context.Context, e *Env) error {
	if l.Lockers != nil {
		e.Lockers = nil
		return e.OpenStore(ctx, false)
	}
	return e.Standard(ctx, l.Clients, false)
}

func (l *Loop) Planned(*Env) time.Duration { return l.For }

// lagger is a fault with a step before it strikes (faults.LeaderKill).
type lagger interface{ Lag(context.Context) error }

func (l *Loop) Run(ctx context.Context, e *Env, f faults.Fault) (Outcome, error) {
	lockers := e.Lockers
	if l.Lockers != nil {
		lockers = l.Lockers
	}
	if f == nil && !l.Retry {
		t0 := time.Now()
		err := load.Run(ctx, lockers, e.Store, e.Rec, l.Work, l.For)
		out := Outcome{Elapsed: time.Since(t0)}
		if l.Lockers != nil {
			out.Row = func(r *report.Row) { r.LeaseMS = 0 } // not the backend's lock
		}
		return out, err
	}
	t0 := e.Now()
	lctx, stop := context.WithTimeout(ctx, l.For)
	defer stop()
	var (
		mu     sync.Mutex
		failed int
	)
	wait := load.Clients(lctx, lockers, func(id int, lk backends.Locker) bool {
		n, _ := retrying(lctx, id, lk, e.Store, e.Rec, l.Work)
		mu.Lock()
		failed += n
		mu.Unlock()
		return true
	})
	var faultErr error
	if f != nil {
		lead := time.Duration(0)
		lg, lags := f.(lagger)
		if lags {
			lead = LagLead
		}
		select {
		case <-time.After(l.For/2 - lead):
			if lags {
				faultErr = lg.Lag(ctx)
			}
		case <-ctx.Done():
		}
		if faultErr == nil {
			select {
			case <-time.After(lead):
				_, faultErr = e.Log.Strike(ctx, f, false)
			case <-ctx.Done():
			}
		}
	}
	wait()
	if faultErr != nil {
		return Outcome{}, fmt.Errorf("suite: %s: %w", e.Backend, faultErr)
	}
	d := e.Now() - t0
	return Outcome{Elapsed: d, Row: func(r *report.Row) {
		if r.Schedule != "" {
			r.Schedule += fmt.Sprintf(", %d failed attempts", failed)
		}
		availability(r, e.Rec, d)
	}}, nil
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
		err := load.Increment(ctx, id, l, s, rec, work, load.Hooks{})
		if err == nil || errors.Is(err, fencing.ErrStale) {
			return failed, nil
		}
		if ctx.Err() != nil {
			return failed, err
		}
		failed++
		select {
		case <-ctx.Done():
			return failed, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Holder is the faulted-holder case: holder A (client 0) acquires and
// reads; the fault strikes before A writes; B (client 1) runs one critical
// section within B's window; the fault heals; A writes what it read; B
// gets its turn then if it had none. Unfenced, a B let in while A still
// runs loses an update; fenced, the store rejects A's late write.
type Holder struct {
	// Hold, if not nil, is how long the fault lasts; B may try for Hold +
	// Window. Without it the fault lasts until B's section ends or its
	// Window has passed.
	Hold func(e *Env) time.Duration
	// Window is how long B may try, asked once the fault is in place;
	// granted is when A's lease was granted. Nil: the stall bound
	// (Env.StallBound).
	Window func(e *Env, granted time.Time) time.Duration
	// Health checks the lock service (Setup.Service, if set) before the
	// fault and after it heals, into Row.Health.
	Health bool
	// Notes explains the run in its reason: when B got in, how long after
	// its grant A wrote, when A was told its lease was lost. Without it, a
	// run where B never got in says only that, and one where B got in says
	// when A was told (if its lease can tell: backends.LossNotifier).
	Notes bool
}

func (h *Holder) Prepare(ctx context.Context, e *Env) error { return e.Standard(ctx, 2, true) }

func (h *Holder) Planned(e *Env) time.Duration { return e.Expiry() }

func (h *Holder) Run(ctx context.Context, e *Env, f faults.Fault) (Outcome, error) {
	a, b, s, rec := e.Lockers[0], e.Lockers[1], e.Store, e.Rec
	health := ""
	if h.Health && e.Service != nil {
		hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := e.Service.Healthy(hctx)
		cancel()
		if err != nil {
			return Outcome{}, fmt.Errorf("suite: %s: the lock service is not healthy before the fault: %w", e.Backend, err)
		}
		health = "ok before"
	}
	hold := time.Duration(0)
	if h.Hold != nil {
		hold = h.Hold(e)
	}
	window := h.Window
	if window == nil {
		window = func(e *Env, _ time.Time) time.Duration { return e.StallBound() }
	}
	t0 := time.Now()
	// A bound on the whole, for a Locker that never grants a free lock.
	ctx, cancel := context.WithTimeout(ctx, 2*probeTimeout+hold+e.StallBound())
	defer cancel()
	var (
		wg                 sync.WaitGroup
		grantedAt, wroteAt time.Time
		errB, faultErr     error
		bWaited, faultFor  time.Duration
		bIn, struck        bool
		bGrantedAt, told   time.Time // B's grant; when A's lease said it was lost
	)
	lostAt := make(chan time.Time, 1) // when A's Lost fired, from its watcher
	stopWatch := make(chan struct{})
	defer close(stopWatch)
	errA := load.Increment(ctx, 0, a, s, rec, 0, load.Hooks{
		Granted: func(l backends.Lease) {
			e.lease, grantedAt = l, time.Now()
			if n, ok := l.(backends.LossNotifier); ok {
				go func() {
					select {
					case <-n.Lost():
						lostAt <- time.Now()
					case <-stopWatch:
					}
				}()
			}
		},
		BeforeWrite: func(ctx context.Context) {
			defer func() { wroteAt = time.Now() }()
			start := time.Now()
			// The victim held the lock if the fault struck A, not the service.
			heal, err := e.Log.Strike(ctx, f, f.Span().Lane == 0)
			if err != nil {
				faultErr = err
				return
			}
			struck = true
			doHeal := func() {
				if err := heal(); err != nil && faultErr == nil {
					faultErr = err
				}
				if faultFor == 0 {
					faultFor = time.Since(start)
				}
			}
			defer doHeal() // whatever happens, a stopped server is continued
			bctx, cancel := context.WithTimeout(ctx, hold+window(e, grantedAt))
			defer cancel()
			bStart := time.Now()
			done := make(chan struct{})
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer close(done)
				errB = load.Increment(bctx, 1, b, s, rec, 0, load.Hooks{Granted: func(backends.Lease) { bGrantedAt = time.Now() }})
			}()
			if hold > 0 {
				select {
				case <-time.After(hold):
				case <-ctx.Done():
				}
				doHeal()
			}
			select {
			case <-done:
				bIn = errB == nil || errors.Is(errB, fencing.ErrStale)
			case <-bctx.Done():
			}
			bWaited = time.Since(bStart)
			doHeal()
			select { // what A knew as B's turn ended, before its write
			case told = <-lostAt:
			default:
			}
		}})
	wg.Wait()
	d := time.Since(t0)
	if faultErr != nil { // not applicable, or the fault could not be made
		if errors.Is(faultErr, faults.ErrNotApplicable) {
			return Outcome{}, faultErr
		}
		return Outcome{}, fmt.Errorf("suite: %s: %w", e.Backend, faultErr)
	}
	if errA != nil && !errors.Is(errA, fencing.ErrStale) {
		return Outcome{}, fmt.Errorf("holder A: %w", errA)
	}
	if !struck {
		return Outcome{}, fmt.Errorf("suite: %s: holder A never reached its write: the fault did not strike", e.Backend)
	}
	if secs := rec.Sections(); e.Fenced && len(secs) > 0 && secs[0].Fence == 0 {
		return Outcome{}, Skip(noFence)
	}
	if errB != nil && !errorsIsAny(errB, context.DeadlineExceeded, fencing.ErrStale) {
		return Outcome{}, fmt.Errorf("holder B: %w", errB)
	}
	if h.Health && e.Service != nil {
		t := time.Now()
		err := faults.WaitHealthy(ctx, 20*time.Second, e.Service.Healthy)
		took := time.Since(t).Round(time.Millisecond)
		if err != nil {
			return Outcome{}, fmt.Errorf("suite: %s: the lock service is not healthy %v after the fault healed: %w", e.Backend, took, err)
		}
		health += fmt.Sprintf("; ok %v after", took)
	}
	if !bIn { // B never got in while A held: it gets its turn now
		if err := load.Increment(ctx, 1, b, s, rec, 0, load.Hooks{}); err != nil && !errors.Is(err, fencing.ErrStale) {
			return Outcome{}, fmt.Errorf("holder B after the fault: %w", err)
		}
	}
	ttl := e.TTL()
	amend := func(res *checker.Result) {
		if !h.Notes {
			if !bIn && res.Verdict == checker.Kept {
				res.Reason = fmt.Sprintf("the lease did not expire within the %v stall: B waited", hold+window(e, grantedAt))
			}
			if _, ok := e.lease.(backends.LossNotifier); ok && bIn {
				res.Reason = strings.TrimPrefix(res.Reason+"; "+toldNote(told, bGrantedAt), "; ")
			}
			return
		}
		var notes []string
		if res.Reason != "" {
			notes = append(notes, res.Reason)
		}
		if bIn {
			notes = append(notes, fmt.Sprintf("B got the lock and wrote %v into the fault", bWaited.Round(time.Millisecond)))
		} else {
			notes = append(notes, fmt.Sprintf("the lease held: B waited %v in vain", bWaited.Round(time.Millisecond)))
		}
		notes = append(notes, fmt.Sprintf("A wrote %v after its grant (lease %v)", wroteAt.Sub(grantedAt).Round(time.Millisecond), ttl))
		if _, ok := e.lease.(backends.LossNotifier); ok {
			notes = append(notes, toldNote(told, bGrantedAt))
		}
		res.Reason = strings.Join(notes, "; ")
	}
	return Outcome{Elapsed: d, Amend: amend, Row: func(r *report.Row) {
		r.PauseMS = faultFor.Milliseconds()
		r.Health = health
	}}, nil
}

// toldNote says when A's lease reported itself lost (Lost fired: told),
// against B's grant (bGranted), the moment the service showed that A's
// lease had run out. Zero times: never told; B never got in.
func toldNote(told, bGranted time.Time) string {
	switch {
	case told.IsZero() && bGranted.IsZero():
		return "A had not been told its lease was lost"
	case told.IsZero():
		return "A had not been told its lease was lost by the end of B's turn"
	case bGranted.IsZero():
		return "A's lease had reported itself lost"
	case told.After(bGranted):
		return fmt.Sprintf("A was told its lease was lost %v after B got the lock", told.Sub(bGranted).Round(time.Millisecond))
	default:
		return fmt.Sprintf("A was told its lease was lost %v before B got the lock", bGranted.Sub(told).Round(time.Millisecond))
	}
}

// Failover is the holder case across a failover: A acquires (after the
// fault's Lag step, where replication is asynchronous) and reads; the fault
// (faults.LeaderKill) strikes before A writes; B tries to acquire, again
// and again through the failover. A waits until B's section is done, or
// until the service is healthy again and A's lease would have expired
// since (expiry + 1 s): a lease that survived that long survived the
// failover. A writes what it read and releases; B gets its turn if it has
// not had it.
type Failover struct {
	// Recovery bounds how long the service may take to fail over.
	Recovery time.Duration
}

func (l *Failover) Prepare(ctx context.Context, e *Env) error { return e.Standard(ctx, 2, false) }

func (l *Failover) Planned(e *Env) time.Duration { return e.Expiry() + time.Second }

func (l *Failover) Run(ctx context.Context, e *Env, f faults.Fault) (Outcome, error) {
	a, b, s, rec := e.Lockers[0], e.Lockers[1], e.Store, e.Rec
	if lg, ok := f.(lagger); ok {
		if err := lg.Lag(ctx); err != nil {
			return Outcome{}, fmt.Errorf("suite: %s: %w", e.Backend, err)
		}
	}
	recovered := make(<-chan struct{})
	if r, ok := f.(interface{ Recovered() <-chan struct{} }); ok {
		recovered = r.Recovered()
	}
	t0 := e.Now()
	expiry := e.Expiry()
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
	errA := load.Increment(ctx, 0, a, s, rec, 0, load.Hooks{BeforeWrite: func(ctx context.Context) {
		hooked = true
		if _, faultErr = e.Log.Strike(ctx, f, false); faultErr != nil {
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
		return Outcome{}, fmt.Errorf("suite: %s: %w", e.Backend, faultErr)
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
	d := e.Now() - t0
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
		if fa, fb := fences(rec.Sections()); fa != 0 && fb != 0 && e.Fenced {
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

// ReleaseProbe checks the Lease contract that makes a stall survivable at
// all: a holder whose lease expired must not, when it wakes and releases,
// remove the next holder's lock. A (client 0) acquires and the fault
// stalls it until B gets the lock; the fault heals and A calls Release;
// then C tries to acquire for a quarter of the lease, while B still holds
// it. C getting in means A's Release deleted B's lock (a release without
// the ownership compare). It judges by itself: nobody writes.
type ReleaseProbe struct{}

func (ReleaseProbe) Prepare(ctx context.Context, e *Env) error {
	if err := e.Clients(ctx, 3, true); err != nil {
		return err
	}
	return e.Probe(ctx, 0)
}

func (ReleaseProbe) Planned(e *Env) time.Duration { return e.Expiry() }

func (ReleaseProbe) Run(ctx context.Context, e *Env, f faults.Fault) (Outcome, error) {
	a, b, c, rec := e.Lockers[0], e.Lockers[1], e.Lockers[2], e.Rec
	// The timeline: each client's hold, from Acquire returning to Release
	// (or the scenario's end), none of them writing.
	hold := func(id int, asked, start time.Duration) {
		rec.Add(history.Section{Client: id, Asked: asked, Start: start, End: rec.Now(), Outcome: history.Aborted})
	}
	t0 := time.Now()
	askedA := rec.Now()
	// A bound, for a Locker that never grants; long enough for the whole
	// scenario, in case the Lease depends on Acquire's context.
	actx, cancelA := context.WithTimeout(ctx, 2*probeTimeout+e.StallBound())
	defer cancelA()
	la, err := load.Acquire(actx, a)
	if err != nil {
		return Outcome{}, fmt.Errorf("holder A: %w", err)
	}
	startA := rec.Now()
	heal, err := e.Log.Strike(ctx, f, true)
	if err != nil {
		_ = la.Release(ctx)
		return Outcome{}, err
	}
	lb, askedB, startB, err := e.takeover(ctx, b, heal)
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
	cctx, cancel := context.WithTimeout(ctx, max(e.TTL()/4, 20*time.Millisecond))
	askedC := rec.Now()
	lc, err := load.Acquire(cctx, c)
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
