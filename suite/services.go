package suite

import (
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/run"
)

// NodeService starts the lock service on nodes for the node scenarios
// (run.NodeService): Config.Nodes.
type NodeService = run.NodeService

// Placed is a lock service running on nodes (run.Placed).
type Placed = run.Placed

// NodeOptions change the service a node scenario starts (run.NodeOptions).
type NodeOptions = run.NodeOptions

// Servers gives the server-fault scenarios (a stopped lock server, a moved
// clock, a failed leader or primary) their hands on the lock service's own
// processes. Set Config.Servers to use them; a Config without Servers
// skips those scenarios. suite/local sets it for the servers it starts
// itself, never for servers the user names. It is faults.Service; see
// there for the contract.
type Servers = faults.Service

// Member is one server process of the lock service (faults.Member).
type Member = faults.Member

// Leaderer is an optional capability of Servers that can tell which member
// leads (faults.Leaderer); the failover scenarios need it.
type Leaderer = faults.Leaderer

// Lagger is an optional capability of Servers whose replication is
// asynchronous (faults.Lagger): the failover scenario makes the replicas
// lag before the holder acquires, so that its grant is lost with the
// leader.
type Lagger = faults.Lagger

// Restarter is an optional capability of Servers that restarts killed
// members (faults.Restarter).
type Restarter = faults.Restarter

// ClockJumper is an optional capability of a Member whose wall clock the
// harness can move (faults.ClockJumper); the clock-jump scenario needs it.
type ClockJumper = faults.ClockJumper

// Crasher is an optional capability of Servers that can kill the lock
// service and start it again on its data, with or without a power loss
// (faults.Crasher); the crash scenarios need it.
type Crasher = faults.Crasher

// CrashReport is what a Crasher's Crash did (faults.CrashReport).
type CrashReport = faults.CrashReport
