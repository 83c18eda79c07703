package suite

import (
	"context"
	"time"
)

// Servers gives the server-fault scenarios (a stalled lock server, a failed
// leader or primary) their hands on the lock service's own processes. Set
// Config.Servers to use them; a Config without Servers skips those
// scenarios. suite/local sets it for the servers it starts itself, never for
// servers the user names.
type Servers interface {
	// Members lists the lock service's server processes: one for a single
	// node, every member for a cluster.
	Members() []Member
	// Healthy returns nil when the lock service serves requests (for a
	// cluster: has a leader or primary and every running member answers).
	// The scenarios check it before a fault and after it heals, and report
	// an unhealthy service as an error, not a verdict.
	Healthy(ctx context.Context) error
}

// Member is one server process of the lock service.
type Member interface {
	// Name says which member this is, for reports ("etcd-1").
	Name() string
	// Stop stops the process (SIGSTOP); Cont continues it (SIGCONT).
	Stop() error
	Cont() error
	// Kill kills the process (SIGKILL). It is not restarted.
	Kill() error
}

// Leaderer is an optional capability of Servers that can tell which member
// leads (etcd's or Consul's Raft leader, Redis's primary).
type Leaderer interface {
	Leader(ctx context.Context) (Member, error)
}

// ClockJumper is an optional capability of a Member whose wall clock the
// harness can move (suite/local runs redis-server under libfaketime).
// JumpClock moves the member's wall clock (CLOCK_REALTIME) forward by d, as
// an NTP step or an operator's date command would; its monotonic clock
// stays. It returns once the member reads the new time. An error wrapping
// errors.ErrUnsupported says why this member's clock cannot be moved or does
// not decide its expiry; the clock-jump scenario then skips with that text.
type ClockJumper interface {
	JumpClock(ctx context.Context, d time.Duration) error
}
