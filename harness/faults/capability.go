package faults

import (
	"context"
	"time"
)

// The capabilities that loads and faults read from each other, each
// optional, found by type assertion (toxiproxy's optional toxic
// interfaces are the model).

// Holders is what a run knows of who holds its lock, as its clients report
// it, on the run's clock (Now). A client holds the lock, in this sense,
// from its read until its write can be due: a stop then catches the value
// it read before it writes it back, so a pause there can lose an update.
// A chaos worker's write is due its section's work after its read, and
// never while it waits for a stall's heal before its write. A targeted
// fault reads Holders to pick its victim and to check that its stop came
// in time (StopHolder), and Log.Play to mark a span Held.
type Holders interface {
	// Holder returns a client that holds the lock now, if any.
	Holder() (client int, ok bool)
	// Holds reports whether client holds the lock now.
	Holds(client int) bool
	// Now is the run's clock (the Log's), on which a StopHolder times the
	// pause it struck.
	Now() time.Duration
}

// Aimable is an optional capability of a Fault that can strike any one of
// a run's clients: Aim returns the fault aimed at client, a Fault of its
// own to strike and heal. A load that strikes whichever client reaches a
// point (a chaos worker that asks at its every-Nth critical section) aims
// the run's fault at that client; a fault that is not Aimable is struck as
// it is, whoever asked.
type Aimable interface {
	Aim(client int) Fault
}

// LagStep is an optional capability of a Fault with a step that must come
// a moment before it strikes: LeaderKill's Lag makes the replicas of an
// asynchronously replicated service fall behind, so that the grants the
// leader acknowledges from then on are lost with it. A load calls Lag once,
// before it strikes the fault: LagLead before, under load (run.Loop), or
// before the holder acquires (run.Failover).
type LagStep interface {
	Lag(ctx context.Context) error
}

// Recovery is an optional capability of a Fault whose target heals itself
// (a service that fails over to a new leader): Recovered is closed once it
// has, or once the fault gave up waiting. A load that waits for the
// service to come back (run.Failover) reads it.
type Recovery interface {
	Recovered() <-chan struct{}
}

// Crashed is an optional capability of a Fault that kills the lock service
// and starts it again (Crash): Crashed reports what the crash did, and
// whether it struck. A load that reports the restart (run.Restart) reads
// it.
type Crashed interface {
	Crashed() (CrashReport, bool)
}

// Syncer is an optional capability of a Fault whose target keeps what it
// wrote from the disk until it syncs it (a service whose power a Crash may
// cut): Sync makes what the target wrote so far durable, so that the fault
// strikes only what it writes from then on. A load that means to hit one
// moment's writes (run.Restart: the holder's grant) syncs once before it.
type Syncer interface {
	Sync() error
}
