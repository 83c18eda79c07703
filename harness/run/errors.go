package run

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/traffic"
)

// Error is the error of a run that ended without a verdict: a client or
// the counter that could not be made, a fault that could not strike or
// heal, a worker that failed, a service that was not healthy, a panic of
// the code under test (a *traffic.PanicError). Backend and Scenario name
// the run; Err says what went wrong. Its text is "suite: BACKEND:
// SCENARIO: ERR", as every error of a run that the suite returns.
type Error struct {
	Backend, Scenario string
	Err               error
}

func (e *Error) Error() string {
	return fmt.Sprintf("suite: %s: %s: %v", e.Backend, e.Scenario, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Skip returns an error wrapping faults.ErrNotApplicable: the run does not
// apply to this lock, and is skipped with reason.
func Skip(reason string) error { return faults.NotApplicable(reason) }

// ErrNoFence is why a fenced run does not apply to a lock whose grants
// carry no fencing token (Lease.Fence() is 0). It wraps
// faults.ErrNotApplicable, so that the run is skipped with its text.
var ErrNoFence = Skip("the lock gives no fencing token (Lease.Fence() is 0), so a fenced store has nothing to compare: run it unfenced, or return from Fence a token that increases with every grant")

// ProbeFence is the one place that decides whether a lock gives fencing
// tokens: it acquires the free lock with l once (within 10 s), reads the
// grant's Lease.Fence() and releases it. It returns nil when the fence is
// not 0, ErrNoFence when it is, and otherwise what went wrong: the error of
// Acquire or Release, or a panic of the Locker or its Lease as a
// *traffic.PanicError. suite.Execute calls it before it registers a fenced
// Config (a lock with no token is not registered fenced; its rows say
// why), and so may any other front end.
func ProbeFence(ctx context.Context, l backends.Locker) error {
	fence, err := firstGrant(ctx, l)
	if err != nil {
		return err
	}
	return needFence(fence)
}

// needFence is ErrNoFence for a fence of 0, else nil.
func needFence(fence uint64) error {
	if fence == 0 {
		return ErrNoFence
	}
	return nil
}

// probeTimeout bounds the first Acquire of a free lock.
const probeTimeout = 10 * time.Second

// firstGrant acquires the free lock with l once, within probeTimeout, and
// releases it; it returns the grant's fence.
func firstGrant(ctx context.Context, l backends.Locker) (fence uint64, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &traffic.PanicError{Value: p, Stack: debug.Stack()}
		}
	}()
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	lease, err := traffic.Acquire(pctx, l)
	if err != nil {
		return 0, fmt.Errorf("the first Acquire of a free lock: %w", err)
	}
	fence = lease.Fence()
	if err := lease.Release(ctx); err != nil {
		return 0, fmt.Errorf("releasing the first lease: %w", err)
	}
	return fence, nil
}

// errorsIsAny reports whether err is one of targets.
func errorsIsAny(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}
