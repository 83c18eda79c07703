// Package fencing is the resource a lock protects: a counter with a fence.
//
// A Store holds one counter row (value, fence). Read returns the value; Write
// stores a new value together with the writer's fencing token. An unfenced
// Store writes unconditionally, like the reference guide's first version, so
// a stale holder's late write silently overwrites a newer one: a lost update.
// A fenced Store writes only if no newer token has written
// (UPDATE … WHERE fence < $token) and otherwise returns an error wrapping
// ErrStale, counting it in Rejected.
//
// The rule for a worker that gets ErrStale: its view of the data is stale.
// It must give up the lease, acquire again, read again and recompute. It must
// never replay the rejected value, which was computed from a stale read.
package fencing

import (
	"context"
	"errors"
	"fmt"
)

// ErrStale is wrapped by a fenced Write whose token is not newer than the last
// accepted one.
var ErrStale = errors.New("fencing: stale write rejected: a newer fence has written")

// Store is one counter. Implementations are safe for concurrent use.
type Store interface {
	// Read returns the counter's current value.
	Read(ctx context.Context) (int64, error)
	// Write sets the counter to value, recording fence. A fenced store
	// returns an error wrapping ErrStale, and changes nothing, when a write
	// with a fence >= fence was already accepted.
	Write(ctx context.Context, value int64, fence uint64) error
	// Fenced reports whether Write compares fences.
	Fenced() bool
	// Rejected is the number of stale writes this Store refused: each is a
	// pause that outlived a lease and, unfenced, would have lost an update.
	// Export it in production.
	Rejected() uint64
	// Close removes the counter from the server; it touches nothing else.
	// Only the counter's owner (the coordinator of a run) calls it; a worker
	// process that opened the same counter just exits.
	Close(ctx context.Context) error
}

func stale(fence uint64) error { return fmt.Errorf("%w (write with fence %d)", ErrStale, fence) }
