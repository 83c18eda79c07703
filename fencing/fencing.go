// Package fencing is the resource a lock protects: a counter with a fence.
//
// A Store holds one counter: a value and the highest fencing token it has
// recorded (0 when created). Read returns the value and Write replaces it;
// both carry the caller's token.
//
// An unfenced Store ignores the token: every Read and Write succeeds, so a
// holder whose lease expired while it paused still writes, and overwrites
// the value a later holder wrote meanwhile: a lost update.
//
// A fenced Store checks the token of every Read and Write against the
// recorded one: an operation whose token is less than it is refused (an
// error wrapping ErrStale, counted in Rejected) and changes nothing; any
// other operation succeeds and records its token. A token equal to the
// recorded one passes, so one holder can read and then write with its token.
//
// Reads are checked, not only writes. With writes alone checked, a lost
// update remains possible: holder A (token 5) reads, pauses, and its lease
// expires; B (token 6) is granted and reads the same value; A resumes and
// writes: no write has recorded 6 yet, so A's write passes; B then writes
// its value, computed before A's write, and A's update is gone. Checking the
// read records 6 before A writes, so A's write is refused.
//
// A worker that gets ErrStale holds a stale view: it must release the lease,
// acquire again, read again and recompute, never replay the refused value.
//
// The stores live in sub-packages, each with its server's client library:
// fencing/pgstore (a Postgres table) and fencing/etcdstore (etcd keys). This
// package has no dependencies beyond the standard library.
package fencing

import (
	"context"
	"errors"
)

// ErrStale is wrapped by the error of a fenced Read or Write whose token is
// less than the highest one the Store has recorded.
var ErrStale = errors.New("fencing: stale token rejected: a newer fence has read or written")

// Store is one counter. Implementations are safe for concurrent use.
type Store interface {
	// Read returns the counter's current value. A fenced store first
	// compares fence with the recorded token: if fence is less, it returns
	// an error wrapping ErrStale; else it records fence.
	Read(ctx context.Context, fence uint64) (int64, error)
	// Value returns the counter's value without a token and without
	// recording anything: for the checker, after a run.
	Value(ctx context.Context) (int64, error)
	// Write sets the counter to value and records fence. A fenced store
	// returns an error wrapping ErrStale, and changes nothing, when fence is
	// less than the recorded token (another holder with a larger token read
	// or wrote since).
	Write(ctx context.Context, value int64, fence uint64) error
	// Fenced reports whether Read and Write compare tokens.
	Fenced() bool
	// Rejected is the number of Reads and Writes this Store refused with
	// ErrStale (always 0 unfenced): each is a holder that went on after a
	// later holder's token was recorded.
	Rejected() uint64
	// Close removes the counter from the server; it touches nothing else.
	// Only the counter's owner (the coordinator of a run) calls it; a worker
	// process that opened the same counter just exits.
	Close(ctx context.Context) error
}
