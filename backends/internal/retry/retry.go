// Package retry is the acquire loop the adapters share: try, and on an error
// that means "this attempt's own lease died before the grant", try again.
package retry

import (
	"context"
	"time"

	"github.com/locksuite/locksuite/backends"
)

// Acquire calls attempt until it succeeds, fails with an error retryable
// does not accept, or ctx is done. Attempts are 10 ms apart.
func Acquire(ctx context.Context, attempt func(context.Context) (backends.Lease, error), retryable func(error) bool) (backends.Lease, error) {
	for {
		lease, err := attempt(ctx)
		if err == nil || ctx.Err() != nil || !retryable(err) {
			return lease, err
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
}
