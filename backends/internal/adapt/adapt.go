// Package adapt holds what every adapter's Locker does the same way: check
// its Config, wrap its errors, wait between attempts, keep one session for
// its attempts, and tell its holder that a lease was lost.
package adapt

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/internal/wait"
)

// Check checks a Config's key and lease for package pkg: key must not be
// empty (what says what it names, e.g. "the lock key"); a zero *lease
// becomes def; a lease below min is refused, why saying whose resolution
// min is (a negative lease is refused whatever min).
func Check(pkg, key, what string, lease *time.Duration, def, min time.Duration, why string) error {
	if key == "" {
		return fmt.Errorf("%s: Config.Key is empty: name %s", pkg, what)
	}
	if *lease == 0 {
		*lease = def
	}
	if *lease < 0 {
		return fmt.Errorf("%s: lease %v is negative: set a positive lease, or 0 for the default %v", pkg, *lease, def)
	}
	if *lease < min {
		return fmt.Errorf("%s: lease %v is below %s", pkg, *lease, why)
	}
	return nil
}

// Wrap is the error of a failed op (e.g. "acquire") on the lock what:
// ctx's error when ctx is done (the attempt was abandoned, whatever the
// client library made of it), else err.
func Wrap(ctx context.Context, pkg, op, what string, err error) error {
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	return fmt.Errorf("%s: %s %s: %w", pkg, op, what, err)
}

// Poll calls try until it grants a lease, fails, or ctx is done or closed
// is set (backends.ErrClosed), waiting wait between attempts; the first
// attempt is at once. try returns a nil Lease and a nil error when the lock
// is taken. The errors are try's, or ctx's, as they are: callers wrap them.
func Poll(ctx context.Context, closed *atomic.Bool, wait time.Duration, try func(ctx context.Context) (backends.Lease, error)) (backends.Lease, error) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		if closed.Load() {
			return nil, backends.ErrClosed
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
		l, err := try(ctx)
		if err != nil || l != nil {
			return l, err
		}
		t.Reset(wait)
	}
}

// Retry calls attempt until it succeeds, fails with an error retryable does
// not accept, or ctx is done. Attempts are 10 ms apart. It is for the
// attempts whose own session or lease can die before the grant (a client
// stalled while it waited): that error means "start over", not "fail".
func Retry(ctx context.Context, attempt func(context.Context) (backends.Lease, error), retryable func(error) bool) (backends.Lease, error) {
	for {
		lease, err := attempt(ctx)
		if err == nil || ctx.Err() != nil || !retryable(err) {
			return lease, err
		}
		_ = Sleep(ctx, 10*time.Millisecond) // the next attempt sees ctx done
	}
}

// Sleep waits d, or returns ctx's error when ctx is done first (wait.For).
func Sleep(ctx context.Context, d time.Duration) error { return wait.For(ctx, d) }

// Renew calls renew every period until ctx is done. When renew reports the
// lease gone (false), Renew marks lost and returns: the watcher of a lease
// the service keeps only while the client renews it.
func Renew(ctx context.Context, period time.Duration, lost *Lost, renew func(ctx context.Context) bool) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !renew(ctx) {
			lost.Mark()
			return
		}
	}
}

// Lost is a lease's lost channel (backends.LossNotifier): Mark closes it,
// once, however many watchers call it. The zero Lost is ready to use.
type Lost struct {
	once sync.Once
	mu   sync.Mutex
	ch   chan struct{}
}

// C is the channel Mark closes.
func (l *Lost) C() <-chan struct{} { return l.channel() }

// Mark closes C.
func (l *Lost) Mark() {
	ch := l.channel()
	l.once.Do(func() { close(ch) })
}

func (l *Lost) channel() chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ch == nil {
		l.ch = make(chan struct{})
	}
	return l.ch
}

// Quote wraps s in q, doubling every q inside it: SQL's quoting of an
// identifier (MySQL's backquote) or of a string literal (').
func Quote(s string, q byte) string {
	out := []byte{q}
	for i := 0; i < len(s); i++ {
		if s[i] == q {
			out = append(out, q)
		}
		out = append(out, s[i])
	}
	return string(append(out, q))
}

// ReleaseHeld releases held, giving it up to a second: a Locker's Close
// frees the lease it still holds before it closes its connection (if the
// server cannot be asked in time, the lease's own expiry frees it).
func ReleaseHeld(held backends.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = held.Release(ctx)
}
