package run

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/locksuite/locksuite/harness/checker"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/internal/wait"
)

// SplitBrain is Jepsen's split brain of a primary watched by Sentinels:
// client A (client 0) talks to the primary directly, as a client with its
// connections open does, and B (client 1) through the Sentinels. Both
// increment for Warm; then the run's fault strikes (the primary and A cut
// off from the replica, the Sentinels and B) until B has been granted
// (within Bound, 30 s if 0) and Hold has passed; both keep acquiring and
// writing; then the fault heals and both go on for After, while the old
// primary rejoins as a replica.
type SplitBrain struct {
	Options                  NodeOptions
	Warm, Hold, After, Bound time.Duration
}

func (l *SplitBrain) Prepare(ctx context.Context, fx *Fixture) error {
	err := fx.onNodes(ctx, 2, l.Options, func(p *Placed, leader, i int) []int {
		if i == 0 {
			return []int{leader}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(fx.Placed.Watchers) == 0 {
		return Skip("split-brain needs a primary failed over by watchers (Redis Sentinel): a consensus cluster has no primary that serves without a quorum; see isolate-leader")
	}
	return nil
}

func (l *SplitBrain) Planned(*Fixture) time.Duration {
	return l.Warm + l.Hold + l.After + 3*time.Second
}

func (l *SplitBrain) Run(ctx context.Context, fx *Fixture, f faults.Fault) (Outcome, error) {
	t0 := fx.Now()
	stop := make(chan struct{})
	failed := make([]atomic.Int64, 2)
	join := nodeLoop(ctx, fx, 2, stop, failed)
	end := sync.OnceFunc(func() { close(stop); join() })
	defer end()
	_ = wait.For(ctx, l.Warm)
	heal, err := fx.Log.Strike(ctx, f, false)
	if err != nil {
		return Outcome{}, fmt.Errorf("%s: %w", f.Span().What, err)
	}
	cutAt := fx.Now()
	awaitB(ctx, fx, cutAt, cmp.Or(l.Bound, recoveryBound))
	_ = wait.For(ctx, l.Hold)
	failedCut := [2]int64{failed[0].Load(), failed[1].Load()}
	if err := heal(); err != nil {
		return Outcome{}, fmt.Errorf("heal %s: %w", f.Span().What, err)
	}
	healed := fx.Now()
	_ = wait.For(ctx, l.After)
	end()
	health := healthAfter(ctx, fx, healed)
	d := fx.Now() - t0
	return Outcome{Elapsed: d, Amend: func(r *checker.Result) {
		secs := fx.Rec.Sections()
		b := grantAfter(secs, 1, cutAt)
		bs := "B was not granted during the cut"
		if b != 0 && b < healed {
			bs = fmt.Sprintf("B's side first granted %s after the cut", seconds(b-cutAt))
		} else if b != 0 {
			bs = fmt.Sprintf("B was first granted %s after the cut, %s after the heal", seconds(b-cutAt), seconds(b-healed))
		}
		as := "A was never granted during the cut"
		if a := lastGrant(secs, 0, cutAt, healed); a != 0 {
			as = fmt.Sprintf("A's last grant from the old primary %s after the cut", seconds(a-cutAt))
		}
		r.Reason = strings.TrimSpace(fmt.Sprintf("%s; %s; during the %s cut A got %s and %d failed attempts, B got %s and %d failed attempts; grants that overlapped: %d. %s",
			bs, as, seconds(healed-cutAt), during(secs, 0, cutAt, healed), failedCut[0], during(secs, 1, cutAt, healed), failedCut[1], grantOverlaps(secs), r.Reason))
	}, Row: func(r *report.Row) {
		r.Health = health
		availability(r, fx.Rec, d)
	}}, nil
}
