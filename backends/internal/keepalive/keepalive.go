// Package keepalive is the renewal loop of the adapters whose lease is a
// server session that ends when idle (MySQL wait_timeout): a background ping
// keeps the session busy while the holder's process runs, and a failed ping
// means the session, and the lock with it, is gone. It is adapt.Renew with
// its goroutine, stop and wait.
package keepalive

import (
	"context"
	"time"

	"github.com/locksuite/locksuite/backends/internal/adapt"
)

// Loop pings a session in the background until Stop.
type Loop struct {
	stop context.CancelFunc
	done chan struct{}
	lost adapt.Lost
}

// Start calls ping every period, each call with a context that Stop
// cancels. The first ping that fails while the loop runs closes Lost and
// ends the loop.
func Start(period time.Duration, ping func(ctx context.Context) error) *Loop {
	ctx, stop := context.WithCancel(context.Background())
	l := &Loop{stop: stop, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		adapt.Renew(ctx, period, &l.lost, func(ctx context.Context) bool {
			return ping(ctx) == nil || ctx.Err() != nil
		})
	}()
	return l
}

// Stop ends the loop and waits until no ping runs. It is idempotent.
func (l *Loop) Stop() {
	l.stop()
	<-l.done
}

// Lost is closed when a ping failed (or MarkLost was called).
func (l *Loop) Lost() <-chan struct{} { return l.lost.C() }

// MarkLost closes Lost, once.
func (l *Loop) MarkLost() { l.lost.Mark() }
