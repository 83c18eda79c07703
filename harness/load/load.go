// Package load drives clients through critical sections: acquire, read the
// counter, work, write the counter + 1, release. It records every section in
// a history.Recorder and judges nothing; the checker does that.
package load

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/harness/history"
)

// Hooks let a caller act at points of a critical section: to inject a fault
// or to report progress. Nil fields are skipped.
type Hooks struct {
	// Granted runs right after Acquire returned the lease, before the read:
	// for a fault that needs the lease itself (its session, its notices).
	Granted func(backends.Lease)
	// Read runs after the read succeeded: from here to the write, a stall
	// that outlives the lease loses the updates made meanwhile.
	Read func()
	// BeforeWrite runs between the work and the write: where a stall hurts.
	BeforeWrite func(ctx context.Context)
	// Released runs after Release.
	Released func()
}

// StepError is an error of one step of a critical section: the lock's
// Acquire ("acquire"), or the store's Read ("read") or Write ("write"), so
// that a caller can tell which service failed.
type StepError struct {
	Client int
	Step   string
	Err    error
}

func (e *StepError) Error() string { return fmt.Sprintf("client %d: %s: %v", e.Client, e.Step, e.Err) }
func (e *StepError) Unwrap() error { return e.Err }

// Increment runs one critical section of client id: it acquires l, reads s,
// waits work, writes read+1 with the lease's fence, and releases.
//
// Errors of Acquire, Read and Write are *StepError. On a stale read or
// write (fencing.ErrStale) the section is recorded as Rejected and
// Increment returns fencing.ErrStale: the caller must acquire, read and
// compute again, never replay the value.
func Increment(ctx context.Context, id int, l backends.Locker, s fencing.Store, rec *history.Recorder, work time.Duration, h Hooks) error {
	asked := rec.Now()
	lease, err := l.Acquire(ctx)
	if err != nil {
		return &StepError{id, "acquire", err}
	}
	sec := history.Section{Client: id, Asked: asked, Start: rec.Now(), Fence: lease.Fence(), Outcome: history.Aborted}
	if h.Granted != nil {
		h.Granted(lease)
	}
	defer func() {
		if sec.End == 0 {
			sec.End = rec.Now()
		}
		rec.Add(sec)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = lease.Release(rctx)
		if h.Released != nil {
			h.Released()
		}
	}()
	v, err := s.Read(ctx, lease.Fence())
	if errors.Is(err, fencing.ErrStale) {
		sec.End, sec.Outcome = rec.Now(), history.Rejected
		return fencing.ErrStale
	}
	if err != nil {
		return &StepError{id, "read", err}
	}
	sec.Read = v
	if h.Read != nil {
		h.Read()
	}
	if work > 0 {
		select {
		case <-time.After(work):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if h.BeforeWrite != nil {
		h.BeforeWrite(ctx)
	}
	sec.Wrote = v + 1
	// The write is the one step that must not be cut short by the run's
	// end: a write abandoned mid-flight would be ambiguous.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err = s.Write(wctx, v+1, lease.Fence())
	sec.End = rec.Now()
	switch {
	case err == nil:
		sec.Outcome = history.Accepted
	case errors.Is(err, fencing.ErrStale):
		sec.Outcome = history.Rejected
		return fencing.ErrStale
	default:
		sec.Outcome = history.Failed
		return &StepError{id, "write", err}
	}
	return nil
}

// Run makes each Locker a client that increments in a loop until ctx is done
// or d has passed, whichever is first. A stale write is followed by a fresh
// section (re-acquire, re-read). It returns the first error other than the
// run ending and stale writes.
func Run(ctx context.Context, lockers []backends.Locker, s fencing.Store, rec *history.Recorder, work, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for id, l := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				err := Increment(ctx, id, l, s, rec, work, Hooks{})
				if err != nil && !errors.Is(err, fencing.ErrStale) && ctx.Err() == nil {
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}
