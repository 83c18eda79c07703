package backends_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/locksuite/locksuite/backends"
)

// lockService is the state a lock service keeps for one lock: who holds
// it until when, and the last fencing token it gave. Its clock is the
// service's own; the example moves it by hand, so that a holder's stall
// is exact.
type lockService struct {
	mu     sync.Mutex
	now    time.Time
	holder uint64 // the fence of the grant that holds the lock; 0: free
	until  time.Time
	fence  uint64
}

// memLocker is one client's Locker of a lockService: a lease lock with a
// fencing token, in process.
type memLocker struct {
	svc    *lockService
	lease  time.Duration
	closed bool // guarded by svc.mu
}

// Acquire takes the lock when it is free or its lease ran out, with the
// next fencing token; otherwise it waits and tries again.
func (l *memLocker) Acquire(ctx context.Context) (backends.Lease, error) {
	for {
		s := l.svc
		s.mu.Lock()
		if l.closed {
			s.mu.Unlock()
			return nil, fmt.Errorf("acquire: %w", backends.ErrClosed)
		}
		if s.holder == 0 || !s.now.Before(s.until) {
			s.fence++
			s.holder, s.until = s.fence, s.now.Add(l.lease)
			g := &memLease{svc: s, fence: s.fence}
			s.mu.Unlock()
			return g, nil
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("acquire: %w", ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// Close may be called more than once; Acquire after it fails with
// ErrClosed.
func (l *memLocker) Close() error {
	l.svc.mu.Lock()
	defer l.svc.mu.Unlock()
	l.closed = true
	return nil
}

// TTL and Expiry make memLocker a backends.TTLer: the service frees a
// lease exactly when it runs out.
func (l *memLocker) TTL() time.Duration    { return l.lease }
func (l *memLocker) Expiry() time.Duration { return l.lease }

type memLease struct {
	svc   *lockService
	fence uint64
}

func (g *memLease) Fence() uint64 { return g.fence }

// Release frees the lock only if this grant still holds it
// (compare-and-delete): a stale holder's Release frees nothing.
func (g *memLease) Release(ctx context.Context) error {
	g.svc.mu.Lock()
	defer g.svc.mu.Unlock()
	if g.svc.holder == g.fence {
		g.svc.holder = 0
	}
	return nil
}

// A minimal Locker: an in-process lease lock with a fencing token, and the
// promises the suite's contract spec checks (tokens increase with every
// grant, a stale Release frees nothing, Acquire honours its context and
// fails after Close). Plug it into suite.Config.NewLocker as any other;
// docs/your-lock.md has a whole test file on a real server.
func ExampleLocker() {
	svc := &lockService{now: time.Unix(0, 0)}
	newClient := func() *memLocker { return &memLocker{svc: svc, lease: time.Second} }
	a, b, c := newClient(), newClient(), newClient()
	ctx := context.Background()

	ga, _ := a.Acquire(ctx)
	fmt.Println("A holds, fence", ga.Fence())

	svc.mu.Lock()
	svc.now = svc.now.Add(1500 * time.Millisecond) // A stalls past its lease
	svc.mu.Unlock()
	gb, _ := b.Acquire(ctx)
	fmt.Println("B holds, fence", gb.Fence())

	_ = ga.Release(ctx) // A wakes up: its stale Release must not free B's grant
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	_, err := c.Acquire(short)
	cancel()
	fmt.Println("C while B holds:", errors.Is(err, context.DeadlineExceeded))

	_ = gb.Release(ctx)
	gc, _ := c.Acquire(ctx)
	fmt.Println("C holds, fence", gc.Fence())

	_ = a.Close()
	_, err = a.Acquire(ctx)
	fmt.Println("A after Close:", errors.Is(err, backends.ErrClosed))
	// Output:
	// A holds, fence 1
	// B holds, fence 2
	// C while B holds: true
	// C holds, fence 3
	// A after Close: true
}
