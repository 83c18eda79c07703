// Package keepalive is the renewal loop of the adapters whose lease is a
// server session that ends when idle (Postgres idle_session_timeout, MySQL
// wait_timeout): a background ping keeps the session busy while the
// holder's process runs, and a failed ping means the session, and the lock
// with it, is gone.
package keepalive

import (
	"context"
	"sync"
	"time"
)

// Loop pings a session in the background until Stop.
type Loop struct {
	stop     context.CancelFunc
	done     chan struct{}
	lost     chan struct{}
	lostOnce sync.Once
}

// Start calls ping every period, each call with a context that Stop
// cancels. The first ping that fails while the loop runs closes Lost and
// ends the loop.
func Start(period time.Duration, ping func(ctx context.Context) error) *Loop {
	ctx, stop := context.WithCancel(context.Background())
	l := &Loop{stop: stop, done: make(chan struct{}), lost: make(chan struct{})}
	go func() {
		defer close(l.done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if err := ping(ctx); err != nil && ctx.Err() == nil {
				l.MarkLost()
				return
			}
		}
	}()
	return l
}

// Stop ends the loop and waits until no ping runs. It is idempotent.
func (l *Loop) Stop() {
	l.stop()
	<-l.done
}

// Lost is closed when a ping failed (or MarkLost was called).
func (l *Loop) Lost() <-chan struct{} { return l.lost }

// MarkLost closes Lost, once.
func (l *Loop) MarkLost() { l.lostOnce.Do(func() { close(l.lost) }) }
