package services

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/suite"
)

// ServerMembers is suite.Servers for one server the harness started: its
// process (group) is the only member; an embedded server has none. It
// crashes the server (suite.Crasher) when suite/local.Start was told to
// (WithCrash).
type ServerMembers struct {
	Service    *Service
	Server     servers.Server
	MemberList []suite.Member
	*Crashing
}

func (s *ServerMembers) Members() []suite.Member { return s.MemberList }

// Healthy is the same check as for a named server (the service's probe):
// the server answers.
func (s *ServerMembers) Healthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.Service.Probe(ctx, &Conn{Endpoint: s.Server.Endpoint()}); err != nil {
		return fmt.Errorf("%s: %w", s.Service.Name, err)
	}
	return nil
}

// Process is a server process started with its own process group (postgres
// and the backends it forks are one group), named for reports: signals go
// to the group of the process it runs now (a crash restarts it as
// another).
type Process struct {
	Label string
	Proc  *servers.Member
	Jump  func(ctx context.Context, d time.Duration) error
}

func (m *Process) Name() string { return m.Label }
func (m *Process) Stop() error  { return m.Proc.Stop() }
func (m *Process) Cont() error  { return m.Proc.Cont() }
func (m *Process) Kill() error  { return m.Proc.Kill() }

// JumpClock moves the member's wall clock, or says why it cannot.
func (m *Process) JumpClock(ctx context.Context, d time.Duration) error { return m.Jump(ctx, d) }

var (
	_ suite.Member      = (*Process)(nil)
	_ suite.ClockJumper = (*Process)(nil)
)

// NoClock is why a member's clock is not moved; it wraps
// errors.ErrUnsupported, and its text is the reason alone.
type NoClock string

func (n NoClock) Error() string { return string(n) }
func (n NoClock) Unwrap() error { return errors.ErrUnsupported }

func Unsupported(reason string) func(context.Context, time.Duration) error {
	return func(context.Context, time.Duration) error { return NoClock(reason) }
}

// OneProcess is suite.Servers for a server whose clock cannot be moved
// (why: the reason): its process, named process, or none for a server
// embedded in this process (etcd and NATS, unless started WithCrash).
func OneProcess(process, why string) func(sv *Service, s servers.Server) suite.Servers {
	return func(sv *Service, s servers.Server) suite.Servers {
		return &ServerMembers{Service: sv, Server: s, MemberList: MembersOf(s, process, Unsupported(why))}
	}
}

// NoClockGo is why the clock of etcd or nats-server, run as a process
// (WithCrash), is not moved (wrapped in errors.ErrUnsupported).
const NoClockGo = "the harness does not run this Go server under libfaketime, which could not move its clock: Go reads the time through the vDSO, not through libc (consul's measured case)"

// MembersOf names the process of the single server s (servers' base, as
// Members gives it) process, its clock moved by jump; none for a server
// embedded in this process.
func MembersOf(s servers.Server, process string, jump func(context.Context, time.Duration) error) []suite.Member {
	var out []suite.Member
	for _, m := range s.(interface{ Members() []*servers.Member }).Members() {
		out = append(out, &Process{Label: process, Proc: m, Jump: jump})
	}
	return out
}
