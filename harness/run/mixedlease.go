package run

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/traffic"
)

// MixedLease is two clients configured with different leases (fabric8's
// leader elector judged expiry by its own duration instead of the one
// stored in the Lease, fabric8 PR #7258): A (client 0) asks for a lease
// L of 4 × Setup.Lease, B (client 1) for Setup.Lease, L/4 (each a lease
// the lock takes: the Config's, and four times it). A acquires, reads,
// works for L/2 inside its lease, writes and releases; B asks right after
// A's grant and, once granted, reads and writes at once. Nothing is
// faulted.
//
// Kept: B is granted only after A's release, whoever judges expiry (the
// service, or each client by what it reads). A B that judges A's lease
// by its own shorter one takes the lock while A works: unfenced, A's write
// then overwrites B's; fenced, A's is rejected. The counter judges; the
// reason says when B was granted against A's hold.
type MixedLease struct{}

// Prepare makes A with lease 4 × Lease and B with Lease.
func (MixedLease) Prepare(ctx context.Context, fx *Fixture) error {
	if err := fx.ClientsLeased(ctx, []time.Duration{4 * fx.Lease, fx.Lease}, false); err != nil {
		return err
	}
	if fx.Fenced {
		if err := fx.Probe(ctx, 0); err != nil {
			return err
		}
	}
	return fx.OpenStore(ctx, fx.Fenced)
}

// Planned is A's work, half its lease.
func (MixedLease) Planned(fx *Fixture) time.Duration { return 2 * fx.Lease }

func (MixedLease) Run(ctx context.Context, fx *Fixture, _ faults.Fault) (Outcome, error) {
	a, b, rec := fx.Lockers[0], fx.Lockers[1], fx.Rec
	t0 := time.Now()
	work := 2 * fx.Lease // half of A's lease
	ctx, cancel := context.WithTimeout(ctx, 2*probeTimeout+work+fx.StallBound())
	defer cancel()
	var (
		aGranted, aWrote, bGranted time.Duration
		errB                       error
	)
	bDone := make(chan struct{})
	started := false
	errA := traffic.Increment(ctx, 0, a, fx.Store, rec, work, traffic.Hooks{
		Granted: func(backends.Lease) {
			aGranted = rec.Now()
			started = true
			go func() {
				defer close(bDone)
				errB = traffic.Increment(ctx, 1, b, fx.Store, rec, 0, traffic.Hooks{
					Granted: func(backends.Lease) { bGranted = rec.Now() },
				})
			}()
		},
	})
	for _, s := range rec.Sections() {
		if s.Client == 0 {
			aWrote = s.End // A's write returned; its release follows
		}
	}
	if started {
		<-bDone
	}
	switch {
	case errA != nil && !errors.Is(errA, fencing.ErrStale):
		return Outcome{}, fmt.Errorf("holder A: %w", errA)
	case errB != nil && !errors.Is(errB, fencing.ErrStale):
		return Outcome{}, fmt.Errorf("client B: %w", errB)
	}
	leaseA, leaseB := leaseOf(fx, 0, 4*fx.Lease), leaseOf(fx, 1, fx.Lease)
	var note string
	switch {
	case bGranted == 0:
		note = fmt.Sprintf("B (lease %v) was not granted", leaseB)
	case bGranted < aWrote:
		note = fmt.Sprintf("B (lease %v) was granted %v after A's grant, while A (lease %v) held the lock and worked", leaseB, (bGranted - aGranted).Round(time.Millisecond), leaseA)
	default:
		note = fmt.Sprintf("B (lease %v) was granted %v after A's write returned and A released (A, lease %v, held the lock %v)", leaseB, (bGranted - aWrote).Round(time.Millisecond), leaseA, (aWrote - aGranted).Round(time.Millisecond))
	}
	return Outcome{Elapsed: time.Since(t0), Note: note}, nil
}

// leaseOf is client i's declared TTL (backends.TTLOf), else asked.
func leaseOf(fx *Fixture, i int, asked time.Duration) time.Duration {
	if t, _, ok := backends.TTLOf(fx.Lockers[i]); ok {
		return t
	}
	return asked
}
