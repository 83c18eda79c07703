package suite

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/load"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/run"
	"github.com/locksuite/locksuite/harness/worker"
)

// Scenario names, as used in labels, results and the CLI's --scenarios.
const (
	// Baseline: Clients clients increment for Duration with no faults.
	Baseline = "baseline"
	// Control: the same with a lock that grants everyone (fencing off).
	Control = "control"
	// DeterministicPause: holder A acquires and reads, then stalls: its
	// connections to the lock service freeze, renewals included. B's
	// Acquire returning is the signal that A's lease is gone; B reads and
	// writes; A resumes and writes what it read.
	DeterministicPause = "deterministic-pause"
	// ReleaseAfterExpiry: A stalls until B holds the lock, then releases;
	// C must not get in while B holds it (fencing off).
	ReleaseAfterExpiry = "release-after-expiry"

	// Contract: the promises of backends.Locker and backends.Lease, each
	// within contractBound: Acquire returns once its context is cancelled,
	// Release of an expired lease returns nil and leaves the next holder's
	// lock alone, Acquire after Close returns backends.ErrClosed, a second
	// Close returns nil (run.Contract).
	Contract = "contract"

	// ChaosNone: Chaos.Workers worker processes, no fault.
	ChaosNone = "chaos-none"
	// PauseRandom: every Chaos.Interval, SIGSTOP a random worker for
	// Chaos.Pause, then SIGCONT; Chaos.Pauses times (the chaos script of
	// "Testing Distributed Locks Under Pauses", the pause-testing guide
	// this suite follows).
	PauseRandom = "pause-random"
	// PauseTargeted: the same, but the victim is the worker holding the
	// lock, stopped after it has read.
	PauseTargeted = "pause-targeted"
	// StallInSection: every Chaos.StallEvery-th critical section stops its
	// whole worker process for Chaos.Pause before its write.
	StallInSection = "stall-in-section"
	// StallGoroutine: the same sections sleep Chaos.Pause in the holder's
	// goroutine only; background renewal goes on.
	StallGoroutine = "stall-goroutine"
	// LongLease: PauseRandom with the lease set to Chaos.LongLease, longer
	// than the pause.
	LongLease = "long-lease"

	// PartitionCut: A's lock-service path is cut (its connections closed,
	// new ones refused) until B's section ends, then healed; A still
	// reaches the store.
	PartitionCut = "partition-cut"
	// PartitionBlackhole: the same with a blackhole: A's connections stay
	// open and everything on them is dropped, in both directions.
	PartitionBlackhole = "partition-blackhole"
	// ServerStall: the lock server (a cluster's leader) is stopped with
	// SIGSTOP for twice the lease's expiry (at least expiry + 500 ms), then
	// continued (Jepsen's "hammer time"). Needs Config.Servers.
	ServerStall = "server-stall"
	// SessionKill: A's server session is terminated from outside while A
	// holds the lock. Needs a Lease that implements backends.Terminator.
	SessionKill = "session-kill"
	// ClockJump: the lock server's wall clock jumps a minute forward while
	// A holds the lock; B may try until A's lease is three quarters
	// through, so that A, writing next, is inside its lease by its own
	// clock. Needs a Member that implements ClockJumper.
	ClockJump = "clock-jump"

	// Failover: A acquires and reads; the leader (the primary) is killed
	// before A writes; B tries to acquire while the service fails over.
	// Needs Config.Servers implementing Leaderer.
	Failover = "failover"
	// FailoverLoad: Clients clients increment for Chaos.Duration; halfway,
	// the leader is killed.
	FailoverLoad = "failover-load"

	// SplitBrain: the service runs on nodes (Config.Nodes); client A talks
	// to the primary, B through the Sentinels; the primary and A are cut
	// off from the replica, the Sentinels and B until the Sentinels have
	// promoted the replica and B has been granted (at most 10 s), plus 3 s; both sides
	// acquire and write throughout; then the cut heals. Needs a primary
	// with watchers (redis-sentinel).
	SplitBrain = "split-brain"
	// SplitBrainMinReplicas: SplitBrain with Redis's own mitigation on both
	// servers (min-replicas-to-write 1, min-replicas-max-lag 1).
	SplitBrainMinReplicas = "split-brain-min-replicas"
	// IsolateLeader: on nodes, A holds a lease granted through the leader
	// (the primary) only; the leader and A are cut off from the rest at
	// once; A writes within its lease, then keeps acquiring through the
	// isolated leader; B works through the majority; the cut heals 3 s
	// after B's first grant.
	IsolateLeader = "isolate-leader"
	// PartitionRandom: on nodes, three clients on three nodes increment
	// while the nemesis strikes Chaos.Pauses faults (at least one) drawn
	// from Chaos.Seed (halves, isolate, majorities ring, one-way among
	// every node), each 3 s cut then 2 s healed.
	PartitionRandom = "partition-random"
)

// Scenario families: each is a label of its scenarios' specs.
const (
	FamilyChaos = "chaos" // worker processes stopped and stalled
	FamilyFault = "fault" // a holder's network, a server, a session, a clock
	// FamilyCluster: a cluster's leader killed (the failover scenarios).
	// Not "failover", which is a scenario's name: a label filter would
	// select both.
	FamilyCluster = "cluster"
	// FamilyNodes: a cluster started on network namespaces of its own and
	// partitioned (needs root: skipped otherwise, with the reason).
	FamilyNodes = "nodes"
)

// Expectation is what a spec asserts about its run's verdict.
type Expectation int

const (
	// Keeps: the run must come out kept. Its text says "keeps" or "does
	// not".
	Keeps Expectation = iota + 1
	// Loses: the run must come out broken: the control, and the scenarios
	// whose every fault lets a second holder in while the first runs on,
	// unfenced with Config.ExpectLoss. Its text says "loses".
	Loses
	// Measures: the run must reach a verdict, kept or broken, and reports
	// it; nothing more is asserted, because chance or the service's own
	// timing decides it. Its text says "measures".
	Measures
)

// Verdict is the verdict a spec of this expectation asserts, as
// report.Row.Expected: kept, broken, or measured.
func (x Expectation) Verdict() report.Verdict {
	switch x {
	case Keeps:
		return report.Kept
	case Loses:
		return report.Broken
	}
	return report.Measured
}

// Text is a scenario's spec text for each expectation it can have. Each
// text says what its spec asserts: Keeps starts with "keeps" or "does
// not", Loses with "loses", Measures with "measures".
type Text struct {
	Keeps, Loses, Measures string
}

// For is the text of a spec that asserts x.
func (t Text) For(x Expectation) string {
	switch x {
	case Keeps:
		return t.Keeps
	case Loses:
		return t.Loses
	}
	return t.Measures
}

// Scenario is one row of the suite's table: its name, its spec's text for
// each expectation, its labels, what it expects of a Config, and (not
// exported) its load and its fault.
type Scenario struct {
	Name   string
	Family string // "" for the core scenarios, else a Family constant
	Text   Text
	Labels []string // besides the backend's name, fenced/unfenced and Name
	// Expect says what the spec asserts for a Config: fenced or not, with
	// ExpectLoss or not, with Servers that replicate asynchronously or not.
	Expect func(c *Config) Expectation

	unfenced string                                   // if set, fenced Configs skip with this reason
	load     func(c *Config, s *run.Setup) run.Load   // the clients
	fault    func(c *Config, e *run.Env) faults.Fault // nil: none
	check    func(row report.Row)                     // more assertions, in a spec
}

// keeps: every Config must keep the invariant.
func keeps(*Config) Expectation { return Keeps }

// lossy is the rule of Config.ExpectLoss for a scenario whose outcome,
// unfenced, is x: fenced, or without ExpectLoss, the invariant must hold;
// unfenced with ExpectLoss, x (Loses where every fault lets a second holder
// in while the first runs on, Measures where chance or the service's timing
// decides).
func lossy(x Expectation) func(*Config) Expectation {
	return func(c *Config) Expectation {
		if c.Fenced || !c.ExpectLoss {
			return Keeps
		}
		return x
	}
}

// lossyIfAsync is lossy for a failover: only a service that replicates
// asynchronously (Lagger) can lose a grant with its leader; a
// consensus-replicated one must keep the invariant fenced or not.
func lossyIfAsync(x Expectation) func(*Config) Expectation {
	return func(c *Config) Expectation {
		if _, async := c.Servers.(Lagger); async {
			return lossy(x)(c)
		}
		return Keeps
	}
}

// contractBound is how long the contract lets each call take once it
// should return.
const contractBound = 2 * time.Second

// clockJump is how far ClockJump moves the server's wall clock.
const clockJump = time.Minute

// recoveryTimeout bounds how long a failover may take before the scenario
// reports the service as not recovered (an error, not a verdict).
const recoveryTimeout = 60 * time.Second

// holderFault: the fault scenarios' load, h with the service's health
// checked and the run explained in its reason.
func holderFault(h run.Holder) func(*Config, *run.Setup) run.Load {
	h.Health, h.Notes = true, true
	return func(*Config, *run.Setup) run.Load { l := h; return &l }
}

// chaos is a chaos scenario's load: the Config's Chaos, with pauses
// (random or targeted) or stalls in the given mode.
func chaos(pauses, targeted bool, stallMode string) func(*Config, *run.Setup) run.Load {
	return func(c *Config, s *run.Setup) run.Load {
		ch := c.Chaos
		w := &run.Workers{Target: target(c), Argv: c.workerArgv, Env: c.WorkerEnv, Count: ch.Workers,
			For: ch.Duration, Pause: ch.Pause, Interval: ch.Interval, Targeted: targeted, Seed: ch.Seed}
		if w.Argv == nil {
			w.Argv = workerArgv("")
		}
		if w.Seed == 0 {
			w.Seed = randomSeed()
		}
		if pauses {
			w.Pauses = ch.Pauses
		}
		if stallMode != "" {
			w.StallEvery, w.StallMode = ch.StallEvery, stallMode
		}
		return w
	}
}

// freezeA stalls holder A with its renewals.
func freezeA(_ *Config, e *run.Env) faults.Fault {
	return &faults.Freeze{Path: e.Paths[0], Locker: e.Lockers[0], Lane: 0, Name: "A"}
}

// table is the suite: one row per scenario, in the order the specs run.
var table = append([]Scenario{
	{
		Name: Baseline, Expect: keeps,
		Text: Text{Keeps: "keeps the counter equal to the acknowledged writes with no faults"},
		load: func(c *Config, _ *run.Setup) run.Load {
			return &run.Loop{Clients: c.Clients, For: c.Duration, Work: c.Work}
		},
		check: checkBaseline,
	},
	{
		Name: Control, Expect: func(*Config) Expectation { return Loses },
		Text:     Text{Loses: "loses updates under a lock that grants everyone, and the harness sees it (its own control)"},
		unfenced: "the control runs with fencing off: fencing rescues even a lock that always grants",
		load: func(c *Config, _ *run.Setup) run.Load {
			lockers := make([]backends.Locker, c.Clients)
			for i := range lockers {
				lockers[i] = alwaysGrant{}
			}
			return &run.Loop{Lockers: lockers, For: c.Duration, Work: max(c.Work, time.Millisecond)}
		},
		check: checkControl,
	},
	{
		Name: DeterministicPause, Expect: lossy(Loses),
		Text: Text{
			Keeps: "does not lose an update when a holder stalls past its lease",
			Loses: "loses an update when a holder stalls past its lease",
		},
		load:  func(*Config, *run.Setup) run.Load { return &run.Holder{} },
		fault: freezeA,
	},
	{
		Name: ReleaseAfterExpiry, Expect: keeps,
		Text:     Text{Keeps: "does not let an expired holder's Release remove the next holder's lock"},
		unfenced: "release does not involve the store: this runs with fencing off",
		load:     func(*Config, *run.Setup) run.Load { return run.ReleaseProbe{} },
		fault:    freezeA,
	},

	{
		Name: Contract, Expect: keeps,
		Text: Text{Keeps: "keeps the Locker contract: Acquire honours its context, Release of an expired lease is harmless, Acquire after Close returns ErrClosed, a second Close is harmless"},
		load: func(*Config, *run.Setup) run.Load { return run.Contract{Bound: contractBound} },
	},

	{
		Name: ChaosNone, Family: FamilyChaos, Expect: keeps,
		Text: Text{Keeps: "keeps the invariant with worker processes and no faults"},
		load: chaos(false, false, ""),
	},
	{
		Name: PauseRandom, Family: FamilyChaos, Expect: lossy(Measures),
		Text: Text{
			Keeps:    "keeps the invariant when random workers are stopped (SIGSTOP) past the lease",
			Measures: "measures whether an update is lost when random workers are stopped (SIGSTOP) past the lease",
		},
		load: chaos(true, false, ""),
	},
	{
		Name: PauseTargeted, Family: FamilyChaos, Expect: lossy(Loses),
		Text: Text{
			Keeps: "keeps the invariant when the holder is stopped (SIGSTOP) past the lease",
			Loses: "loses an update when the holder is stopped (SIGSTOP) past the lease",
		},
		load: chaos(true, true, ""),
	},
	{
		Name: StallInSection, Family: FamilyChaos, Expect: lossy(Loses),
		Text: Text{
			Keeps: "keeps the invariant when a critical section stalls its whole process past the lease",
			Loses: "loses an update when a critical section stalls its whole process past the lease",
		},
		load: chaos(false, false, worker.StallProcess),
	},
	{
		Name: StallGoroutine, Family: FamilyChaos, Expect: lossy(Measures),
		Text: Text{
			Keeps:    "keeps the invariant when the holder's goroutine stalls while its process runs on",
			Measures: "measures whether an update is lost when the holder's goroutine stalls while its process runs on",
		},
		load: chaos(false, false, worker.StallGoroutine),
	},
	{
		Name: LongLease, Family: FamilyChaos, Expect: keeps,
		Text: Text{Keeps: "keeps the invariant when pauses are shorter than the lease"},
		load: func(c *Config, s *run.Setup) run.Load {
			s.Lease = c.Chaos.LongLease
			if s.Lease == 0 {
				s.Lease = c.Chaos.Pause * 5 / 2
			}
			return chaos(true, false, "")(c, s)
		},
	},

	{
		Name: PartitionCut, Family: FamilyFault, Expect: lossy(Loses),
		Text: Text{
			Keeps: "does not lose an update when the holder's lock-service path is cut past its lease",
			Loses: "loses an update when the holder's lock-service path is cut past its lease",
		},
		load: holderFault(run.Holder{}),
		fault: func(_ *Config, e *run.Env) faults.Fault {
			return &faults.Partition{Path: e.Paths[0], Lane: 0, Name: "A"}
		},
	},
	{
		Name: PartitionBlackhole, Family: FamilyFault, Expect: lossy(Loses),
		Text: Text{
			Keeps: "does not lose an update when the holder's lock-service path is blackholed past its lease",
			Loses: "loses an update when the holder's lock-service path is blackholed past its lease",
		},
		load: holderFault(run.Holder{}),
		fault: func(_ *Config, e *run.Env) faults.Fault {
			return &faults.Partition{Path: e.Paths[0], Blackhole: true, Lane: 0, Name: "A"}
		},
	},
	{
		Name: ServerStall, Family: FamilyFault, Expect: lossy(Measures),
		Text: Text{
			Keeps:    "does not lose an update when the lock server is stopped (SIGSTOP) past the lease",
			Measures: "measures whether an update is lost when the lock server is stopped (SIGSTOP) past the lease",
		},
		// The stop lasts 2 × expiry (at least expiry + 500 ms); B then
		// has expiry + 1 s more.
		load: holderFault(run.Holder{
			Hold:   func(e *run.Env) time.Duration { x := e.Expiry(); return max(2*x, x+500*time.Millisecond) },
			Window: func(e *run.Env, _ time.Time) time.Duration { return e.Expiry() + time.Second },
		}),
		fault: func(c *Config, _ *run.Env) faults.Fault { return &faults.ServerStop{Service: c.Servers} },
	},
	{
		Name: SessionKill, Family: FamilyFault, Expect: lossy(Loses),
		Text: Text{
			Keeps: "does not lose an update when the holder's server session is terminated",
			Loses: "loses an update when the holder's server session is terminated",
		},
		load: holderFault(run.Holder{}),
		fault: func(_ *Config, e *run.Env) faults.Fault {
			return &faults.SessionKill{Lease: e.Lease0, Lane: 0, Name: "A"}
		},
	},
	{
		Name: ClockJump, Family: FamilyFault, Expect: lossy(Measures),
		Text: Text{
			Keeps:    "does not lose an update when the lock server's wall clock jumps forward",
			Measures: "measures whether an update is lost when the lock server's wall clock jumps forward",
		},
		// B tries until A's lease is three quarters through, by the
		// harness's clock: what B gets, it gets from the jump alone.
		load: holderFault(run.Holder{Window: func(e *run.Env, granted time.Time) time.Duration {
			return max(time.Until(granted.Add(e.TTL()*3/4)), time.Millisecond)
		}}),
		fault: func(c *Config, _ *run.Env) faults.Fault { return &faults.ClockJump{Service: c.Servers, By: clockJump} },
	},

	{
		Name: Failover, Family: FamilyCluster, Expect: lossyIfAsync(Loses),
		Text: Text{
			Keeps: "keeps the invariant when the leader is killed while a holder is about to write",
			Loses: "loses an update when the primary, its replicas lagging, is killed while a holder is about to write",
		},
		load:  func(*Config, *run.Setup) run.Load { return &run.Failover{Recovery: recoveryTimeout} },
		fault: leaderKill,
	},
	{
		Name: FailoverLoad, Family: FamilyCluster, Expect: lossyIfAsync(Measures),
		Text: Text{
			Keeps:    "keeps the invariant when the leader is killed under load",
			Measures: "measures whether an update is lost when the primary, its replicas lagging, is killed under load",
		},
		load: func(c *Config, _ *run.Setup) run.Load {
			return &run.Loop{Clients: c.Clients, For: c.Chaos.Duration, Work: c.Work, Retry: true}
		},
		fault: leaderKill,
	},
}, nodesTable...)

// nodesTable are the node scenarios: each load makes its network, starts
// the service there and strikes its own partitions (their spans are the
// row's schedule).
var nodesTable = []Scenario{
	{
		Name: SplitBrain, Family: FamilyNodes, Expect: lossy(Measures),
		Text: Text{
			Keeps:    "keeps the invariant when the primary and a client are partitioned from the Sentinels, the replica and another client",
			Measures: "measures overlapping grants and lost updates when the primary and a client are partitioned from the Sentinels, the replica and another client",
		},
		load: func(*Config, *run.Setup) run.Load {
			return &run.SplitBrain{Warm: time.Second, Hold: 3 * time.Second, After: 3 * time.Second, Bound: 10 * time.Second}
		},
	},
	{
		Name: SplitBrainMinReplicas, Family: FamilyNodes, Expect: lossy(Measures),
		Text: Text{
			Keeps:    "keeps the invariant in a split brain with min-replicas-to-write 1",
			Measures: "measures overlapping grants and lost updates in a split brain with min-replicas-to-write 1",
		},
		load: func(*Config, *run.Setup) run.Load {
			return &run.SplitBrain{Options: run.NodeOptions{MinReplicas: true}, Warm: time.Second, Hold: 3 * time.Second, After: 3 * time.Second, Bound: 10 * time.Second}
		},
	},
	{
		Name: IsolateLeader, Family: FamilyNodes, Expect: lossyIfAsync(Measures),
		Text: Text{
			Keeps:    "keeps the invariant when the leader is partitioned away with a holder attached to it",
			Measures: "measures whether an update is lost when the primary is partitioned away with a holder attached to it",
		},
		load: func(*Config, *run.Setup) run.Load {
			return &run.IsolateLeader{Hold: 3 * time.Second, After: 2 * time.Second}
		},
	},
	{
		Name: PartitionRandom, Family: FamilyNodes, Expect: lossyIfAsync(Measures),
		Text: Text{
			Keeps:    "keeps the invariant under random network partitions between servers and clients",
			Measures: "measures whether an update is lost under random network partitions between the primary, the Sentinels and clients",
		},
		load: func(c *Config, _ *run.Setup) run.Load {
			return &run.PartitionRandom{Clients: 3, Count: max(c.Chaos.Pauses, 1), Cut: 3 * time.Second, Healed: 2 * time.Second, Seed: c.Chaos.Seed}
		},
	},
}

// exclusive reports whether sc faults a server that other runs share (it
// stops, kills or moves the clock of the lock service, or starts one on
// network namespaces of its own): Execute runs it alone.
func (sc *Scenario) exclusive() bool {
	return sc.Family == FamilyCluster || sc.Family == FamilyNodes || sc.Name == ServerStall || sc.Name == ClockJump
}

func leaderKill(c *Config, e *run.Env) faults.Fault {
	return &faults.LeaderKill{Service: c.Servers, Recovery: recoveryTimeout, Clock: e.Now}
}

// Scenarios returns the suite's scenarios, in the order the specs run.
func Scenarios() []Scenario { return append([]Scenario(nil), table...) }

// Order lists every scenario's name, in the order the specs run: the order
// of a report's columns (report.Sort).
func Order() []string {
	out := make([]string, len(table))
	for i, sc := range table {
		out[i] = sc.Name
	}
	return out
}

// Names lists the names of the scenarios of family ("" for the core ones).
func Names(family string) []string {
	var out []string
	for _, sc := range table {
		if sc.Family == family {
			out = append(out, sc.Name)
		}
	}
	return out
}

func scenarioNamed(name string) *Scenario {
	for i := range table {
		if table[i].Name == name {
			return &table[i]
		}
	}
	return nil
}

// alwaysGrant is the control: a "lock" that grants every Acquire at once,
// like SET without NX. It gives no fence.
type alwaysGrant struct{}

func (alwaysGrant) Acquire(ctx context.Context) (backends.Lease, error) { return grant{}, ctx.Err() }
func (alwaysGrant) Close() error                                        { return nil }

type grant struct{}

func (grant) Fence() uint64                 { return 0 }
func (grant) Release(context.Context) error { return nil }

var runSeq atomic.Int64

func newRunID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// setup is what the run of scenario sc is told about cfg.
func setup(cfg *Config, runID, scenario string) run.Setup {
	f := "unfenced"
	if cfg.Fenced {
		f = "fenced"
	}
	key := fmt.Sprintf("%s/%s/%s/%s/%s-%d", cfg.Prefix, runID, cfg.Name, f, scenario, runSeq.Add(1))
	return run.Setup{
		Backend: cfg.Name, Scenario: scenario, Fenced: cfg.Fenced, Key: key,
		Lease: cfg.Lease, Work: cfg.Work, StallTimeout: cfg.StallTimeout,
		NewLocker: func(ctx context.Context, id int, dial run.Dialer, lease time.Duration) (backends.Locker, error) {
			return cfg.NewLocker(ctx, Client{ID: id, Key: key, Dial: dial, Lease: lease, Endpoint: cfg.Endpoint})
		},
		NewStore: cfg.NewStore, Service: cfg.Servers, Nodes: cfg.Nodes, Artifacts: cfg.Artifacts, Progress: cfg.Progress,
		Explain: func(err error) error { return explain(*cfg, scenario, err) },
	}
}

// run runs sc once for cfg: a skipped run returns an error wrapping
// faults.ErrNotApplicable.
func (sc *Scenario) run(ctx context.Context, cfg Config, runID string) (report.Row, error) {
	if cfg.Fenced && sc.unfenced != "" {
		return report.Row{}, faults.NotApplicable(sc.unfenced)
	}
	s := setup(&cfg, runID, sc.Name)
	l := sc.load(&cfg, &s)
	var fault func(*run.Env) faults.Fault
	if sc.fault != nil {
		fault = func(e *run.Env) faults.Fault { return sc.fault(&cfg, e) }
	}
	return run.Execute(ctx, s, l, fault)
}

// skipped is the row of a run that does not apply, and its reason; ok is
// false for any other error.
func skipped(cfg Config, scenario string, err error) (report.Row, bool) {
	if !errors.Is(err, faults.ErrNotApplicable) {
		return report.Row{}, false
	}
	return report.Row{Backend: cfg.Name, Fencing: cfg.Fenced, Scenario: scenario, Verdict: report.Skipped,
		Reason: err.Error(), LeaseMS: cfg.Lease.Milliseconds()}, true
}

// Run runs one scenario once for cfg outside Ginkgo and returns its result,
// judged but not asserted (Row.Expected is empty): for benchmarks and
// tools. A scenario that cannot run against this Locker returns a row
// whose Verdict is report.Skipped, with the reason, and a nil error.
//
// In a chaos worker process started by Run, Run for the worker's Config
// serves as the worker and exits the process: a tool that calls Run must
// build the same Config when it is run again as a worker.
//
// A panic of the Locker, Lease or Store under test, and an Acquire that
// does not return once its context is done, end the scenario with an error
// saying so (the scenario's clients, proxies and counter are removed
// first).
func Run(ctx context.Context, cfg Config, scenario string) (row report.Row, err error) {
	defer func() {
		if p := recover(); p != nil {
			row, err = report.Row{}, fmt.Errorf("suite: %s: %s: %w", cfg.Name, scenario, &load.PanicError{Value: p, Stack: debug.Stack()})
		}
	}()
	serveIfWorker(&cfg)
	if spec, ok, _ := worker.FromEnv(); ok {
		return report.Row{}, fmt.Errorf("suite: this process is a worker for %q, not for %q", spec.Target, target(&cfg))
	}
	if err := cfg.Validate(); err != nil {
		return report.Row{}, err
	}
	sc := scenarioNamed(scenario)
	if sc == nil {
		var names []string
		for _, s := range table {
			names = append(names, s.Name)
		}
		return report.Row{}, fmt.Errorf("suite: unknown scenario %q: choose from %s", scenario, strings.Join(names, ", "))
	}
	row, err = sc.run(ctx, cfg, newRunID())
	if r, ok := skipped(cfg, scenario, err); ok {
		r.LeaseMS = 0
		return r, nil
	}
	err = explain(cfg, scenario, err)
	if err != nil && !strings.HasPrefix(err.Error(), "suite: ") {
		err = fmt.Errorf("suite: %s: %s: %w", cfg.Name, scenario, err)
	}
	return row, err
}
