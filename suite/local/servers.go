package local

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/suite"
)

// serverMembers is suite.Servers for one server this package started: its
// process (group) is the only member; an embedded server has none.
type serverMembers struct {
	svc     *service
	s       servers.Server
	members []suite.Member
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
// and the backends it forks are one group): signals go to the group.
type member struct {
	name string
	pid  int
	jump func(ctx context.Context, d time.Duration) error
}

func (m *member) Name() string { return m.name }
func (m *member) Stop() error  { return faults.Group(m.pid).Stop() }
func (m *member) Cont() error  { return faults.Group(m.pid).Cont() }
func (m *member) Kill() error  { return faults.Group(m.pid).Kill() }

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

// embedded is suite.Servers for a server embedded in this process (etcd,
// NATS): no member to stop or to move.
func embedded(sv *service, s servers.Server) suite.Servers { return &serverMembers{svc: sv, s: s} }

// oneProcess is suite.Servers for a server whose clock cannot be moved
// (why: the reason).
func oneProcess(process, why string) func(sv *service, s servers.Server) suite.Servers {
	return func(sv *service, s servers.Server) suite.Servers {
		p := s.(interface{ Pid() int })
		return &serverMembers{svc: sv, s: s, members: []suite.Member{&member{name: process, pid: p.Pid(), jump: unsupported(why)}}}
	}
}
