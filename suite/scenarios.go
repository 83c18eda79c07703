package suite

import (
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/run"
)

// Scenario names, as used in labels, results and the CLI's --scenarios.
// Each constant's doc is its row's (table.go): what the clients do, and
// what strikes them.
const (
	// Baseline: Clients clients increment for Duration with no faults.
	Baseline = "baseline"
	// Control: the same with a lock that grants everyone (fencing off).
	Control = "control"
	// DeterministicPause: holder A acquires and reads, then stalls: the
	// row's fault freezes A's connections to the lock service, renewals
	// included (faults.Freeze). B's Acquire returning is the signal that
	// A's lease is gone; B reads and writes; A resumes and writes what it
	// read.
	DeterministicPause = "deterministic-pause"
	// ReleaseAfterExpiry: A stalls (the row's fault: a freeze of A) until
	// B holds the lock, then releases; C must not get in while B holds it
	// (fencing off).
	ReleaseAfterExpiry = "release-after-expiry"

	// Contract: the promises of backends.Locker and backends.Lease, each
	// within contractBound: Acquire returns once its context is cancelled,
	// Release of an expired lease (A stalled by the row's fault, a freeze
	// of A, where it applies) returns nil and leaves the next holder's
	// lock alone, Acquire after Close returns backends.ErrClosed, a second
	// Close returns nil (run.Contract).
	Contract = "contract"

	// ChaosNone: Chaos.Workers worker processes, no fault.
	ChaosNone = "chaos-none"
	// PauseRandom: the row's schedule, drawn from Chaos.Seed: every
	// Chaos.Interval, SIGSTOP a random worker for Chaos.Pause, then
	// SIGCONT; Chaos.Pauses times (faults.Pauses: the chaos script of
	// "Testing Distributed Locks Under Pauses", the pause-testing guide
	// this suite follows).
	PauseRandom = "pause-random"
	// PauseTargeted: the same schedule, but each victim is the worker
	// holding the lock when the pause strikes, stopped between its read
	// and its write (faults.StopHolder), where a pause loses an update.
	PauseTargeted = "pause-targeted"
	// StallInSection: every Chaos.StallEvery-th critical section asks
	// before its write, and the row's fault stops its whole worker process
	// for Chaos.Pause (faults.Stall).
	StallInSection = "stall-in-section"
	// StallGoroutine: the same sections wait Chaos.Pause in the holder's
	// goroutine only (faults.Stall with Goroutine); background renewal
	// goes on.
	StallGoroutine = "stall-goroutine"
	// LongLease: PauseRandom with the lease set to Chaos.LongLease, longer
	// than the pause.
	LongLease = "long-lease"

	// PartitionCut: the row's fault cuts A's lock-service path (its
	// connections closed, new ones refused: faults.Partition) until B's
	// section ends, then heals it; A still reaches the store.
	PartitionCut = "partition-cut"
	// PartitionBlackhole: the same with a blackhole: A's connections stay
	// open and everything on them is dropped, in both directions.
	PartitionBlackhole = "partition-blackhole"
	// ServerStall: the row's fault stops the lock server (a cluster's
	// leader) with SIGSTOP for twice the lease's expiry (at least expiry +
	// 500 ms), then continues it (faults.ServerStop, Jepsen's "hammer
	// time"). Needs Config.Servers.
	ServerStall = "server-stall"
	// SessionKill: the row's fault terminates A's server session from
	// outside while A holds the lock (faults.SessionKill). Needs a Lease
	// that implements backends.Terminator.
	SessionKill = "session-kill"
	// ClockJump: the row's fault moves the lock server's wall clock a
	// minute forward while A holds the lock (faults.ClockJump); B may try
	// until A's lease is three quarters through, so that A, writing next,
	// is inside its lease by its own clock. Needs a Member that implements
	// ClockJumper.
	ClockJump = "clock-jump"

	// Failover: A acquires and reads; the row's fault kills the leader
	// (the primary) before A writes (faults.LeaderKill); B tries to
	// acquire while the service fails over. Needs Config.Servers
	// implementing Leaderer.
	Failover = "failover"
	// FailoverLoad: Clients clients increment for Chaos.Duration; halfway,
	// the row's fault kills the leader.
	FailoverLoad = "failover-load"

	// SplitBrain: the service runs on nodes (Config.Nodes); client A talks
	// to the primary, B through the Sentinels; the row's fault cuts the
	// primary and A off from the replica, the Sentinels and B
	// (nodes.Isolate) until the Sentinels have promoted the replica and B
	// has been granted (at most 10 s), plus 3 s; both sides acquire and
	// write throughout; then the cut heals. Needs a primary with watchers
	// (redis-sentinel).
	SplitBrain = "split-brain"
	// SplitBrainMinReplicas: SplitBrain with Redis's own mitigation on both
	// servers (min-replicas-to-write 1, min-replicas-max-lag 1).
	SplitBrainMinReplicas = "split-brain-min-replicas"
	// IsolateLeader: on nodes, A holds a lease granted through the leader
	// (the primary) only; the row's fault cuts the leader and A off from
	// the rest at once (nodes.Isolate); A writes within its lease, then
	// keeps acquiring through the isolated leader; B works through the
	// majority; the cut heals 3 s after B's first grant.
	IsolateLeader = "isolate-leader"
	// PartitionRandom: on nodes, three clients on three nodes increment
	// under the row's schedule: Chaos.Pauses partitions (at least one)
	// drawn from Chaos.Seed (nodes.Schedule: halves, isolate, majorities
	// ring, one-way among every node), the first after 1 s, each 3 s cut
	// then 2 s healed.
	PartitionRandom = "partition-random"

	// ServerCrash: A acquires and reads, after A and B have run four
	// sections (a fence counter has counted past them); the row's fault
	// kills the lock server (SIGKILL) and starts it again at once on the
	// same data and address (faults.Crash), before A writes; once it
	// serves again, B tries for at most 3 s while A's lease runs; A writes
	// and releases; three more sections follow, whose refusals by a fenced
	// store the row counts as stuck (run.Restart). The lease is at least
	// 20 s, longer than any restart measured, so that A's lease outlasts
	// the restart and a grant to B is the service's forgetting, not an
	// expiry; no run waits for it (A releases after its write). Needs
	// Config.Servers implementing Crasher, of a single server.
	ServerCrash = "server-crash"
	// PowerLoss: ServerCrash with a power loss: the crash also discards
	// what the server wrote and did not sync (Crasher.Crash with
	// powerLoss; suite/local's servers on a FUSE filesystem that keeps
	// unsynced data in memory, as Jepsen's LazyFS).
	PowerLoss = "power-loss"
	// ClusterCrash: ServerCrash with every member of a cluster killed at
	// once and restarted together. Needs Config.Servers implementing
	// Crasher and Leaderer (a cluster).
	ClusterCrash = "cluster-crash"
	// ClusterPowerLoss: ClusterCrash with a power loss of every member.
	ClusterPowerLoss = "cluster-power-loss"
)

// The pitfalls users report (issue 26; docs/pitfalls.md): FamilyPitfall.
const (
	// WaiterStall: A holds the lock; B waits in Acquire and the row's
	// fault freezes B (faults.Freeze of B) while it waits, past its own
	// lease; A releases; C acquires and reads; the freeze heals while C
	// holds the lock; B, once granted, writes at once (run.WaiterStall).
	WaiterStall = "waiter-stall"
	// LostGrantReply: the row's fault drops every reply of the lock
	// service to A (faults.DropReplies) while A asks for the free lock,
	// until A's Acquire times out (half the lease, at least 100 ms); then
	// the fault heals, and A retries while B asks (run.LostGrant).
	LostGrantReply = "lost-grant-reply"
	// MixedLease: A's lease is 4 × Config.Lease and B's Config.Lease
	// (Client.Lease per client); A holds and works for half its lease
	// while B asks (run.MixedLease). No fault.
	MixedLease = "mixed-lease"
	// ReleaseRace: 3 waiters and 2 fresh clients (a new Locker for each
	// critical section) race every release, with no work between read
	// and write, for Duration (run.ReleaseRace). No fault.
	ReleaseRace = "release-race"
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
	// FamilyCrash: the lock service killed and restarted on its data,
	// with or without a power loss.
	FamilyCrash = "crash"
	// FamilyPitfall: the pitfalls users report about their locks
	// (docs/pitfalls.md), each a question any lock can be asked.
	FamilyPitfall = "pitfall"
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
// each expectation, what it expects of a Config, and (not exported) its
// load and what strikes it: a fault, or a schedule of faults. Only the
// rows with no fault by definition (baseline, control, chaos-none,
// mixed-lease, release-race) have neither; none has both.
type Scenario struct {
	Name   string
	Family string // "" for the core scenarios, else a Family constant
	Text   Text
	// Expect says what the spec asserts for a Config: fenced or not, with
	// ExpectLoss or not, with Servers that replicate asynchronously or not.
	Expect func(c *Config) Expectation
	// Exclusive says the scenario faults what other runs share (it stops,
	// kills or moves the clock of the lock service, which may hold the
	// counter store too, or starts a service on network namespaces of its
	// own): Execute runs it alone on what it faults (Execute's Parallel).
	Exclusive bool

	unfenced string                                 // if set, fenced Configs skip with this reason
	load     func(c *Config, s *run.Setup) run.Load // the clients, and when they strike the fault
	// fault is the one fault the load strikes at the moment it defines (a
	// holder about to write, halfway through a loop, a worker that asks),
	// made once the load is prepared.
	fault func(c *Config, fx *run.Fixture) faults.Fault
	// schedule is the faults over the run's time, made once the load is
	// prepared and played beside it.
	schedule func(c *Config, fx *run.Fixture) (faults.Schedule, error)
	check    func(row report.Row) // more assertions, in a spec
}

// keeps: every Config must keep the invariant, but a lock that is unsafe
// by design (Config.Unsafe), unfenced with ExpectLoss, only measures it.
func keeps(c *Config) Expectation {
	if c.Unsafe != "" && !c.Fenced && c.ExpectLoss {
		return Measures
	}
	return Keeps
}

// keepsContract: the contract is the Locker's, not the store's, so neither
// fencing nor ExpectLoss changes it: a lock unsafe by design
// (Config.Unsafe) only measures it (a session lock through a transaction
// pooler can release the next holder's lock); every other Config must keep
// it.
func keepsContract(c *Config) Expectation {
	if c.Unsafe != "" {
		return Measures
	}
	return Keeps
}

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
		return keeps(c)
	}
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
