package suite

import (
	"cmp"
	"slices"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/nodes"
	"github.com/locksuite/locksuite/harness/run"
)

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

// workers is a chaos scenario's load: Chaos.Workers worker processes for
// Chaos.Duration (and as long as the row's schedule lasts). With faulted,
// the row reports Chaos.Pause as the length of its pauses or stalls, and
// each stall lasts that long; with stalls, every Chaos.StallEvery-th
// section asks for one.
func workers(faulted, stalls bool) func(*Config, *run.Setup) run.Load {
	return func(c *Config, _ *run.Setup) run.Load {
		w := &run.Workers{Target: target(c), Argv: c.workerArgv, Env: c.WorkerEnv, Count: c.Chaos.Workers, For: c.Chaos.Duration, Starter: c.WorkerStarter}
		if w.Argv == nil {
			w.Argv = workerArgv("", false) // not a test binary (testArgv)
		}
		if faulted {
			w.Pause = c.Chaos.Pause
		}
		if stalls {
			w.StallEvery = c.Chaos.StallEvery
		}
		return w
	}
}

// pauses is a chaos scenario's schedule (faults.Pauses): Chaos.Pauses
// SIGSTOPs of Chaos.Pause each, Chaos.Interval apart, of random workers
// drawn from Chaos.Seed (a random seed if 0) or, targeted, of whichever
// worker holds the lock.
func pauses(targeted bool) func(*Config, *run.Fixture) (faults.Schedule, error) {
	return func(c *Config, fx *run.Fixture) (faults.Schedule, error) {
		ch := c.Chaos
		var holders faults.Holders
		if targeted {
			holders = fx.Holders
		}
		return faults.Pauses(cmp.Or(ch.Seed, randomSeed()), ch.Pauses, ch.Interval, ch.Pause, fx.Workers, holders), nil
	}
}

// stall is a stall scenario's fault: the worker that asks is stopped
// whole, or (goroutine) only its asking goroutine waits.
func stall(goroutine bool) func(*Config, *run.Fixture) faults.Fault {
	return func(_ *Config, fx *run.Fixture) faults.Fault {
		return &faults.Stall{Procs: fx.Workers, Goroutine: goroutine}
	}
}

// freezeA stalls holder A with its renewals.
func freezeA(_ *Config, fx *run.Fixture) faults.Fault {
	return &faults.Freeze{Path: fx.Paths[0], Locker: fx.Lockers[0], Lane: 0, Name: "A"}
}

// partitionA cuts A's lock-service path, or (blackhole) drops everything
// on it (faults.Partition).
func partitionA(blackhole bool) func(*Config, *run.Fixture) faults.Fault {
	return func(_ *Config, fx *run.Fixture) faults.Fault {
		return &faults.Partition{Path: fx.Paths[0], Blackhole: blackhole, Lane: 0, Name: "A"}
	}
}

// leaderKill kills the leader (the primary) and waits for the failover.
func leaderKill(c *Config, fx *run.Fixture) faults.Fault {
	return &faults.LeaderKill{Service: c.Servers, Recovery: recoveryTimeout, Clock: fx.Now}
}

// isolateLeaderAndA cuts the leader's node and A's off from every other
// node (nodes.Isolate): the node scenarios' partition.
func isolateLeaderAndA(_ *Config, fx *run.Fixture) faults.Fault {
	return nodes.AsFault(fx.Net, nodes.Isolate(nodes.All(len(fx.Net.Nodes())), fx.LeaderNode(), fx.ClientNodes[0]))
}

// partitions is partition-random's schedule: Chaos.Pauses partitions (at
// least one) drawn from Chaos.Seed (a random seed if 0) among every node
// (nodes.Schedule: halves, isolate, majorities ring, one-way), the first
// after 1 s, each 3 s cut then 2 s healed.
func partitions(c *Config, fx *run.Fixture) (faults.Schedule, error) {
	seed := cmp.Or(c.Chaos.Seed, randomSeed())
	drawn, err := nodes.Schedule(seed, nodes.All(len(fx.Net.Nodes())), max(c.Chaos.Pauses, 1),
		nodes.KindHalves, nodes.KindIsolate, nodes.KindRing, nodes.KindOneWay)
	if err != nil {
		return faults.Schedule{}, err
	}
	fs := make([]faults.Fault, len(drawn))
	for i, f := range drawn {
		fs[i] = nodes.AsFault(fx.Net, f)
	}
	s := faults.Spaced(fs, time.Second, 3*time.Second, 2*time.Second)
	s.Seed = seed
	return s, nil
}

// table is the suite: one row per scenario, in the order the specs run.
var table = append([]Scenario{
	{
		Name: Baseline, Expect: keeps,
		Text: Text{
			Keeps:    "keeps the counter equal to the acknowledged writes with no faults",
			Measures: "measures whether an update is lost with no faults",
		},
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
		Text: Text{
			Keeps:    "does not let an expired holder's Release remove the next holder's lock",
			Measures: "measures whether an expired holder's Release removes the next holder's lock",
		},
		unfenced: "release does not involve the store: this runs with fencing off",
		load:     func(*Config, *run.Setup) run.Load { return run.ReleaseProbe{} },
		fault:    freezeA,
	},

	{
		Name: Contract, Expect: keepsContract,
		Text: Text{
			Keeps:    "keeps the Locker contract: Acquire honours its context, Release of an expired lease is harmless, Acquire after Close returns ErrClosed, a second Close is harmless",
			Measures: "measures whether the Locker keeps its contract: Acquire honours its context, Release of an expired lease is harmless, Acquire after Close returns ErrClosed, a second Close is harmless",
		},
		load:  func(*Config, *run.Setup) run.Load { return run.Contract{Bound: contractBound} },
		fault: freezeA,
	},

	{
		Name: ChaosNone, Family: FamilyChaos, Expect: keeps,
		Text: Text{
			Keeps:    "keeps the invariant with worker processes and no faults",
			Measures: "measures whether an update is lost with worker processes and no faults",
		},
		load: workers(false, false),
	},
	{
		Name: PauseRandom, Family: FamilyChaos, Expect: lossy(Measures),
		Text: Text{
			Keeps:    "keeps the invariant when random workers are stopped (SIGSTOP) past the lease",
			Measures: "measures whether an update is lost when random workers are stopped (SIGSTOP) past the lease",
		},
		load:     workers(true, false),
		schedule: pauses(false),
	},
	{
		Name: PauseTargeted, Family: FamilyChaos, Expect: lossy(Loses),
		Text: Text{
			Keeps: "keeps the invariant when the holder is stopped (SIGSTOP) past the lease",
			Loses: "loses an update when the holder is stopped (SIGSTOP) past the lease",
		},
		load:     workers(true, false),
		schedule: pauses(true),
	},
	{
		Name: StallInSection, Family: FamilyChaos, Expect: lossy(Loses),
		Text: Text{
			Keeps: "keeps the invariant when a critical section stalls its whole process past the lease",
			Loses: "loses an update when a critical section stalls its whole process past the lease",
		},
		load:  workers(true, true),
		fault: stall(false),
	},
	{
		Name: StallGoroutine, Family: FamilyChaos, Expect: lossy(Measures),
		Text: Text{
			Keeps:    "keeps the invariant when the holder's goroutine stalls while its process runs on",
			Measures: "measures whether an update is lost when the holder's goroutine stalls while its process runs on",
		},
		load:  workers(true, true),
		fault: stall(true),
	},
	{
		Name: LongLease, Family: FamilyChaos, Expect: keeps,
		Text: Text{
			Keeps:    "keeps the invariant when pauses are shorter than the lease",
			Measures: "measures whether an update is lost when pauses are shorter than the lease",
		},
		load: func(c *Config, s *run.Setup) run.Load {
			s.Lease = c.Chaos.LongLease
			if s.Lease == 0 {
				s.Lease = c.Chaos.Pause * 5 / 2
			}
			return workers(true, false)(c, s)
		},
		schedule: pauses(false),
	},

	{
		Name: PartitionCut, Family: FamilyFault, Expect: lossy(Loses),
		Text: Text{
			Keeps: "does not lose an update when the holder's lock-service path is cut past its lease",
			Loses: "loses an update when the holder's lock-service path is cut past its lease",
		},
		load:  holderFault(run.Holder{}),
		fault: partitionA(false),
	},
	{
		Name: PartitionBlackhole, Family: FamilyFault, Expect: lossy(Loses),
		Text: Text{
			Keeps: "does not lose an update when the holder's lock-service path is blackholed past its lease",
			Loses: "loses an update when the holder's lock-service path is blackholed past its lease",
		},
		load:  holderFault(run.Holder{}),
		fault: partitionA(true),
	},
	{
		Name: ServerStall, Family: FamilyFault, Exclusive: true, Expect: lossy(Measures),
		Text: Text{
			Keeps:    "does not lose an update when the lock server is stopped (SIGSTOP) past the lease",
			Measures: "measures whether an update is lost when the lock server is stopped (SIGSTOP) past the lease",
		},
		// The stop lasts 2 × expiry (at least expiry + 500 ms); B then
		// has expiry + 1 s more.
		load: holderFault(run.Holder{
			Hold:   func(fx *run.Fixture) time.Duration { x := fx.Expiry(); return max(2*x, x+500*time.Millisecond) },
			Window: func(fx *run.Fixture, _ time.Time) time.Duration { return fx.Expiry() + time.Second },
		}),
		fault: func(c *Config, _ *run.Fixture) faults.Fault { return &faults.ServerStop{Service: c.Servers} },
	},
	{
		Name: SessionKill, Family: FamilyFault, Expect: lossy(Loses),
		Text: Text{
			Keeps: "does not lose an update when the holder's server session is terminated",
			Loses: "loses an update when the holder's server session is terminated",
		},
		load: holderFault(run.Holder{}),
		fault: func(_ *Config, fx *run.Fixture) faults.Fault {
			return &faults.SessionKill{Lease: fx.Lease0, Lane: 0, Name: "A"}
		},
	},
	{
		Name: ClockJump, Family: FamilyFault, Exclusive: true, Expect: lossy(Measures),
		Text: Text{
			Keeps:    "does not lose an update when the lock server's wall clock jumps forward",
			Measures: "measures whether an update is lost when the lock server's wall clock jumps forward",
		},
		// B tries until A's lease is three quarters through, by the
		// harness's clock: what B gets, it gets from the jump alone.
		load: holderFault(run.Holder{Window: func(fx *run.Fixture, granted time.Time) time.Duration {
			return max(time.Until(granted.Add(fx.TTL()*3/4)), time.Millisecond)
		}}),
		fault: func(c *Config, _ *run.Fixture) faults.Fault {
			return &faults.ClockJump{Service: c.Servers, By: clockJump}
		},
	},

	{
		Name: Failover, Family: FamilyCluster, Exclusive: true, Expect: lossyIfAsync(Loses),
		Text: Text{
			Keeps:    "keeps the invariant when the leader is killed while a holder is about to write",
			Loses:    "loses an update when the primary, its replicas lagging, is killed while a holder is about to write",
			Measures: "measures whether an update is lost when the leader is killed while a holder is about to write",
		},
		load:  func(*Config, *run.Setup) run.Load { return &run.Failover{Recovery: recoveryTimeout} },
		fault: leaderKill,
	},
	{
		Name: FailoverLoad, Family: FamilyCluster, Exclusive: true, Expect: lossyIfAsync(Measures),
		Text: Text{
			Keeps:    "keeps the invariant when the leader is killed under load",
			Measures: "measures whether an update is lost when the primary, its replicas lagging, is killed under load",
		},
		load: func(c *Config, _ *run.Setup) run.Load {
			return &run.Loop{Clients: c.Clients, For: c.Chaos.Duration, Work: c.Work, Retry: true}
		},
		fault: leaderKill,
	},
}, slices.Concat(nodesTable, crashTable, pitfallsTable)...)

// splitBrain is the split-brain load on a service started with o: 1 s of
// warm-up, the cut held 3 s past B's first grant (B waits at most 10 s),
// 3 s after the heal.
func splitBrain(o run.NodeOptions) func(*Config, *run.Setup) run.Load {
	return func(*Config, *run.Setup) run.Load {
		return &run.SplitBrain{Options: o, Warm: time.Second, Hold: 3 * time.Second, After: 3 * time.Second, Bound: 10 * time.Second}
	}
}

// nodesTable are the node scenarios: each load makes its network and
// starts the service there; the row's partition (or schedule of
// partitions) strikes it.
var nodesTable = []Scenario{
	{
		Name: SplitBrain, Family: FamilyNodes, Exclusive: true, Expect: lossy(Measures),
		Text: Text{
			Keeps:    "keeps the invariant when the primary and a client are partitioned from the Sentinels, the replica and another client",
			Measures: "measures overlapping grants and lost updates when the primary and a client are partitioned from the Sentinels, the replica and another client",
		},
		load:  splitBrain(run.NodeOptions{}),
		fault: isolateLeaderAndA,
	},
	{
		Name: SplitBrainMinReplicas, Family: FamilyNodes, Exclusive: true, Expect: lossy(Measures),
		Text: Text{
			Keeps:    "keeps the invariant in a split brain with min-replicas-to-write 1",
			Measures: "measures overlapping grants and lost updates in a split brain with min-replicas-to-write 1",
		},
		load:  splitBrain(run.NodeOptions{MinReplicas: true}),
		fault: isolateLeaderAndA,
	},
	{
		Name: IsolateLeader, Family: FamilyNodes, Exclusive: true, Expect: lossyIfAsync(Measures),
		Text: Text{
			Keeps:    "keeps the invariant when the leader is partitioned away with a holder attached to it",
			Measures: "measures whether an update is lost when the primary is partitioned away with a holder attached to it",
		},
		load: func(*Config, *run.Setup) run.Load {
			return &run.IsolateLeader{Hold: 3 * time.Second, After: 2 * time.Second}
		},
		fault: isolateLeaderAndA,
	},
	{
		Name: PartitionRandom, Family: FamilyNodes, Exclusive: true, Expect: lossyIfAsync(Measures),
		Text: Text{
			Keeps:    "keeps the invariant under random network partitions between servers and clients",
			Measures: "measures whether an update is lost under random network partitions between the primary, the Sentinels and clients",
		},
		load:     func(*Config, *run.Setup) run.Load { return &run.NodeLoop{Clients: 3} },
		schedule: partitions,
	},
}

// crashLease is the crash scenarios' shortest lease: longer than any
// restart measured (up to 8 s: nats-cluster's new meta leader) and B's
// try, so that A's lease is still running when A writes.
const crashLease = 20 * time.Second

// restart is the crash scenarios' load (run.Restart): four sections
// before the crash, B's try of at most 3 s after it, three sections after
// A's write; the lease at least crashLease.
func restart(c *Config, s *run.Setup) run.Load {
	s.Lease = max(c.Lease, crashLease)
	return &run.Restart{Before: 4, After: 3, Window: 3 * time.Second}
}

// crash kills the lock service and restarts it (faults.Crash): a single
// server, or every member of a cluster; with powerLoss, what it did not
// sync is lost.
func crash(powerLoss, cluster bool) func(*Config, *run.Fixture) faults.Fault {
	return func(c *Config, fx *run.Fixture) faults.Fault {
		return &faults.Crash{Service: c.Servers, PowerLoss: powerLoss, Cluster: cluster, Clock: fx.Now}
	}
}

// crashTable are the crash scenarios (issue 25): the lock service fails
// while a holder's lease is valid. Whether it forgets the lock depends on
// the service and its durability setting: unfenced with ExpectLoss, each
// measures.
var crashTable = []Scenario{
	{
		Name: ServerCrash, Family: FamilyCrash, Exclusive: true, Expect: lossy(Measures),
		Text: Text{
			Keeps:    "keeps the invariant when the lock server crashes and restarts while a holder is about to write",
			Measures: "measures whether an update is lost when the lock server crashes and restarts while a holder is about to write",
		},
		load:  restart,
		fault: crash(false, false),
	},
	{
		Name: PowerLoss, Family: FamilyCrash, Exclusive: true, Expect: lossy(Measures),
		Text: Text{
			Keeps:    "keeps the invariant when the lock server loses power (its unsynced writes dropped) and restarts while a holder is about to write",
			Measures: "measures whether an update is lost when the lock server loses power (its unsynced writes dropped) and restarts while a holder is about to write",
		},
		load:  restart,
		fault: crash(true, false),
	},
	{
		Name: ClusterCrash, Family: FamilyCrash, Exclusive: true, Expect: lossy(Measures),
		Text: Text{
			Keeps:    "keeps the invariant when every member of the cluster crashes and restarts while a holder is about to write",
			Measures: "measures whether an update is lost when every member of the cluster crashes and restarts while a holder is about to write",
		},
		load:  restart,
		fault: crash(false, true),
	},
	{
		Name: ClusterPowerLoss, Family: FamilyCrash, Exclusive: true, Expect: lossy(Measures),
		Text: Text{
			Keeps:    "keeps the invariant when every member of the cluster loses power (their unsynced writes dropped) and restarts while a holder is about to write",
			Measures: "measures whether an update is lost when every member of the cluster loses power (their unsynced writes dropped) and restarts while a holder is about to write",
		},
		load:  restart,
		fault: crash(true, true),
	},
}

// freezeB stalls B, the waiter, with its renewals.
func freezeB(_ *Config, fx *run.Fixture) faults.Fault {
	return &faults.Freeze{Path: fx.Paths[1], Locker: fx.Lockers[1], Lane: 1, Name: "B"}
}

// dropRepliesToA drops every reply of the lock service to A.
func dropRepliesToA(_ *Config, fx *run.Fixture) faults.Fault {
	return &faults.DropReplies{Path: fx.Paths[0], Lane: 0, Name: "A"}
}

// pitfallsTable are the pitfalls users report (issue 26; docs/pitfalls.md),
// each asked of every lock.
var pitfallsTable = []Scenario{
	{
		Name: WaiterStall, Family: FamilyPitfall, Expect: lossy(Measures),
		Text: Text{
			Keeps:    "does not grant a waiter that stalled past its lease while another client holds the lock",
			Measures: "measures whether a waiter that stalled past its lease is granted while another client holds the lock",
		},
		load:  func(*Config, *run.Setup) run.Load { return run.WaiterStall{} },
		fault: freezeB,
	},
	{
		Name: LostGrantReply, Family: FamilyPitfall, Expect: keeps,
		Text: Text{
			Keeps:    "does not grant the lock twice when the reply to a grant is lost and its client retries",
			Measures: "measures whether the lock is granted twice when the reply to a grant is lost and its client retries",
		},
		load:  func(*Config, *run.Setup) run.Load { return run.LostGrant{} },
		fault: dropRepliesToA,
	},
	{
		Name: MixedLease, Family: FamilyPitfall, Expect: keeps,
		Text: Text{
			Keeps:    "does not grant a client with a shorter lease the lock while the holder is inside its longer lease",
			Measures: "measures whether a client with a shorter lease is granted the lock while the holder is inside its longer lease",
		},
		load: func(*Config, *run.Setup) run.Load { return run.MixedLease{} },
	},
	{
		Name: ReleaseRace, Family: FamilyPitfall, Expect: keeps,
		Text: Text{
			Keeps:    "keeps the invariant when waiters and fresh clients race every release",
			Measures: "measures whether an update is lost when waiters and fresh clients race every release",
		},
		load: func(c *Config, _ *run.Setup) run.Load {
			return &run.ReleaseRace{Waiters: 3, Fresh: 2, For: c.Duration}
		},
	},
}
