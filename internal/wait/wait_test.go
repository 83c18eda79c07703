package wait

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestFor: For returns nil after its duration, and ctx's error once ctx is
// done first (a cancelled context ends an hour's wait).
func TestFor(t *testing.T) {
	if err := For(context.Background(), time.Millisecond); err != nil {
		t.Errorf("For 1ms: %v, want nil", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go cancel()
	if err := For(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("For an hour, cancelled: %v, want context.Canceled", err)
	}
	if err := For(ctx, 0); err != nil {
		t.Errorf("For 0 on a done context: %v, want nil (nothing to wait for)", err)
	}
}
