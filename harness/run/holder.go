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
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/traffic"
	"github.com/locksuite/locksuite/internal/wait"
)

// Holder is the faulted-holder case: holder A (client 0) acquires and
// reads; the run's fault strikes before A writes; B (client 1) runs one
// critical section within B's window; the fault heals; A writes what it
// read; B gets its turn then if it had none. Unfenced, a B let in while A
// still runs loses an update; fenced, the store rejects A's late write.
type Holder struct {
	// Hold, if not nil, is how long the fault lasts; B may try for Hold +
	// Window. Without it the fault lasts until B's section ends or its
	// Window has passed.
	Hold func(fx *Fixture) time.Duration
	// Window is how long B may try, asked once the fault is in place;
	// granted is when A's lease was granted. Nil: the stall bound
	// (Fixture.StallBound).
	Window func(fx *Fixture, granted time.Time) time.Duration
	// Health checks the lock service (Setup.Servers, if set) before the
	// fault and after it heals, into Row.Health.
	Health bool
	// Notes explains the run in its reason: when B got in, how long after
	// its grant A wrote, when A was told its lease was lost. Without it, a
	// run where B never got in says only that, and one where B got in says
	// when A was told (if its lease can tell: backends.LossNotifier).
	Notes bool
}

func (h *Holder) Prepare(ctx context.Context, fx *Fixture) error { return fx.Standard(ctx, 2, true) }

func (h *Holder) Planned(fx *Fixture) time.Duration { return fx.Expiry() }

func (h *Holder) Run(ctx context.Context, fx *Fixture, f faults.Fault) (Outcome, error) {
	r := newHolderRun(h, fx, f)
	ctx, cancel := r.bound(ctx)
	defer cancel()
	health, d, err := r.faulted(ctx)
	if err != nil {
		return Outcome{}, err
	}
	if !r.bIn { // B never got in while A held: it gets its turn now
		err := traffic.Increment(ctx, 1, fx.Lockers[1], fx.Store, fx.Rec, 0, traffic.Hooks{})
		if err != nil && !errors.Is(err, fencing.ErrStale) {
			return Outcome{}, fmt.Errorf("holder B after the fault: %w", err)
		}
	}
	return Outcome{Elapsed: d, Amend: r.amend, Row: func(row *report.Row) {
		row.PauseMS = r.faultFor.Milliseconds()
		row.Health = health
	}}, nil
}

func newHolderRun(h *Holder, fx *Fixture, f faults.Fault) *holderRun {
	r := &holderRun{Holder: h, fx: fx, f: f, lostAt: make(chan time.Time, 1)}
	if h.Hold != nil {
		r.hold = h.Hold(fx)
	}
	return r
}

// bound bounds the run, for a Locker that never grants a free lock.
func (r *holderRun) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, 2*probeTimeout+r.hold+r.fx.StallBound())
}

// faulted is A's section with the fault and B's try (sectionA), between
// the service's health checks (Holder.Health): it returns what they said
// and how long A's section took.
func (r *holderRun) faulted(ctx context.Context) (health string, d time.Duration, err error) {
	if health, err = r.healthBefore(ctx); err != nil {
		return "", 0, err
	}
	t0 := time.Now()
	if err := r.sectionA(ctx); err != nil {
		return "", 0, err
	}
	d = time.Since(t0)
	if r.Health && r.fx.Servers != nil {
		after, err := r.healthAfter(ctx)
		if err != nil {
			return "", 0, err
		}
		health += after
	}
	return health, d, nil
}

// holderRun is one run of a Holder: what happened to A and B.
type holderRun struct {
	*Holder
	fx   *Fixture
	f    faults.Fault
	hold time.Duration

	grantedAt, wroteAt time.Time // A's grant, and A's write once the fault healed
	bGrantedAt, told   time.Time // B's grant; when A's lease said it was lost
	aFence, bFence     uint64    // A's and B's fences
	lostAt             chan time.Time
	struck, bIn        bool // the fault struck; B got in while A held
	faultFor, bWaited  time.Duration
	faultErr, errB     error
}

// healthBefore checks the lock service before the fault, if asked.
func (r *holderRun) healthBefore(ctx context.Context) (string, error) {
	if !r.Health || r.fx.Servers == nil {
		return "", nil
	}
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := r.fx.Servers.Healthy(hctx); err != nil {
		return "", fmt.Errorf("the lock service is not healthy before the fault: %w", err)
	}
	return "ok before", nil
}

// healthAfter waits until the lock service is healthy after the heal.
func (r *holderRun) healthAfter(ctx context.Context) (string, error) {
	t := time.Now()
	err := faults.WaitHealthy(ctx, 20*time.Second, r.fx.Servers.Healthy)
	took := time.Since(t).Round(time.Millisecond)
	if err != nil {
		return "", fmt.Errorf("the lock service is not healthy %v after the fault healed: %w", took, err)
	}
	return fmt.Sprintf("; ok %v after", took), nil
}

// sectionA is A's critical section, with the fault and B's turn between
// its read and its write (beforeWrite); it returns why the run cannot be
// judged, if it cannot.
func (r *holderRun) sectionA(ctx context.Context) error {
	stopWatch := make(chan struct{})
	defer close(stopWatch)
	var wg sync.WaitGroup
	errA := traffic.Increment(ctx, 0, r.fx.Lockers[0], r.fx.Store, r.fx.Rec, 0, traffic.Hooks{
		Granted: func(l backends.Lease) { r.granted(l, stopWatch) },
		BeforeWrite: func(ctx context.Context) {
			defer func() { r.wroteAt = time.Now() }()
			r.beforeWrite(ctx, &wg)
		},
	})
	wg.Wait()
	switch {
	case r.faultErr != nil: // not applicable, or the fault could not be made
		return r.faultErr
	case errA != nil && !errors.Is(errA, fencing.ErrStale):
		return fmt.Errorf("holder A: %w", errA)
	case !r.struck:
		return errors.New("holder A never reached its write: the fault did not strike")
	case r.errB != nil && !errorsIsAny(r.errB, context.DeadlineExceeded, fencing.ErrStale):
		return fmt.Errorf("holder B: %w", r.errB)
	}
	return nil
}

// granted keeps A's lease (for a fault that needs it: Fixture.Lease0) and
// watches for its loss, if it can tell (backends.LossNotifier).
func (r *holderRun) granted(l backends.Lease, stop <-chan struct{}) {
	r.fx.lease, r.grantedAt, r.aFence = l, time.Now(), l.Fence()
	if n, ok := l.(backends.LossNotifier); ok {
		go func() {
			select {
			case <-n.Lost():
				r.lostAt <- time.Now()
			case <-stop:
			}
		}()
	}
}

// beforeWrite strikes the fault, lets B try for its window (healing the
// fault after Hold, if set), then heals it: whatever happens, a stopped
// server is continued.
func (r *holderRun) beforeWrite(ctx context.Context, wg *sync.WaitGroup) {
	start := time.Now()
	// The victim held the lock if the fault struck A, not the service.
	heal, err := r.fx.Log.Strike(ctx, r.f, r.f.Span().Lane == 0)
	if err != nil {
		r.faultErr = err
		return
	}
	r.struck = true
	doHeal := func() {
		if err := heal(); err != nil && r.faultErr == nil {
			r.faultErr = err
		}
		if r.faultFor == 0 {
			r.faultFor = time.Since(start)
		}
	}
	defer doHeal()
	bctx, cancel := context.WithTimeout(ctx, r.hold+r.window())
	defer cancel()
	bStart := time.Now()
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		r.errB = traffic.Increment(bctx, 1, r.fx.Lockers[1], r.fx.Store, r.fx.Rec, 0, traffic.Hooks{Granted: func(l backends.Lease) { r.bGrantedAt, r.bFence = time.Now(), l.Fence() }})
	}()
	if r.hold > 0 {
		_ = wait.For(ctx, r.hold)
		doHeal()
	}
	select {
	case <-done:
		r.bIn = r.errB == nil || errors.Is(r.errB, fencing.ErrStale)
	case <-bctx.Done():
	}
	r.bWaited = time.Since(bStart)
	doHeal()
	select { // what A knew as B's turn ended, before its write
	case r.told = <-r.lostAt:
	default:
	}
}

// window is how long B may try once the fault is in place.
func (r *holderRun) window() time.Duration {
	if r.Window == nil {
		return r.fx.StallBound()
	}
	return r.Window(r.fx, r.grantedAt)
}

// amend says in the result's reason what happened (Holder.Notes).
func (r *holderRun) amend(res *checker.Result) {
	_, notifies := r.fx.lease.(backends.LossNotifier)
	if !r.Notes {
		if !r.bIn && res.Verdict == checker.Kept {
			res.Reason = fmt.Sprintf("the lease did not expire within the %v stall: B waited", r.hold+r.window())
		}
		if notifies && r.bIn {
			res.Reason = strings.TrimPrefix(res.Reason+"; "+toldNote(r.told, r.bGrantedAt), "; ")
		}
		return
	}
	var notes []string
	if res.Reason != "" {
		notes = append(notes, res.Reason)
	}
	if r.bIn {
		notes = append(notes, fmt.Sprintf("B got the lock and wrote %v into the fault", r.bWaited.Round(time.Millisecond)))
	} else {
		notes = append(notes, fmt.Sprintf("the lease held: B waited %v in vain", r.bWaited.Round(time.Millisecond)))
	}
	notes = append(notes, fmt.Sprintf("A wrote %v after its grant (lease %v)", r.wroteAt.Sub(r.grantedAt).Round(time.Millisecond), r.fx.TTL()))
	if notifies {
		notes = append(notes, toldNote(r.told, r.bGrantedAt))
	}
	res.Reason = strings.Join(notes, "; ")
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
