package suite

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/harness/load"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/servers"
)

// Fault scenario names: the holder's process runs on, and the fault is in
// its network path to the lock service or in the lock service itself. Each
// is one deterministic case like DeterministicPause: holder A acquires and
// reads, the fault strikes before A writes, B tries to get the lock and
// write, then A writes what it read.
const (
	// PartitionCut: A's lock-service path is cut (its connections closed,
	// new ones refused) until B's section ends, then healed. A still
	// reaches the store.
	PartitionCut = "partition-cut"
	// PartitionBlackhole: the same with a blackhole: A's connections stay
	// open and everything on them is dropped, in both directions.
	PartitionBlackhole = "partition-blackhole"
	// ServerStall: the lock server itself (the leader of a cluster) is
	// stopped with SIGSTOP for twice the lease's expiry (at least expiry +
	// 500 ms) and continued (Jepsen's "hammer time"). Needs Config.Servers.
	ServerStall = "server-stall"
	// SessionKill: A's server session is terminated from outside while A
	// holds the lock (pg_terminate_backend), as an administrator or a
	// failover would. Needs a Lease that implements backends.Terminator.
	SessionKill = "session-kill"
	// ClockJump: the lock server's wall clock jumps forward a minute while
	// A holds the lock; B may try for three quarters of A's lease, so that
	// A, writing next, is still inside its lease by its own clock. Needs a
	// Member that implements ClockJumper.
	ClockJump = "clock-jump"
)

// FaultScenarios lists the network and server fault scenarios.
var FaultScenarios = []string{PartitionCut, PartitionBlackhole, ServerStall, SessionKill, ClockJump}

func isFault(s string) bool {
	for _, f := range FaultScenarios {
		if f == s {
			return true
		}
	}
	return false
}

// clockJump is how far ClockJump moves the server's wall clock.
const clockJump = time.Minute

// holderFault is the fault of one faulted-holder run.
type holderFault struct {
	// what names the fault in the row's schedule ("cut A", "SIGSTOP redis").
	what string
	// inject starts the fault once A holds the lock (lease) and has read.
	// It returns how to undo it (nil: nothing to undo).
	inject func(ctx context.Context, lease backends.Lease) (heal func() error, err error)
	// hold, if positive, is how long the fault lasts before it is healed;
	// B then gets wait more. With hold 0 the fault lasts until B's section
	// ends or wait has passed, and is healed then.
	hold time.Duration
	// wait returns how long B may try, asked once the fault is in place;
	// granted is when A's lease was granted.
	wait func(granted time.Time) time.Duration
}

// runFault runs one fault scenario for cfg.
func runFault(ctx context.Context, cfg Config, runID, scenario string) (report.Row, error) {
	r := newRun(cfg, runID, scenario)
	defer r.close()
	if err := r.clients(ctx, 2, true); err != nil {
		return report.Row{}, err
	}
	if err := r.warm(ctx, 0); err != nil {
		return report.Row{}, err
	}
	a := r.lockers[0]
	ttl, expiry, ok := backends.TTLOf(a)
	if !ok {
		ttl, expiry = cfg.Lease, cfg.Lease
	}
	fixed := func(d time.Duration) func(time.Time) time.Duration { return func(time.Time) time.Duration { return d } }
	var f holderFault
	switch scenario {
	case PartitionCut, PartitionBlackhole:
		p := r.path(0)
		if p == nil {
			return report.Row{}, &skipError{noDial}
		}
		f = holderFault{what: "cut A", wait: fixed(stallTimeout(cfg, a)),
			inject: func(context.Context, backends.Lease) (func() error, error) {
				if scenario == PartitionCut {
					p.Cut()
				} else {
					p.Blackhole()
				}
				return func() error { p.Heal(); return nil }, nil
			}}
		if scenario == PartitionBlackhole {
			f.what = "blackhole A"
		}
	case ServerStall:
		if cfg.Servers == nil {
			return report.Row{}, &skipError{"Config.Servers is nil: no lock server process to stop (suite/local sets it for the servers it starts)"}
		}
		if len(cfg.Servers.Members()) == 0 {
			return report.Row{}, &skipError{"Servers.Members is empty: no lock server process to stop (an embedded server, like suite/local's etcd, runs inside the harness)"}
		}
		f = holderFault{what: "SIGSTOP", hold: max(2*expiry, expiry+500*time.Millisecond), wait: fixed(expiry + time.Second)}
		f.inject = func(ctx context.Context, _ backends.Lease) (func() error, error) {
			m, err := victim(ctx, cfg.Servers)
			if err != nil {
				return nil, err
			}
			f.what = "SIGSTOP " + m.Name()
			if err := m.Stop(); err != nil {
				_ = m.Cont()
				return nil, fmt.Errorf("suite: %s: stopping %s: %w", cfg.Name, m.Name(), err)
			}
			return m.Cont, nil
		}
	case SessionKill:
		f = holderFault{what: "terminate A's session", wait: fixed(stallTimeout(cfg, a)),
			inject: func(ctx context.Context, lease backends.Lease) (func() error, error) {
				t, ok := lease.(backends.Terminator)
				if !ok {
					return nil, &skipError{"the lease has no server session to terminate (its Lease does not implement backends.Terminator)"}
				}
				if err := t.Terminate(ctx); err != nil {
					return nil, fmt.Errorf("suite: %s: terminating A's session: %w", cfg.Name, err)
				}
				return nil, nil
			}}
	case ClockJump:
		if cfg.Servers == nil {
			return report.Row{}, &skipError{"Config.Servers is nil: no lock server whose clock can be moved (suite/local sets it for the servers it starts)"}
		}
		if len(cfg.Servers.Members()) == 0 {
			return report.Row{}, &skipError{"Servers.Members is empty: no lock server process whose clock can be moved (an embedded server, like suite/local's etcd, shares the harness's clock)"}
		}
		f = holderFault{what: fmt.Sprintf("clock +%v", clockJump),
			// B tries until A's lease is three quarters through, by the
			// harness's clock: what B gets, it gets from the jump alone.
			wait: func(granted time.Time) time.Duration {
				return max(time.Until(granted.Add(ttl*3/4)), time.Millisecond)
			},
		}
		f.inject = func(ctx context.Context, _ backends.Lease) (func() error, error) {
			m, err := victim(ctx, cfg.Servers)
			if err != nil {
				return nil, err
			}
			cj, ok := m.(ClockJumper)
			if !ok {
				return nil, &skipError{fmt.Sprintf("the wall clock of %s cannot be moved (its Member does not implement suite.ClockJumper)", m.Name())}
			}
			if err := cj.JumpClock(ctx, clockJump); err != nil {
				if errors.Is(err, errors.ErrUnsupported) {
					return nil, &skipError{err.Error()}
				}
				return nil, fmt.Errorf("suite: %s: moving the clock of %s: %w", cfg.Name, m.Name(), err)
			}
			f.what = fmt.Sprintf("clock of %s +%v", m.Name(), clockJump)
			return nil, nil
		}
	default:
		return report.Row{}, fmt.Errorf("suite: unknown fault scenario %q", scenario)
	}
	return runHolderFault(ctx, cfg, r, scenario, &f, ttl)
}

// victim is the member a server fault strikes: the leader when Servers can
// tell, else the first member.
func victim(ctx context.Context, s Servers) (Member, error) {
	if l, ok := s.(Leaderer); ok {
		m, err := l.Leader(ctx)
		if err != nil {
			return nil, fmt.Errorf("suite: finding the leader: %w", err)
		}
		return m, nil
	}
	return s.Members()[0], nil
}

// healthAfter waits up to 20 s for the lock service to be healthy again and
// says how long that took.
func healthAfter(ctx context.Context, s Servers) (time.Duration, error) {
	t0 := time.Now()
	err := servers.WaitHealthy(ctx, 20*time.Second, s.Healthy)
	return time.Since(t0), err
}

// runHolderFault is the faulted-holder case: A acquires and reads; f
// strikes; B runs one critical section, bounded by f's timing; f heals; A
// writes what it read.
func runHolderFault(ctx context.Context, cfg Config, r *run, scenario string, f *holderFault, ttl time.Duration) (report.Row, error) {
	a, b := r.lockers[0], r.lockers[1]
	s, err := r.store(ctx, cfg.Fenced)
	if err != nil {
		return report.Row{}, err
	}
	health := ""
	if cfg.Servers != nil {
		hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := cfg.Servers.Healthy(hctx)
		cancel()
		if err != nil {
			return report.Row{}, fmt.Errorf("suite: %s: the lock service is not healthy before the fault: %w", cfg.Name, err)
		}
		health = "ok before"
	}
	rec := r.recorder()
	r.started(scenario, expiry(cfg, a))
	t0 := time.Now()
	var (
		wg                     sync.WaitGroup
		lease                  backends.Lease
		grantedAt, wroteAt     time.Time
		errB, faultErr         error
		faultAt, faultFor      time.Duration
		bWaited                time.Duration
		bIn, told, faultStruck bool
	)
	errA := load.Increment(ctx, 0, a, s, rec, 0, load.Hooks{
		Granted: func(l backends.Lease) {
			lease, grantedAt = l, time.Now()
		},
		BeforeWrite: func(ctx context.Context) {
			defer func() { wroteAt = time.Now() }()
			start := time.Now()
			heal, err := f.inject(ctx, lease)
			if err != nil {
				faultErr = err
				return
			}
			faultStruck = true
			faultAt = start.Sub(t0)
			struck := rec.Now()
			healed := false
			doHeal := func() {
				if healed {
					return
				}
				healed = true
				if heal != nil {
					if err := heal(); err != nil && faultErr == nil {
						faultErr = err
					}
				}
				faultFor = time.Since(start)
				client, kind := faultLane(scenario)
				r.fault(client, struck, rec.Now(), kind)
			}
			defer doHeal() // whatever happens, a stopped server is continued
			wait := f.wait(grantedAt)
			bctx, cancel := context.WithTimeout(ctx, f.hold+wait)
			defer cancel()
			bStart := time.Now()
			done := make(chan struct{})
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer close(done)
				errB = load.Increment(bctx, 1, b, s, rec, 0, load.Hooks{})
			}()
			if f.hold > 0 {
				select {
				case <-time.After(f.hold):
				case <-ctx.Done():
				}
				doHeal()
			}
			select {
			case <-done:
				bIn = errB == nil || errors.Is(errB, fencing.ErrStale)
			case <-bctx.Done():
			}
			bWaited = time.Since(bStart)
			doHeal()
			if n, ok := lease.(backends.LossNotifier); ok {
				select {
				case <-n.Lost():
					told = true
				default:
				}
			}
		}})
	wg.Wait()
	d := time.Since(t0)
	if faultErr != nil { // a skipError, or the fault could not be made
		return report.Row{}, faultErr
	}
	if errA != nil && !errors.Is(errA, fencing.ErrStale) {
		return report.Row{}, fmt.Errorf("holder A: %w", errA)
	}
	if !faultStruck {
		return report.Row{}, fmt.Errorf("suite: %s: holder A never reached its write: the fault did not strike", cfg.Name)
	}
	secs := rec.Sections()
	if cfg.Fenced && len(secs) > 0 && secs[0].Fence == 0 {
		return report.Row{}, &skipError{"the backend gives no fencing token (Lease.Fence() is 0)"}
	}
	if errB != nil && !errors.Is(errB, context.DeadlineExceeded) && !errors.Is(errB, fencing.ErrStale) {
		return report.Row{}, fmt.Errorf("holder B: %w", errB)
	}
	if cfg.Servers != nil {
		took, err := healthAfter(ctx, cfg.Servers)
		if err != nil {
			return report.Row{}, fmt.Errorf("suite: %s: the lock service is not healthy %v after the fault healed: %w", cfg.Name, took.Round(time.Millisecond), err)
		}
		health += fmt.Sprintf("; ok %v after", took.Round(time.Millisecond))
	}
	if !bIn { // B never got in while A held: it gets its turn now
		if err := load.Increment(ctx, 1, b, s, rec, 0, load.Hooks{}); err != nil && !errors.Is(err, fencing.ErrStale) {
			return report.Row{}, fmt.Errorf("holder B after the fault: %w", err)
		}
	}
	res := finish(ctx, s, rec)
	var notes []string
	if res.Reason != "" {
		notes = append(notes, res.Reason)
	}
	if bIn {
		notes = append(notes, fmt.Sprintf("B got the lock and wrote %v into the fault", bWaited.Round(time.Millisecond)))
	} else {
		notes = append(notes, fmt.Sprintf("the lease held: B waited %v in vain", bWaited.Round(time.Millisecond)))
	}
	notes = append(notes, fmt.Sprintf("A wrote %v after its grant (lease %v)", wroteAt.Sub(grantedAt).Round(time.Millisecond), ttl))
	if _, ok := lease.(backends.LossNotifier); ok {
		if told {
			notes = append(notes, "A's lease had reported itself lost")
		} else {
			notes = append(notes, "A had not been told its lease was lost")
		}
	}
	res.Reason = strings.Join(notes, "; ")
	row := r.row(scenario, res, cfg.Fenced, d)
	row.Faults = 1
	row.PauseMS = faultFor.Milliseconds()
	row.Schedule = fmt.Sprintf("%s@%.2fs+%.2fs", f.what, faultAt.Seconds(), faultFor.Seconds())
	row.Health = health
	return r.keep(row), nil
}

// faultLane is where a fault scenario's fault is drawn on the timeline: on
// holder A's lane (0), or on every lane (-1) for a fault of the lock
// service itself; and what it is called there.
func faultLane(scenario string) (client int, kind string) {
	switch scenario {
	case PartitionCut:
		return 0, "cut"
	case PartitionBlackhole:
		return 0, "blackhole"
	case SessionKill:
		return 0, "session killed"
	case ServerStall:
		return -1, "server sigstop"
	default:
		return -1, "clock jump"
	}
}

// faultSpecs registers the fault scenarios (label "fault"). What each
// asserts:
//   - fenced, every scenario: the invariant holds;
//   - unfenced with ExpectLoss: partition-cut, partition-blackhole and
//     session-kill lose an update (B is let in while A still runs);
//   - server-stall and clock-jump unfenced: measured and reported, not
//     asserted: whether the lease expires across a stopped server, and
//     whether expiry follows the wall clock, is what they find out.
func faultSpecs(c *Config, runID string, record func(string, report.Row, error) report.Row) {
	for _, sc := range FaultScenarios {
		It(faultText[sc], Label("fault", sc), func(ctx SpecContext) {
			row, err := runFault(ctx, *c, runID, sc)
			row = record(sc, row, err)
			GinkgoWriter.Printf("fault: %s; health: %s; %s\n", row.Schedule, row.Health, row.Reason)
			switch {
			case c.Fenced:
				row.Expected = report.Kept
				publish(*c, row)
				Expect(row.Verdict).To(Equal(report.Kept), "%s (fault %s)", row.Reason, row.Schedule)
			case c.ExpectLoss && (sc == PartitionCut || sc == PartitionBlackhole || sc == SessionKill):
				row.Expected = report.Broken
				publish(*c, row)
				Expect(row.Verdict).To(Equal(report.Broken), "ExpectLoss is set, but the fault lost no update: %d writes, counter %d (%s)", row.Writes, row.Counter, row.Reason)
			default:
				publish(*c, row)
				Expect(row.Verdict).NotTo(Equal(report.Unknown), row.Reason)
			}
		}, SpecTimeout(specTimeout))
	}
}

var faultText = map[string]string{
	PartitionCut:       "does not lose an update when the holder's lock-service path is cut past its lease",
	PartitionBlackhole: "does not lose an update when the holder's lock-service path is blackholed past its lease",
	ServerStall:        "does not lose an update when the lock server is stopped (SIGSTOP) past the lease",
	SessionKill:        "does not lose an update when the holder's server session is terminated",
	ClockJump:          "does not lose an update when the lock server's wall clock jumps forward",
}
