package local

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/suite"
)

// serverMembers is suite.Servers for one server this package started: its
// process (group) is the only member; an embedded server has none. It
// crashes the server (suite.Crasher) when Start was told to (WithCrash).
type serverMembers struct {
	svc     *service
	s       servers.Server
	members []suite.Member
	*crashing
}

func (s *serverMembers) Members() []suite.Member { return s.members }

// Healthy is the same check as for a named server (the service's probe):
// the server answers.
func (s *serverMembers) Healthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.svc.probe(ctx, &conn{endpoint: s.s.Endpoint()}); err != nil {
		return fmt.Errorf("%s: %w", s.svc.name, err)
	}
	return nil
}

// member is a server process started with its own process group (postgres
// and the backends it forks are one group), named for reports: signals go
// to the group of the process it runs now (a crash restarts it as
// another).
type member struct {
	name string
	proc *servers.Member
	jump func(ctx context.Context, d time.Duration) error
}

func (m *member) Name() string { return m.name }
func (m *member) Stop() error  { return m.proc.Stop() }
func (m *member) Cont() error  { return m.proc.Cont() }
func (m *member) Kill() error  { return m.proc.Kill() }

// JumpClock moves the member's wall clock, or says why it cannot.
func (m *member) JumpClock(ctx context.Context, d time.Duration) error { return m.jump(ctx, d) }

var (
	_ suite.Member      = (*member)(nil)
	_ suite.ClockJumper = (*member)(nil)
)

// noClock is why a member's clock is not moved; it wraps
// errors.ErrUnsupported, and its text is the reason alone.
type noClock string

func (n noClock) Error() string { return string(n) }
func (n noClock) Unwrap() error { return errors.ErrUnsupported }

func unsupported(reason string) func(context.Context, time.Duration) error {
	return func(context.Context, time.Duration) error { return noClock(reason) }
}

// oneProcess is suite.Servers for a server whose clock cannot be moved
// (why: the reason): its process, named process, or none for a server
// embedded in this process (etcd and NATS, unless started WithCrash).
func oneProcess(process, why string) func(sv *service, s servers.Server) suite.Servers {
	return func(sv *service, s servers.Server) suite.Servers {
		return &serverMembers{svc: sv, s: s, members: membersOf(s, process, unsupported(why))}
	}
}

// noClockGo is why the clock of etcd or nats-server, run as a process
// (WithCrash), is not moved (wrapped in errors.ErrUnsupported).
const noClockGo = "the harness does not run this Go server under libfaketime, which could not move its clock: Go reads the time through the vDSO, not through libc (consul's measured case)"

// membersOf names the process of the single server s (servers' base, as
// Members gives it) process, its clock moved by jump; none for a server
// embedded in this process.
func membersOf(s servers.Server, process string, jump func(context.Context, time.Duration) error) []suite.Member {
	var out []suite.Member
	for _, m := range s.(interface{ Members() []*servers.Member }).Members() {
		out = append(out, &member{name: process, proc: m, jump: jump})
	}
	return out
}
