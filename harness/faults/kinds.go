package faults

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/internal/wait"
)

// NoDial is why a network fault does not apply to a client that made no
// connection through its Path.
const NoDial = "the Locker made no connection through Client.Dial, so its network cannot be faulted: pass Client.Dial to the client library's dialer hook, or implement backends.Freezer"

// dialled reports whether a client used p.
func dialled(p *Path) bool { return p != nil && p.Dials() > 0 }

// needDial is nil when a client used p, else the error of a network fault
// that does not apply (NotApplicable(NoDial)).
func needDial(p *Path) error {
	if dialled(p) {
		return nil
	}
	return NotApplicable(NoDial)
}

// onPath injects a network fault of a client's Path: strike (a method of p)
// once needDial passes, with Path.Heal as the heal.
func onPath(p *Path, strike func()) (func() error, error) {
	if err := needDial(p); err != nil {
		return nil, err
	}
	strike()
	return func() error { p.Heal(); return nil }, nil
}

// Freeze stalls one client with its renewals, as a GC or VM pause would:
// all its traffic to the lock service stops and nothing sent meanwhile is
// lost, until the heal delivers it. It works through the Locker's own
// backends.Freezer when it has one, else on the client's Path when the
// client dialled through it; it does not apply to a client with neither.
type Freeze struct {
	Path   *Path           // the client's Path; nil if it has none
	Locker backends.Locker // the client's Locker
	Lane   int             // the client's number
	Name   string          // the client's name in the schedule ("A")
}

func (f *Freeze) Applies(context.Context) error {
	if _, ok := f.Locker.(backends.Freezer); ok || dialled(f.Path) {
		return nil
	}
	return NotApplicable(NoDial)
}

func (f *Freeze) Inject(context.Context) (func() error, error) {
	// The Locker's own Freezer first: it knows how to stall itself whole
	// (a foreign worker's process, stopped with SIGSTOP), where the path
	// would stall its traffic only.
	if fr, ok := f.Locker.(backends.Freezer); ok {
		thaw := fr.Freeze()
		return func() error { thaw(); return nil }, nil
	}
	if dialled(f.Path) {
		f.Path.Freeze()
		return func() error { f.Path.Thaw(); return nil }, nil
	}
	return nil, NotApplicable(NoDial)
}

func (f *Freeze) Span() Span { return Span{Lane: f.Lane, Kind: "freeze", What: "freeze " + f.Name} }

// Partition cuts one client off the lock service through its Path: with
// Blackhole false, its connections are closed and new ones refused
// (Path.Cut); with Blackhole true, they stay open and every byte is dropped
// both ways (Path.Blackhole). The heal is Path.Heal. It does not apply to a
// client that dialled nothing through its Path.
type Partition struct {
	Path      *Path
	Blackhole bool
	Lane      int
	Name      string
}

func (f *Partition) Applies(context.Context) error { return needDial(f.Path) }

func (f *Partition) Inject(context.Context) (func() error, error) {
	if f.Blackhole {
		return onPath(f.Path, f.Path.Blackhole)
	}
	return onPath(f.Path, f.Path.Cut)
}

func (f *Partition) Span() Span {
	if f.Blackhole {
		return Span{Lane: f.Lane, Kind: "blackhole", What: "blackhole " + f.Name}
	}
	return Span{Lane: f.Lane, Kind: "cut", What: "cut " + f.Name}
}

// DropReplies lets one client's requests reach the lock service and drops
// every reply (Path.DropReplies), on open and new connections, until the
// heal (Path.Heal, which closes the connections that lost replies): the
// service acts on what the client asked (grants it the lock) and the client
// never hears of it, as when a reply is lost, or arrives after the client's
// timeout. It does not apply to a client that dialled nothing through its
// Path.
type DropReplies struct {
	Path *Path
	Lane int
	Name string
}

func (f *DropReplies) Applies(context.Context) error { return needDial(f.Path) }

func (f *DropReplies) Inject(context.Context) (func() error, error) {
	return onPath(f.Path, f.Path.DropReplies)
}

func (f *DropReplies) Span() Span {
	return Span{Lane: f.Lane, Kind: "replies dropped", What: "drop replies to " + f.Name}
}

// Stopper is a process that can be stopped and continued as a whole: a
// worker process, a server member. Group is one.
type Stopper interface {
	Stop() error
	Cont() error
}

// Stop stops a process (SIGSTOP, through its Stopper) until the heal
// continues it (SIGCONT): every thread stops, renewals and timers
// included. It is the one process pause of the harness: a chaos run's
// pauses, a worker's stall in its critical section and a stopped server
// are all Stop. A process that has exited is nothing to strike: Inject
// returns an error wrapping ErrNoTarget, and a heal after the process
// exited returns nil.
type Stop struct {
	Proc Stopper
	Lane int    // the client it stops, or ServiceLane
	Kind string // "sigstop", "stall", "server sigstop"
	What string // "w1", "SIGSTOP redis-server"
}

func (f *Stop) Applies(context.Context) error {
	if f.Proc == nil {
		return NotApplicable("no process to stop")
	}
	return nil
}

func (f *Stop) Inject(context.Context) (func() error, error) {
	if err := f.Proc.Stop(); err != nil {
		_ = f.Proc.Cont()
		if errors.Is(err, syscall.ESRCH) {
			return nil, fmt.Errorf("%s has exited: %w", f.What, ErrNoTarget)
		}
		return nil, err
	}
	return func() error {
		if err := f.Proc.Cont(); err != nil && !errors.Is(err, syscall.ESRCH) {
			return err
		}
		return nil
	}, nil
}

func (f *Stop) Span() Span { return Span{Lane: f.Lane, Kind: f.Kind, What: f.What} }

// StopHolder is a targeted pause: it stops (Stop, kind "sigstop") the
// process of whichever client holds the lock when it strikes (Holders:
// between its read and its write), waiting up to Wait for one (polling
// Holders every millisecond). A stop that came too late, the client's
// write already due by the time it stopped (the client's report of its
// read reached the run late: a busy machine), is taken back (SIGCONT) and
// the wait goes on: every pause struck caught its victim before its
// write. Procs[i] is client i's process. With no holder caught by Wait,
// Inject returns an error wrapping ErrNoTarget and leaves nothing stopped.
type StopHolder struct {
	Procs   []Stopper
	Holders Holders
	Wait    time.Duration
	stop    *Stop         // the pause struck, once Inject caught a holder
	at      time.Duration // when it struck, on Holders' clock
}

func (f *StopHolder) Applies(context.Context) error {
	if len(f.Procs) == 0 || f.Holders == nil {
		return NotApplicable("no worker processes whose lock holder could be stopped")
	}
	return nil
}

func (f *StopHolder) Inject(ctx context.Context) (func() error, error) {
	deadline := time.Now().Add(f.Wait)
	late := 0 // stops taken back: they came after the victim's write was due
	for {
		if id, ok := f.Holders.Holder(); ok {
			s := &Stop{Proc: f.Procs[id], Lane: id, Kind: "sigstop", What: workerName(id)}
			heal, err := s.Inject(ctx)
			if err != nil && !errors.Is(err, ErrNoTarget) {
				return nil, err
			}
			if err == nil && f.Holders.Holds(id) {
				f.stop, f.at = s, f.Holders.Now()
				return heal, nil
			}
			if err == nil {
				late++
				if err := heal(); err != nil {
					return nil, err
				}
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no worker caught holding the lock before its write within %v (%d stops came too late): %w", f.Wait, late, ErrNoTarget)
		}
		if err := wait.For(ctx, time.Millisecond); err != nil {
			return nil, err
		}
	}
}

// Span is the pause struck, from the stop, its victim holding the lock
// (Held); before it struck, "the holder".
func (f *StopHolder) Span() Span {
	if f.stop == nil {
		return Span{Lane: ServiceLane, Kind: "sigstop", What: "the holder"}
	}
	s := f.stop.Span()
	s.Start, s.Held = f.at, true
	return s
}

// struckSpan is the span of the Stop a fault struck, or unstruck before
// it struck.
func struckSpan(s *Stop, unstruck Span) Span {
	if s == nil {
		return unstruck
	}
	return s.Span()
}

// Stall is the fault of a critical section that stalls before its write:
// a chaos worker asks for it at its every-Nth section and waits until the
// heal. Aim it at the worker that asks (Aimable). With Goroutine false, it
// stops the worker's whole process (Stop, kind "stall"; Procs[i] is worker
// i's process): renewals stop too. With Goroutine true, it stops nothing:
// only the asking goroutine waits for the heal while its process, and any
// renewal in it, runs on; its span (kind "sleep") is drawn but not counted
// (Span.Uncounted). Struck without aiming, it strikes nothing and says so
// (ErrNotApplicable).
type Stall struct {
	Procs     []Stopper
	Goroutine bool
}

func (f *Stall) Applies(context.Context) error {
	if !f.Goroutine && len(f.Procs) == 0 {
		return NotApplicable("no worker processes to stall")
	}
	return nil
}

func (f *Stall) Inject(context.Context) (func() error, error) {
	return nil, NotApplicable("a stall strikes the worker that asks for it: aim it first (Aim)")
}

func (f *Stall) Span() Span { return Span{Lane: ServiceLane, Kind: "stall", What: "stall"} }

// Aim is the stall of worker client.
func (f *Stall) Aim(client int) Fault {
	if f.Goroutine {
		return &goroutineStall{lane: client}
	}
	return &Stop{Proc: f.Procs[client], Lane: client, Kind: "stall", What: workerName(client)}
}

// goroutineStall is Stall with Goroutine, aimed: nothing to inject, the
// asking goroutine waits for the heal.
type goroutineStall struct{ lane int }

func (*goroutineStall) Applies(context.Context) error { return nil }

func (*goroutineStall) Inject(context.Context) (func() error, error) { return nil, nil }

func (f *goroutineStall) Span() Span {
	return Span{Lane: f.lane, Kind: "sleep", What: workerName(f.lane) + " sleeps", Uncounted: true}
}

// victim is the member a server fault strikes, once the fault applies
// (its Applies returns nil): the leader when the Service can tell, else the
// first member.
func victim(ctx context.Context, f Fault, s Service) (Member, error) {
	if err := f.Applies(ctx); err != nil {
		return nil, err
	}
	if l, ok := s.(Leaderer); ok {
		m, err := l.Leader(ctx)
		if err != nil {
			return nil, fmt.Errorf("finding the leader: %w", err)
		}
		return m, nil
	}
	return s.Members()[0], nil
}

// hasMembers is why a server fault does not apply to s, if it does not.
func hasMembers(s Service, what string) error {
	if s == nil {
		return NotApplicable("Config.Servers is nil: no lock server " + what + " (suite/local sets it for the servers it starts)")
	}
	if len(s.Members()) == 0 {
		return NotApplicable("Servers.Members is empty: no lock server " + what + " (an embedded server, like suite/local's etcd, runs inside the harness)")
	}
	return nil
}

// ServerStop stops the lock service's leader (or its only member) with
// Stop, Jepsen's "hammer time". It does not apply to a service without
// member processes.
type ServerStop struct {
	Service Service
	stop    *Stop
}

func (f *ServerStop) Applies(context.Context) error { return hasMembers(f.Service, "process to stop") }

func (f *ServerStop) Inject(ctx context.Context) (func() error, error) {
	m, err := victim(ctx, f, f.Service)
	if err != nil {
		return nil, err
	}
	f.stop = &Stop{Proc: m, Lane: ServiceLane, Kind: "server sigstop", What: "SIGSTOP " + m.Name()}
	heal, err := f.stop.Inject(ctx)
	if err != nil {
		return nil, fmt.Errorf("stopping %s: %w", m.Name(), err)
	}
	return heal, nil
}

func (f *ServerStop) Span() Span {
	return struckSpan(f.stop, Span{Lane: ServiceLane, Kind: "server sigstop", What: "SIGSTOP"})
}

// ClockJump moves the wall clock of the lock service's leader (or only
// member) forward By, as an NTP step would (ClockJumper). It cannot be
// undone: its heal is nil. It does not apply to a member whose clock
// cannot be moved or does not decide its expiry.
type ClockJump struct {
	Service Service
	By      time.Duration
	name    string
}

func (f *ClockJump) Applies(context.Context) error {
	return hasMembers(f.Service, "process whose clock can be moved")
}

func (f *ClockJump) Inject(ctx context.Context) (func() error, error) {
	m, err := victim(ctx, f, f.Service)
	if err != nil {
		return nil, err
	}
	cj, ok := m.(ClockJumper)
	if !ok {
		return nil, NotApplicable(fmt.Sprintf("the wall clock of %s cannot be moved (its Member does not implement ClockJumper)", m.Name()))
	}
	if err := cj.JumpClock(ctx, f.By); err != nil {
		if errors.Is(err, errors.ErrUnsupported) {
			return nil, NotApplicable(err.Error())
		}
		return nil, fmt.Errorf("moving the clock of %s: %w", m.Name(), err)
	}
	f.name = m.Name()
	return nil, nil
}

func (f *ClockJump) Span() Span {
	what := fmt.Sprintf("clock +%v", f.By)
	if f.name != "" {
		what = fmt.Sprintf("clock of %s +%v", f.name, f.By)
	}
	return Span{Lane: ServiceLane, Kind: "clock jump", What: what}
}

// SessionKill ends the server session of a client's lease from outside
// (backends.Terminator), as an administrator or a failover would. It
// cannot be undone: its heal is nil. Lease is read when it strikes; a Lease without a
// session makes Inject return a not-applicable error.
type SessionKill struct {
	Lease func() backends.Lease
	Lane  int
	Name  string
}

func (f *SessionKill) Applies(context.Context) error { return nil }

func (f *SessionKill) Inject(ctx context.Context) (func() error, error) {
	t, ok := f.Lease().(backends.Terminator)
	if !ok {
		return nil, NotApplicable("the lease has no server session to terminate (its Lease does not implement backends.Terminator)")
	}
	if err := t.Terminate(ctx); err != nil {
		return nil, fmt.Errorf("terminating %s's session: %w", f.Name, err)
	}
	return nil, nil
}

func (f *SessionKill) Span() Span {
	return Span{Lane: f.Lane, Kind: "session killed", What: "terminate " + f.Name + "'s session"}
}

// LeaderKill kills the lock service's leader (SIGKILL) and watches the
// service fail over. Applies needs a Service with a Leaderer, healthy
// within Recovery; it finds the leader. Lag, called before Inject, makes
// the replicas fall behind first where replication is asynchronous
// (Lagger), so that grants acknowledged by the leader are lost with it.
// Its heal waits until the service is healthy again (at most Recovery
// after the kill) and fails if it is not; the span ends when it was.
// Restore restarts the killed member (Restarter).
type LeaderKill struct {
	Service  Service
	Recovery time.Duration        // how long the service may take to be healthy
	Clock    func() time.Duration // the run's clock, for the span's end

	victim  Member
	resume  func() error
	mu      sync.Mutex
	resumed bool
	killed  bool
	healthy time.Duration
	err     error
	ok      chan struct{}
}

func (f *LeaderKill) Applies(ctx context.Context) error {
	if f.Service == nil {
		return NotApplicable("no Config.Servers: the failover scenarios need the lock service's processes")
	}
	ld, ok := f.Service.(Leaderer)
	if !ok {
		return NotApplicable("Config.Servers has no leader to kill (it does not implement suite.Leaderer): a single server cannot fail over")
	}
	if err := WaitHealthy(ctx, f.Recovery, f.Service.Healthy); err != nil {
		return fmt.Errorf("the lock service is not healthy before the fault: %w", err)
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := ld.Leader(lctx)
	if err != nil {
		return fmt.Errorf("finding the leader: %w", err)
	}
	f.victim, f.ok = v, make(chan struct{})
	return nil
}

// Lag makes the replicas fall behind, if the service replicates
// asynchronously; Inject (or Restore) lets them catch up.
func (f *LeaderKill) Lag(ctx context.Context) error {
	if lg, ok := f.Service.(Lagger); ok {
		resume, err := lg.Lag(ctx)
		if err != nil {
			return fmt.Errorf("lag the replicas: %w", err)
		}
		f.resume = resume
	}
	return nil
}

// unlag lets lagging replicas run again, once.
func (f *LeaderKill) unlag() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.resume == nil || f.resumed {
		return nil
	}
	f.resumed = true
	return f.resume()
}

func (f *LeaderKill) Inject(ctx context.Context) (func() error, error) {
	f.mu.Lock()
	f.killed = true
	f.mu.Unlock()
	err := errors.Join(f.victim.Kill(), f.unlag())
	if err != nil {
		return nil, fmt.Errorf("kill the leader %s: %w", f.victim.Name(), err)
	}
	go func() {
		// Not the run's context: the heal waits for this after the load.
		err := WaitHealthy(context.WithoutCancel(ctx), f.Recovery, f.Service.Healthy)
		f.mu.Lock()
		f.healthy, f.err = f.Clock(), err
		f.mu.Unlock()
		close(f.ok)
	}()
	return func() error {
		<-f.ok
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.err != nil {
			return fmt.Errorf("the lock service did not recover after %s was killed: %w", f.victim.Name(), f.err)
		}
		return nil
	}, nil
}

// Recovered is closed once the service is healthy again after the kill
// (or Recovery has passed). Nil before Applies.
func (f *LeaderKill) Recovered() <-chan struct{} { return f.ok }

func (f *LeaderKill) Span() Span {
	s := Span{Lane: ServiceLane, Kind: "leader killed", What: "killed leader", Until: "healthy again"}
	if f.victim != nil {
		s.What += " " + f.victim.Name()
	}
	if f.resume != nil {
		s.What += " (replicas lagging)"
	}
	f.mu.Lock()
	if f.err == nil {
		s.End = f.healthy
	}
	f.mu.Unlock()
	return s
}

// Restore lets lagging replicas run again and restarts the killed member
// (Restarter), waiting up to Recovery for the whole service.
func (f *LeaderKill) Restore(ctx context.Context) error {
	err := f.unlag()
	f.mu.Lock()
	killed := f.killed
	f.mu.Unlock()
	if rs, ok := f.Service.(Restarter); ok && killed {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.Recovery)
		defer cancel()
		if rerr := rs.Restart(rctx); rerr != nil {
			err = errors.Join(err, fmt.Errorf("restarting %s: %w", f.victim.Name(), rerr))
		}
	}
	return err
}

var (
	_ = []Fault{(*Freeze)(nil), (*Partition)(nil), (*DropReplies)(nil), (*Stop)(nil), (*StopHolder)(nil), (*Stall)(nil),
		(*ServerStop)(nil), (*ClockJump)(nil), (*SessionKill)(nil), (*LeaderKill)(nil)}
	_ Aimable  = (*Stall)(nil)
	_ Restorer = (*LeaderKill)(nil)
	_ LagStep  = (*LeaderKill)(nil)
	_ Recovery = (*LeaderKill)(nil)
	_ Stopper  = Group(0)
)
