package faults

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

// Service is the lock service's own processes, for the faults that strike
// the server rather than a client (a stopped server, a moved clock, a
// killed leader). suite.Config.Servers is one.
type Service interface {
	// Members lists the lock service's server processes: one for a single
	// node, every member for a cluster.
	Members() []Member
	// Healthy returns nil when the lock service serves requests (for a
	// cluster: has a leader or primary and every running member answers).
	// A run checks it before a server fault and after it heals, and
	// reports an unhealthy service as an error, not a verdict.
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

// Leaderer is an optional capability of a Service that can tell which
// member leads (etcd's or Consul's Raft leader, Redis's primary).
type Leaderer interface {
	Leader(ctx context.Context) (Member, error)
}

// Lagger is an optional capability of a Service whose replication is
// asynchronous (a Redis primary and its replica). Lag makes the members
// that would take over from the leader fall behind from now on: writes the
// leader acknowledges after Lag returns exist on the leader only, as writes
// within an asynchronous replica's lag do, until resume is called. A
// consensus-replicated service (etcd, Consul) has no such window (a write
// is acknowledged only once a quorum has it) and does not implement Lagger.
type Lagger interface {
	Lag(ctx context.Context) (resume func() error, err error)
}

// Restarter is an optional capability of a Service: Restart starts the
// members a fault killed again and waits until the service is healthy with
// all of them, so that the next run finds the whole cluster. Without it,
// each LeaderKill leaves the service one member short.
type Restarter interface {
	Restart(ctx context.Context) error
}

// ClockJumper is an optional capability of a Member whose wall clock the
// harness can move (suite/local runs redis-server under libfaketime).
// JumpClock moves the member's wall clock (CLOCK_REALTIME) forward by d, as
// an NTP step or an operator's date command would; its monotonic clock
// stays. It returns once the member reads the new time. An error wrapping
// errors.ErrUnsupported says why this member's clock cannot be moved or
// does not decide its expiry; ClockJump then does not apply.
type ClockJumper interface {
	JumpClock(ctx context.Context, d time.Duration) error
}

// Group is a process group the harness started (a worker process, a
// server): Stop and Cont signal every process in it. It is the one place
// where the harness sends SIGSTOP and SIGCONT.
type Group int

// Stop sends SIGSTOP to the group: its processes stop at once, every
// thread (renewal goroutines, timers) included.
func (g Group) Stop() error { return syscall.Kill(-int(g), syscall.SIGSTOP) }

// Cont sends SIGCONT to the group.
func (g Group) Cont() error { return syscall.Kill(-int(g), syscall.SIGCONT) }

// Kill sends SIGKILL to the group.
func (g Group) Kill() error { return syscall.Kill(-int(g), syscall.SIGKILL) }

// Await waits until /proc shows the group's leader stopped (stopped) or
// running, up to timeout: the evidence that a Stop or Cont took effect.
// Its error wraps syscall.ESRCH when the process has exited.
func (g Group) Await(stopped bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", g))
		if err != nil {
			return fmt.Errorf("process %d: %w", g, syscall.ESRCH)
		}
		// The state follows the command's name in parentheses.
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
			state := s[i+2]
			if (state == 'T' || state == 't') == stopped {
				return nil
			}
			if state == 'Z' || state == 'X' {
				return fmt.Errorf("process %d has exited: %w", g, syscall.ESRCH)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d: not %s after %v (state %q)", g, map[bool]string{true: "stopped", false: "running"}[stopped], timeout, s)
		}
		time.Sleep(time.Millisecond)
	}
}

// WaitHealthy calls healthy (each call bounded by 2 s) every 50 ms until it
// returns nil, and fails with its last error once timeout has passed or ctx
// is done.
func WaitHealthy(ctx context.Context, timeout time.Duration, healthy func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		last = healthy(cctx)
		ccancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not healthy after %v: %w", timeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
