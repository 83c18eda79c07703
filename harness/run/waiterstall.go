package run

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/history"
	"github.com/locksuite/locksuite/harness/traffic"
	"github.com/locksuite/locksuite/internal/wait"
)

// WaiterStall is a waiter that outlives its session (Jepsen's etcd 3.4.3
// analysis, etcd#19597): A (client 0) holds the lock; B (client 1) waits in
// Acquire; the run's fault (a freeze of B) strikes while B waits and lasts
// past B's lease (twice its expiry, plus 500 ms); A releases; C (client 2)
// acquires and reads; the fault heals while C holds the lock, and C holds it
// for the settle more (a quarter of its lease, from 20 to 100 ms; less if
// B's Acquire returned), then writes and releases. The freeze strikes once
// B's path has carried its request (B sent bytes since it began to ask),
// and the settle after. B, once granted, reads and writes at
// once; A writes nothing.
//
// Kept: B's Acquire fails, or B is granted only after C's release. A B
// granted while C holds the lock reads what C read, and unfenced one of
// their two writes is lost; fenced, the older grant's read or write is
// rejected. The counter judges, and the reason says when B was granted
// against C's hold (and B's grant before A's release, which a lease that
// is not renewed allows once A's lease ran out: A writes nothing).
type WaiterStall struct{}

// Prepare makes A, B and C, each through its own path; B acquires and
// releases once, so that the freeze knows whether its path is used.
func (WaiterStall) Prepare(ctx context.Context, fx *Fixture) error {
	if err := fx.Clients(ctx, 3, true); err != nil {
		return err
	}
	if err := fx.Probe(ctx, 1); err != nil {
		return err
	}
	return fx.OpenStore(ctx, fx.Fenced)
}

func (WaiterStall) Planned(fx *Fixture) time.Duration {
	return waiterFrozen(fx) + fx.Expiry()
}

// waiterFrozen is how long B stays frozen: past its lease.
func waiterFrozen(fx *Fixture) time.Duration { return 2*fx.expiryOf(1) + 500*time.Millisecond }

func (WaiterStall) Run(ctx context.Context, fx *Fixture, f faults.Fault) (Outcome, error) {
	b, c, rec := fx.Lockers[1], fx.Lockers[2], fx.Rec
	t0 := time.Now()
	frozen := waiterFrozen(fx)
	bound := 2*probeTimeout + frozen + 2*fx.StallBound()
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()

	la, askedA, startA, err := fx.holdFree(ctx)
	if err != nil {
		return Outcome{}, err
	}

	// B waits for the lock, and writes as soon as it has it.
	sentB := sent(fx.Paths[1])
	var bGranted time.Duration
	bDone := make(chan error, 1)
	go func() {
		bDone <- traffic.Increment(ctx, 1, b, fx.Store, rec, 0, traffic.Hooks{
			Granted: func(backends.Lease) { bGranted = rec.Now() },
		})
	}()
	var (
		errB  error
		bOver bool
	)
	bReturned := func() bool {
		if bOver {
			return true
		}
		select {
		case errB = <-bDone:
			bOver = true
		default:
		}
		return bOver
	}
	waitAsked(ctx, fx, 1, sentB)
	heal, err := fx.Log.Strike(ctx, f, false)
	if err != nil {
		_ = la.Release(context.WithoutCancel(ctx))
		return Outcome{}, err
	}
	_ = wait.For(ctx, frozen)
	rctx, cancelR := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	errRelease := la.Release(rctx)
	cancelR()
	releasedA := rec.Now()
	rec.Add(history.Section{Client: 0, Asked: askedA, Start: startA, End: releasedA, Outcome: history.Aborted})
	if errRelease != nil {
		_ = heal()
		return Outcome{}, fmt.Errorf("holder A's Release: %w", errRelease)
	}

	// C takes the lock B's session no longer has a claim on; B resumes
	// while C holds it.
	var cStart, cEnd, healedAt time.Duration
	cctx, cancelC := context.WithTimeout(ctx, fx.StallBound())
	errC := traffic.Increment(cctx, 2, c, fx.Store, rec, 0, traffic.Hooks{
		Granted: func(backends.Lease) { cStart = rec.Now() },
		BeforeWrite: func(ctx context.Context) {
			_ = heal()
			healedAt = rec.Now()
			// Within C's lease (its Locker may not renew it): a waiter
			// that wrongly believes it holds the lock is granted as soon
			// as it hears the service again.
			deadline := time.Now().Add(settle(fx))
			for !bReturned() && time.Now().Before(deadline) && wait.For(ctx, 5*time.Millisecond) == nil {
			}
		},
		Released: func() { cEnd = rec.Now() },
	})
	cancelC()
	if err := heal(); err != nil {
		return Outcome{}, err
	}
	if healedAt == 0 {
		healedAt = rec.Now()
	}
	cIn := errC == nil || errors.Is(errC, fencing.ErrStale)
	if !cIn && !errorsIsAny(errC, context.DeadlineExceeded) {
		return Outcome{}, fmt.Errorf("client C: %w", errC)
	}
	if !bOver {
		errB = <-bDone
	}
	if errB != nil && !errors.Is(errB, fencing.ErrStale) && bGranted != 0 {
		return Outcome{}, fmt.Errorf("client B, granted: %w", errB)
	}

	note := waiterNote(bGranted, errB, releasedA, healedAt, cStart, cEnd, cIn, fx.TTL(), fx.StallBound())
	return Outcome{Elapsed: time.Since(t0), Note: note}, nil
}

// waiterNote says what became of B, the stalled waiter, against A's hold
// (until releasedA) and C's (cStart to cEnd; cIn false: C never got the
// lock within bound).
func waiterNote(bGranted time.Duration, errB error, releasedA, healed, cStart, cEnd time.Duration, cIn bool, ttl, bound time.Duration) string {
	var b string
	switch {
	case bGranted != 0 && bGranted < releasedA:
		b = fmt.Sprintf("B was granted %v before A released the lock (A's lease of %v may have run out: A writes nothing)", (releasedA - bGranted).Round(time.Millisecond), ttl)
	case bGranted == 0:
		b = fmt.Sprintf("B's Acquire failed after its freeze: %v", errB)
	case cIn && bGranted > cStart && bGranted < cEnd:
		b = fmt.Sprintf("B was granted %v after its freeze healed, while C held the lock (%v into C's hold)",
			(bGranted - healed).Round(time.Millisecond), (bGranted - cStart).Round(time.Millisecond))
	case cIn && bGranted >= cEnd:
		b = fmt.Sprintf("B was granted %v after C's release", (bGranted - cEnd).Round(time.Millisecond))
	default:
		b = fmt.Sprintf("B was granted %v after its freeze healed", (bGranted - healed).Round(time.Millisecond))
	}
	if !cIn {
		return fmt.Sprintf("C did not get the lock within %v after A's release: B's stalled wait kept it; %s", bound, b)
	}
	return b
}
