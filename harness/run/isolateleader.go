package run

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/harness/checker"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/traffic"
	"github.com/locksuite/locksuite/internal/wait"
)

// IsolateLeader: A (client 0) holds a lease granted through the leader (or
// primary) only; the run's fault (the leader and A cut off from the rest)
// strikes at once, before any renewal can reach the majority; A works on
// within its lease, by its own clock (it writes half its TTL after its
// grant), then keeps acquiring through the isolated leader; B (client 1)
// works through the majority from the cut on. The fault heals Hold after
// B's first grant (at most recoveryBound), and both go on for After.
type IsolateLeader struct {
	Hold, After time.Duration
}

func (l *IsolateLeader) Prepare(ctx context.Context, fx *Fixture) error {
	return fx.onNodes(ctx, 2, NodeOptions{}, func(p *Placed, leader, i int) []int {
		if i == 0 {
			return []int{leader}
		}
		var rest []int
		for m := range p.Members {
			if m != leader {
				rest = append(rest, m)
			}
		}
		if len(p.Watchers) > 0 {
			return nil // B finds the new primary through the Sentinels
		}
		return rest
	})
}

func (l *IsolateLeader) Planned(fx *Fixture) time.Duration { return fx.Expiry() + l.Hold + l.After }

func (l *IsolateLeader) Run(ctx context.Context, fx *Fixture, f faults.Fault) (Outcome, error) {
	t0 := fx.Now()
	var (
		heal      func() error
		cutAt     time.Duration
		granted   time.Duration
		strikeErr error
	)
	// A's first section: the fault strikes as soon as A is granted.
	err := traffic.Increment(ctx, 0, fx.Lockers[0], fx.Store, fx.Rec, fx.Work, traffic.Hooks{
		Granted: func(backends.Lease) {
			granted = fx.Now()
			heal, strikeErr = fx.Log.Strike(ctx, f, true)
			cutAt = fx.Now()
		},
		BeforeWrite: func(ctx context.Context) {
			_ = wait.For(ctx, granted+fx.TTL()/2-fx.Now())
		},
	})
	if strikeErr != nil {
		return Outcome{}, fmt.Errorf("%s: %w", f.Span().What, strikeErr)
	}
	if heal == nil {
		return Outcome{}, fmt.Errorf("A's first section through the leader: %w", err)
	}
	aFirst := "accepted"
	if err != nil {
		aFirst = err.Error()
	}
	stop := make(chan struct{})
	failed := make([]atomic.Int64, 2)
	join := nodeLoop(ctx, fx, 2, stop, failed)
	awaitB(ctx, fx, cutAt, recoveryBound)
	_ = wait.For(ctx, l.Hold)
	failedA := failed[0].Load()
	herr := heal()
	healed := fx.Now()
	if herr == nil {
		_ = wait.For(ctx, l.After)
	}
	close(stop)
	join()
	if herr != nil {
		return Outcome{}, fmt.Errorf("heal %s: %w", f.Span().What, herr)
	}
	health := healthAfter(ctx, fx, healed)
	d := fx.Now() - t0
	expiry := granted + fx.TTL()
	return Outcome{Elapsed: d, Amend: func(r *checker.Result) {
		secs := fx.Rec.Sections()
		b := grantAfter(secs, 1, cutAt)
		var bs string
		switch {
		case b == 0:
			bs = "B was never granted"
		case b < expiry:
			bs = fmt.Sprintf("B WAS GRANTED BEFORE A's LEASE EXPIRED: %s after the cut, %s before A's lease (granted %s before the cut, TTL %v) expired by the majority's clock", seconds(b-cutAt), seconds(expiry-b), seconds(cutAt-granted), fx.TTL())
		case b < healed:
			bs = fmt.Sprintf("B was granted %s after the cut, %s after A's lease (TTL %v) expired by the majority's clock", seconds(b-cutAt), seconds(b-expiry), fx.TTL())
		default:
			bs = fmt.Sprintf("B was granted only after the heal (%s after the cut)", seconds(b-cutAt))
		}
		r.Reason = strings.TrimSpace(fmt.Sprintf("%s; A's write inside its lease: %s; A through the isolated leader during the %s cut: %s and %d failed attempts; grants that overlapped: %d. %s",
			bs, aFirst, seconds(healed-cutAt), during(secs, 0, cutAt+time.Nanosecond, healed), failedA, grantOverlaps(secs), r.Reason))
	}, Row: func(r *report.Row) {
		r.Health = health
		availability(r, fx.Rec, d)
	}}, nil
}
