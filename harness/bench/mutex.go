package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/fencing"
)

// MutexName is the name of Mutex's Target in results.
const MutexName = "in-process"

// Mutex is a Target whose lock lives in this process: one token per lock
// name, handed to the waiters in the order they asked (a Go channel's
// receive queue), with a fencing token that counts the name's grants. It
// dials nothing and never expires. Measured like a lock service, it gives
// the harness's own ceiling: what the bench can count at most on this
// machine. newStore (nil: none) is the counter store of the store-write
// points, the same the services' points write to.
func Mutex(newStore func(ctx context.Context, name string, fenced bool) (fencing.Store, error)) Target {
	var mu sync.Mutex
	locks := map[string]*memLock{}
	return Target{
		Name: MutexName, Ceiling: true, NewStore: newStore,
		NewLocker: func(_ context.Context, _ int, key string, _ Dialer) (backends.Locker, error) {
			mu.Lock()
			defer mu.Unlock()
			m := locks[key]
			if m == nil {
				m = &memLock{token: make(chan struct{}, 1)}
				m.token <- struct{}{}
				locks[key] = m
			}
			return &memLocker{m: m}, nil
		},
	}
}

type memLock struct {
	token chan struct{} // holds the token while the lock is free
	fence atomic.Uint64
}

type memLocker struct {
	m      *memLock
	closed atomic.Bool
}

func (l *memLocker) Acquire(ctx context.Context) (backends.Lease, error) {
	if l.closed.Load() {
		return nil, backends.ErrClosed
	}
	select {
	case <-l.m.token:
		return &memLease{m: l.m, fence: l.m.fence.Add(1)}, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("bench: in-process lock: %w", ctx.Err())
	}
}

func (l *memLocker) Close() error {
	l.closed.Store(true)
	return nil
}

type memLease struct {
	m        *memLock
	fence    uint64
	released atomic.Bool
}

func (s *memLease) Fence() uint64 { return s.fence }

func (s *memLease) Release(context.Context) error {
	if !s.released.Swap(true) {
		s.m.token <- struct{}{}
	}
	return nil
}
