// Package fencing is the resource a lock protects: a counter with a fence.
//
// A Store holds one counter row (value, fence). Read returns the value; Write
// stores a new value. Both carry the caller's fencing token. An unfenced
// Store ignores the token, like the reference guide's first version, so a
// stale holder's late write silently overwrites a newer one: a lost update.
//
// A fenced Store refuses every operation whose token is older than the
// newest it has seen, reads included: a read records its token
// (UPDATE … SET fence = $token WHERE fence <= $token RETURNING value), and a
// write succeeds only if no newer token has read or written since
// (UPDATE … WHERE fence <= $token). A refused operation returns an error
// wrapping ErrStale and is counted in Rejected.
//
// Why reads too: the guide's fence, checked on writes only
// (UPDATE … WHERE fence < $token), leaves a window. Holder A (token 5) stalls
// after its read; its lease expires; B (token 6) reads; A wakes and writes
// before B does: 5 is newer than the last written token, so A's write is
// accepted; then B writes the value it computed before A's write, also
// accepted. One update is lost. locksuite's stall-in-section run found this
// (1 lost in 110 writes, Redis, fenced on writes only).
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
var ErrStale = errors.New("fencing: stale token rejected: a newer fence has read or written")

// Store is one counter. Implementations are safe for concurrent use.
type Store interface {
	// Read returns the counter's current value. A fenced store records
	// fence as the newest token seen, or returns an error wrapping ErrStale
	// if a newer one was seen already.
	Read(ctx context.Context, fence uint64) (int64, error)
	// Value returns the counter's value without a token and without
	// recording anything: for the checker, after a run.
	Value(ctx context.Context) (int64, error)
	// Write sets the counter to value, recording fence. A fenced store
	// returns an error wrapping ErrStale, and changes nothing, when a newer
	// token has read or written since.
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

func stale(op string, fence uint64) error {
	return fmt.Errorf("%w (%s with fence %d)", ErrStale, op, fence)
}
