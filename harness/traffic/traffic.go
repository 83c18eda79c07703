// Package traffic drives clients through critical sections: acquire, read the
// counter, work, write the counter + 1, release. It records every section in
// a history.Recorder and judges nothing; the checker does that.
package traffic

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/harness/history"
	"github.com/locksuite/locksuite/internal/wait"
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

// PanicError is a panic of the code under test (a Locker, a Lease or a
// Store), recovered so that the run ends with an error instead of taking
// the process down.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("panic: %v, at %s (a Locker, Lease or Store under test panicked)", e.Value, e.where())
}

// where is the function and file:line that panicked, from Stack.
func (e *PanicError) where() string {
	lines := strings.Split(string(e.Stack), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "panic(") && i+3 < len(lines) {
			fn := lines[i+2]
			if j := strings.LastIndexByte(fn, '('); j > 0 {
				fn = fn[:j]
			}
			file := strings.TrimSpace(lines[i+3])
			if j := strings.LastIndex(file, " +0x"); j > 0 {
				file = file[:j]
			}
			return fn + " (" + file + ")"
		}
	}
	return "unknown"
}

// AcquireGrace is how long after its context is done Acquire waits for a
// Locker's Acquire to return before giving up on it.
const AcquireGrace = 5 * time.Second

// ErrIgnoredContext is wrapped by Acquire's error when the Locker's Acquire
// did not return within AcquireGrace of its context being done.
var ErrIgnoredContext = errors.New("Locker.Acquire did not return after its context was done: Acquire must return, with an error wrapping ctx.Err(), once ctx is done")

// Acquire calls l.Acquire(ctx) and returns its result, with two guards for
// a Locker under test: a panic is returned as a *PanicError, and an Acquire
// that is still blocked AcquireGrace after ctx is done is abandoned with an
// error wrapping ErrIgnoredContext (if it returns a lease later, the lease
// is released).
func Acquire(ctx context.Context, l backends.Locker) (backends.Lease, error) {
	r := Call(ctx.Done(), AcquireGrace, func() (backends.Lease, error) { return l.Acquire(ctx) })
	if !r.Returned {
		return nil, fmt.Errorf("%w (still blocked %v after: %v)", ErrIgnoredContext, AcquireGrace, ctx.Err())
	}
	return r.Lease, r.Err
}

// Called is the outcome of Call.
type Called struct {
	Lease backends.Lease
	Err   error // a *PanicError if f panicked
	// Returned is false when f was still running bound after ready.
	Returned bool
	// Took is how long f ran after ready was closed (from the call, for a
	// nil ready): 0 if it returned before, bound if it had not returned.
	Took time.Duration
}

// Call runs f, a call of the code under test, on a goroutine of its own
// and waits until it returns, or until bound has passed since ready was
// closed (since the call, for a nil ready). A panic of f is returned as a
// *PanicError. A lease that f returns after Call gave up is released.
func Call(ready <-chan struct{}, bound time.Duration, f func() (backends.Lease, error)) Called {
	ch := make(chan Called, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				ch <- Called{Err: &PanicError{p, debug.Stack()}, Returned: true}
			}
		}()
		lease, err := f()
		ch <- Called{Lease: lease, Err: err, Returned: true}
	}()
	t0 := time.Now()
	if ready != nil {
		select {
		case r := <-ch:
			return r
		case <-ready:
			t0 = time.Now()
		}
	}
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case r := <-ch:
		r.Took = time.Since(t0)
		return r
	case <-t.C:
		go func() {
			if r := <-ch; r.Lease != nil {
				rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = r.Lease.Release(rctx)
			}
		}()
		return Called{Took: bound}
	}
}

// Increment runs one critical section of client id: it acquires l, reads s,
// waits work, writes read+1 with the lease's fence, and releases.
//
// Errors of Acquire, Read and Write are *StepError. On a stale read or
// write (fencing.ErrStale) the section is recorded as Rejected and
// Increment returns fencing.ErrStale: the caller must acquire, read and
// compute again, never replay the value.
//
// A panic of the Locker, the Lease or the Store is returned as a *PanicError
// (in a *StepError when it came from Acquire).
func Increment(ctx context.Context, id int, l backends.Locker, s fencing.Store, rec *history.Recorder, work time.Duration, h Hooks) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("client %d: %w", id, &PanicError{p, debug.Stack()})
		}
	}()
	asked := rec.Now()
	lease, err := Acquire(ctx, l)
	if err != nil {
		return &StepError{id, "acquire", err}
	}
	sec := history.Section{Client: id, Asked: asked, Start: rec.Now(), Fence: lease.Fence(), Outcome: history.Aborted}
	if s, ok := lease.(backends.Sessioner); ok {
		sec.Session = s.Session()
	}
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
	if err := wait.For(ctx, work); err != nil {
		return err
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
// run ending and stale writes; a panic or an Acquire that ignored its
// context is returned even when it happened as the run ended.
func Run(ctx context.Context, lockers []backends.Locker, s fencing.Store, rec *history.Recorder, work, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		once  sync.Once
		first error
	)
	Clients(ctx, lockers, func(id int, l backends.Locker) bool {
		err := Increment(ctx, id, l, s, rec, work, Hooks{})
		var pe *PanicError
		faulty := errors.Is(err, ErrIgnoredContext) || errors.As(err, &pe) // even at the run's end
		if err != nil && !errors.Is(err, fencing.ErrStale) && (ctx.Err() == nil || faulty) {
			once.Do(func() { first = err; cancel() })
			return false
		}
		return true
	})()
	return first
}

// Clients starts a goroutine per Locker (id: its index) that calls body
// again and again until ctx is done or body returns false, and returns a
// function that waits until every goroutine has ended.
func Clients(ctx context.Context, lockers []backends.Locker, body func(id int, l backends.Locker) bool) (wait func()) {
	var wg sync.WaitGroup
	for id, l := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if !body(id, l) {
					return
				}
			}
		}()
	}
	return wg.Wait
}
