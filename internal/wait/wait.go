// Package wait is the one way the module sleeps under a context.
package wait

import (
	"context"
	"time"
)

// For waits d, and returns nil; or returns ctx.Err() as soon as ctx is
// done, if that comes first. A d of zero or less returns nil at once,
// whatever ctx says: there is nothing to wait for.
func For(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
