package run

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/traffic"
)

// ReleaseRace races every release against several waiters and fresh
// clients (nats.rs#1301: a KV Create after a Delete made with a plain put,
// so that two creators both won): Waiters clients loop acquire → read →
// write +1 → release with no work between, for For, while Fresh more
// goroutines each make a new Locker, run one critical section with it and
// close it, over and over: every release is raced by waiters already
// asking and by a client asking for the first time. Nothing is faulted.
//
// Kept: never two grants live at once; the counter and the
// linearizability check judge, as in the baseline.
type ReleaseRace struct {
	Waiters, Fresh int
	For            time.Duration
}

func (r *ReleaseRace) Prepare(ctx context.Context, fx *Fixture) error {
	return fx.Standard(ctx, r.Waiters, false)
}

func (r *ReleaseRace) Planned(*Fixture) time.Duration { return r.For }

func (r *ReleaseRace) Run(ctx context.Context, fx *Fixture, _ faults.Fault) (Outcome, error) {
	t0 := fx.Now()
	lctx, stop := context.WithTimeout(ctx, r.For)
	defer stop()
	var (
		fresh atomic.Int64
		mu    sync.Mutex
		first error
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
			stop()
		}
		mu.Unlock()
	}
	section := func(id int, l backends.Locker) bool {
		err := traffic.Increment(lctx, id, l, fx.Store, fx.Rec, 0, traffic.Hooks{})
		if err != nil && !errors.Is(err, fencing.ErrStale) && lctx.Err() == nil {
			fail(err)
			return false
		}
		return lctx.Err() == nil
	}
	join := traffic.Clients(lctx, fx.Lockers, func(id int, l backends.Locker) bool { return section(id, l) })
	var wg sync.WaitGroup
	for k := range r.Fresh {
		id := r.Waiters + k // one lane per fresh goroutine
		wg.Add(1)
		go func() {
			defer wg.Done()
			for lctx.Err() == nil {
				l, err := fx.NewLocker(lctx, id, directDial, fx.Lease)
				if err != nil {
					if lctx.Err() == nil {
						fail(fmt.Errorf("NewLocker for a fresh client: %w", err))
					}
					return
				}
				fresh.Add(1)
				ok := section(id, l)
				_ = l.Close()
				if !ok {
					return
				}
			}
		}()
	}
	wg.Wait()
	join()
	if first != nil {
		return Outcome{}, first
	}
	d := fx.Now() - t0
	return Outcome{Elapsed: d, Row: func(row *report.Row) {
		availability(row, fx.Rec, d)
	}, Note: fmt.Sprintf("%d waiters and %d fresh clients (%d Lockers made and closed)", r.Waiters, r.Fresh, fresh.Load())}, nil
}
