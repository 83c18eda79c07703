package local

import (
	"context"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/suite"
)

// single is suite.Servers for one server this package started: its process
// (group) is the only member; an embedded etcd has none.
type single struct {
	svc     *service
	s       servers.Server
	members []suite.Member
}

func (s *single) Members() []suite.Member { return s.members }

// Healthy is the same check as for a named server: the server answers
// (Redis PING, a Postgres connection, Consul's leader, etcd's status).
func (s *single) Healthy(ctx context.Context) error {
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

// Why a backend's clock is not jumped (wrapped in errors.ErrUnsupported).
const (
	noClockPostgres  = "postgres ends an idle session (idle_session_timeout) with an interval timer (setitimer) armed for the time remaining: a wall-clock jump does not make it fire sooner (measured: TestPostgresIdleTimeoutIgnoresClockJump), so the lease does not follow the wall clock"
	noClockConsul    = "consul is a Go program: its session timers (time.AfterFunc) run on the monotonic clock, and Go reads time through the vDSO rather than libc, so libfaketime cannot move it (measured: under it, consul's HTTP Date header shows the real time); the lease does not follow the wall clock"
	noClockZooKeeper = "zookeeper times sessions with System.nanoTime, a monotonic clock: a wall-clock jump does not move a session's expiry"
	noClockMariaDB   = "the harness does not run mariadbd under libfaketime, so its wall clock cannot be moved"
	noFaketime       = "libfaketime is not installed (apt-get install faketime, or run ci/setup.sh): the harness cannot move redis-server's clock"
)

// noClock is why a member's clock is not moved; it wraps
// errors.ErrUnsupported, and its text is the reason alone.
type noClock string

func (n noClock) Error() string { return string(n) }
func (n noClock) Unwrap() error { return errors.ErrUnsupported }

func unsupported(reason string) func(context.Context, time.Duration) error {
	return func(context.Context, time.Duration) error { return noClock(reason) }
}

// redisServers: the redis-server process, whose clock moves when
// libfaketime is installed.
func redisServers(sv *service, s servers.Server) suite.Servers {
	v := s.(*servers.Redis)
	m := &member{name: "redis-server", pid: v.Pid(), jump: unsupported(noFaketime)}
	if c := v.Clock(); c != nil {
		m.jump = func(ctx context.Context, d time.Duration) error { return jumpRedis(ctx, v.Endpoint(), c, d) }
	}
	return &single{svc: sv, s: s, members: []suite.Member{m}}
}

// embedded is suite.Servers for a server embedded in this process (etcd,
// NATS): no member to stop or to move.
func embedded(sv *service, s servers.Server) suite.Servers { return &single{svc: sv, s: s} }

// oneProcess is suite.Servers for a server whose clock cannot be moved
// (why: the reason).
func oneProcess(process, why string) func(sv *service, s servers.Server) suite.Servers {
	return func(sv *service, s servers.Server) suite.Servers {
		p := s.(interface{ Pid() int })
		return &single{svc: sv, s: s, members: []suite.Member{&member{name: process, pid: p.Pid(), jump: unsupported(why)}}}
	}
}

// jumpRedis moves the clock of the redis-server at addr and waits until its
// TIME shows the jump.
func jumpRedis(ctx context.Context, addr string, c *servers.FakeClock, d time.Duration) error {
	if err := c.Jump(d); err != nil {
		return err
	}
	want := c.Offset()
	rc := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1})
	defer rc.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		t, err := rc.Time(ctx).Result()
		if err == nil && t.Sub(time.Now()) > want-time.Second {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("redis-server's TIME did not show the %v jump within 5s (last: %v, %v)", d, t, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
