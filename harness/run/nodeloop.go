package run

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/locksuite/locksuite/harness/checker"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/nodes"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/internal/wait"
)

// NodeLoop is Jepsen's load under random partitions: Clients clients, each
// on a node of its own, increment through the service's own discovery
// (each attempt bounded, tried again after an error) for For, and for as
// long as the run's schedule lasts (Fixture.Schedule: the partitions,
// each a span of the row's schedule and a band on the timeline).
type NodeLoop struct {
	Clients int
	For     time.Duration
}

func (l *NodeLoop) Prepare(ctx context.Context, fx *Fixture) error {
	return fx.onNodes(ctx, l.Clients, NodeOptions{}, nil)
}

func (l *NodeLoop) Planned(fx *Fixture) time.Duration { return max(l.For, fx.Schedule.End()) }

// Run ignores f: a NodeLoop's faults are its schedule's.
func (l *NodeLoop) Run(ctx context.Context, fx *Fixture, _ faults.Fault) (Outcome, error) {
	t0 := fx.Now()
	stop := make(chan struct{})
	failed := make([]atomic.Int64, l.Clients)
	join := nodeLoop(ctx, fx, l.Clients, stop, failed)
	_ = wait.For(ctx, l.Planned(fx)-(fx.Now()-fx.T0))
	ended := fx.Now()
	close(stop)
	join()
	health := healthAfter(ctx, fx, ended)
	d := fx.Now() - t0
	return Outcome{Elapsed: d, Amend: func(r *checker.Result) {
		var f int64
		for i := range failed {
			f += failed[i].Load()
		}
		r.Reason = strings.TrimSpace(fmt.Sprintf("clients on %s; %d failed attempts; grants that overlapped: %d. %s",
			nodes.Names(fx.ClientNodes), f, grantOverlaps(fx.Rec.Sections()), r.Reason))
	}, Row: func(r *report.Row) {
		r.Health, r.Workers = health, l.Clients
		availability(r, fx.Rec, d)
	}}, nil
}
