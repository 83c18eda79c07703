package run

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/nodes"
	"github.com/locksuite/locksuite/harness/traffic"
	"github.com/locksuite/locksuite/internal/wait"
)

// NodeService starts a lock service anew on nodes (harness/nodes) for one
// run of a node scenario (split-brain, isolate-leader, partition-random):
// its processes take nodes 0 … Nodes-1 of a network the run makes, the
// clients get nodes of their own after them, and the counter store stays
// where it is (loopback in the coordinator, which no fault names), so that
// every side reaches it.
type NodeService struct {
	// Nodes is how many nodes the service's processes take.
	Nodes int
	// Start starts the service on nw's nodes 0 … Nodes-1 and waits until it
	// is healthy.
	Start func(ctx context.Context, nw *nodes.Network, o NodeOptions) (*Placed, error)
}

// NodeOptions change the service a node scenario starts.
type NodeOptions struct {
	// MinReplicas asks a primary/replica service for its own split-brain
	// mitigation (Redis: min-replicas-to-write 1, min-replicas-max-lag 1).
	MinReplicas bool
	_           struct{}
}

// Placed is a lock service running on nodes.
type Placed struct {
	// Service is its members (a faults.Leaderer: the leader or primary).
	Service faults.Service
	// Members[i] is the node of Service.Members()[i].
	Members []int
	// Watchers are the nodes of processes that watch the members and fail
	// them over without serving locks (Redis Sentinels); empty for a
	// consensus cluster.
	Watchers []int
	// NewLocker makes client id's Locker for the lock named key, dialling
	// from node from. via, if not empty, are the members (indices in
	// Members) the client talks to directly; empty: the service's own
	// discovery (every member, or the Sentinels).
	NewLocker func(ctx context.Context, id int, key string, from *nodes.Node, via []int, lease time.Duration) (backends.Locker, error)
	// Stop ends every process.
	Stop func() error
}

// notOnNodes is why a backend without a NodeService skips.
const notOnNodes = "the node scenarios start the lock service anew on network namespaces, and this backend has no Config.Nodes (suite/local gives it to etcd-cluster, consul-cluster and redis-sentinel)"

// onNodes makes the run's network (the service's nodes, then one per
// client), starts the service there, makes the clients (client i on node
// Nodes+i, through via(i)), opens the counter and probes each client.
func (fx *Fixture) onNodes(ctx context.Context, clients int, o NodeOptions, via func(p *Placed, leader, i int) []int) error {
	if fx.Nodes == nil {
		return Skip(notOnNodes)
	}
	if err := nodes.Check(); err != nil {
		return Skip(err.Error())
	}
	nw, err := nodes.New(ctx, fx.Nodes.Nodes+clients)
	if err != nil {
		if errors.Is(err, nodes.ErrNoPrivilege) {
			return Skip(err.Error())
		}
		return fmt.Errorf("nodes: %w", err)
	}
	fx.closers = append(fx.closers, func() { _ = nw.Close() })
	p, err := fx.Nodes.Start(ctx, nw, o)
	if err != nil {
		return fmt.Errorf("starting the service on nodes: %w", err)
	}
	fx.closers = append(fx.closers, func() { _ = p.Stop() })
	fx.Net, fx.Placed = nw, p
	fx.Servers = p.Service
	if fx.Leader, err = leaderOf(ctx, p); err != nil {
		return err
	}
	all := nw.Nodes()
	for i := range clients {
		var v []int
		if via != nil {
			v = via(p, fx.Leader, i)
		}
		from := all[fx.Nodes.Nodes+i]
		l, err := p.NewLocker(ctx, i, fx.Key, from, v, fx.Lease)
		if err != nil {
			return fmt.Errorf("NewLocker for client %d on %s: %w", i, from, err)
		}
		fx.Lockers = append(fx.Lockers, l)
		fx.Paths = append(fx.Paths, nil)
		fx.ClientNodes = append(fx.ClientNodes, fx.Nodes.Nodes+i)
	}
	if err := fx.OpenStore(ctx, fx.Fenced); err != nil {
		return err
	}
	for i := range clients {
		if err := fx.Probe(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// leaderOf is the member index of p's leader (or primary), -1 if its
// service cannot tell (faults.Leaderer).
func leaderOf(ctx context.Context, p *Placed) (int, error) {
	ld, ok := p.Service.(faults.Leaderer)
	if !ok {
		return -1, nil
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := ld.Leader(lctx)
	if err != nil {
		return -1, fmt.Errorf("finding the leader: %w", err)
	}
	return slices.IndexFunc(p.Service.Members(), func(x faults.Member) bool { return x.Name() == m.Name() }), nil
}

// LeaderNode is the node of the leader (or primary) found when the run was
// prepared; -1 if its service cannot tell (faults.Leaderer), which no
// partition accepts (its Applies says so).
func (fx *Fixture) LeaderNode() int {
	if fx.Leader < 0 {
		return -1
	}
	return fx.Placed.Members[fx.Leader]
}

// nodeLoop runs the critical sections of clients 0 to n-1 again and again,
// trying again after errors (each attempt bounded by attemptBound), until
// stop is closed or ctx is done. failed counts each client's attempts that
// ended in an error (no grant, or a write that failed), by client id.
func nodeLoop(ctx context.Context, fx *Fixture, n int, stop <-chan struct{}, failed []atomic.Int64) (join func()) {
	lctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-stop:
		case <-lctx.Done():
		}
		cancel()
	}()
	joinClients := traffic.Clients(lctx, fx.Lockers[:n], func(id int, l backends.Locker) bool {
		actx, acancel := context.WithTimeout(lctx, attemptBound)
		err := traffic.Increment(actx, id, l, fx.Store, fx.Rec, fx.Work, traffic.Hooks{})
		acancel()
		if err != nil && !errors.Is(err, fencing.ErrStale) {
			if lctx.Err() == nil {
				failed[id].Add(1)
			}
			_ = wait.For(lctx, 50*time.Millisecond)
		}
		return true
	})
	return func() { joinClients(); cancel() }
}

// healthAfter waits until the service is healthy after the heal, for the
// row's Health.
func healthAfter(ctx context.Context, fx *Fixture, healed time.Duration) string {
	if err := faults.WaitHealthy(context.WithoutCancel(ctx), recoveryBound, fx.Servers.Healthy); err != nil {
		return fmt.Sprintf("ok before; NOT healthy %v after the heal: %v", recoveryBound, err)
	}
	return fmt.Sprintf("ok before; ok %v after the heal", (fx.Now() - healed).Round(time.Millisecond))
}

// recoveryBound bounds how long a node scenario waits for the service to
// fail over during a partition, and to be healthy after the heal.
const recoveryBound = 30 * time.Second

// attemptBound bounds each critical section attempt of a node scenario, so
// that a client cut off from its service tries again.
const attemptBound = 3 * time.Second
