package run

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/harness/checker"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/history"
	"github.com/locksuite/locksuite/harness/load"
	"github.com/locksuite/locksuite/harness/nodes"
	"github.com/locksuite/locksuite/harness/report"
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
	// from node from. via, if
	// not empty, are the members (indices in Members) the client talks to
	// directly; empty: the service's own discovery (every member, or the
	// Sentinels).
	NewLocker func(ctx context.Context, id int, key string, from *nodes.Node, via []int, lease time.Duration) (backends.Locker, error)
	// Stop ends every process.
	Stop func() error
}

// notOnNodes is why a backend without a NodeService skips.
const notOnNodes = "the node scenarios start the lock service anew on network namespaces, and this backend has no Config.Nodes (suite/local gives it to etcd-cluster, consul-cluster and redis-sentinel)"

// onNodes makes the run's network (the service's nodes, then one per
// client), starts the service there, makes the clients (client i on node
// Nodes+i, through via(i)), opens the counter and probes each client.
func (e *Env) onNodes(ctx context.Context, clients int, o NodeOptions, via func(p *Placed, leader, i int) []int) error {
	if e.Nodes == nil {
		return Skip(notOnNodes)
	}
	if err := nodes.Check(); err != nil {
		return Skip(err.Error())
	}
	nw, err := nodes.New(ctx, e.Nodes.Nodes+clients)
	if err != nil {
		if errors.Is(err, nodes.ErrNoPrivilege) {
			return Skip(err.Error())
		}
		return fmt.Errorf("suite: %s: nodes: %w", e.Backend, err)
	}
	e.closers = append(e.closers, func() { _ = nw.Close() })
	p, err := e.Nodes.Start(ctx, nw, o)
	if err != nil {
		return fmt.Errorf("suite: %s: starting the service on nodes: %w", e.Backend, err)
	}
	e.closers = append(e.closers, func() { _ = p.Stop() })
	e.Net, e.Placed = nw, p
	e.Service = p.Service
	leader := -1
	if ld, ok := p.Service.(faults.Leaderer); ok {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		m, err := ld.Leader(lctx)
		cancel()
		if err != nil {
			return fmt.Errorf("suite: %s: finding the leader: %w", e.Backend, err)
		}
		leader = slices.IndexFunc(p.Service.Members(), func(x faults.Member) bool { return x.Name() == m.Name() })
	}
	e.Leader = leader
	all := nw.Nodes()
	for i := range clients {
		var v []int
		if via != nil {
			v = via(p, leader, i)
		}
		from := all[e.Nodes.Nodes+i]
		l, err := p.NewLocker(ctx, i, e.Key, from, v, e.Lease)
		if err != nil {
			return fmt.Errorf("suite: %s: NewLocker for client %d on %s: %w", e.Backend, i, from, err)
		}
		e.Lockers = append(e.Lockers, l)
		e.Paths = append(e.Paths, nil)
		e.ClientNodes = append(e.ClientNodes, e.Nodes.Nodes+i)
	}
	if err := e.OpenStore(ctx, e.Fenced); err != nil {
		return err
	}
	for i := range clients {
		if err := e.Probe(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// leaderNode is the node of the leader (or primary) found when the run
// was prepared.
func (e *Env) leaderNode() int { return e.Placed.Members[e.Leader] }

// nodeLoop runs the critical sections of clients 0 to n-1 again and again,
// trying again after errors (each attempt bounded by attempt), until stop
// is closed or ctx is done. failed counts each client's attempts that ended
// in an error (no grant, or a write that failed), by client id.
func nodeLoop(ctx context.Context, e *Env, n int, stop <-chan struct{}, attempt time.Duration, failed []atomic.Int64) (wait func()) {
	lctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-stop:
		case <-lctx.Done():
		}
		cancel()
	}()
	waitClients := load.Clients(lctx, e.Lockers[:n], func(id int, l backends.Locker) bool {
		actx, acancel := context.WithTimeout(lctx, attempt)
		err := load.Increment(actx, id, l, e.Store, e.Rec, e.Work, load.Hooks{})
		acancel()
		if err != nil && !errors.Is(err, fencing.ErrStale) {
			if lctx.Err() == nil {
				failed[id].Add(1)
			}
			select {
			case <-lctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
		return true
	})
	return func() { waitClients(); cancel() }
}

// sleepCtx waits d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

// lastGrant is when client id was last granted in [from, to) (0: never).
func lastGrant(secs []history.Section, id int, from, to time.Duration) time.Duration {
	last := time.Duration(0)
	for _, s := range secs {
		if s.Client == id && s.Start >= from && s.Start < to && s.Start > last {
			last = s.Start
		}
	}
	return last
}

// firstGrant is when client id was first granted at or after t (0: never).
func firstGrant(secs []history.Section, id int, t time.Duration) time.Duration {
	first := time.Duration(0)
	for _, s := range secs {
		if s.Client == id && s.Start >= t && (first == 0 || s.Start < first) {
			first = s.Start
		}
	}
	return first
}

// awaitB waits until client 1 (B) is granted the lock after cutAt, for at
// most bound.
func awaitB(ctx context.Context, e *Env, cutAt, bound time.Duration) {
	deadline := time.After(bound)
	for firstGrant(e.Rec.Sections(), 1, cutAt) == 0 {
		select {
		case <-deadline:
			return
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// during summarises client id's sections granted in [from, to): how many,
// and their outcomes.
func during(secs []history.Section, id int, from, to time.Duration) string {
	n := 0
	by := map[history.Outcome]int{}
	for _, s := range secs {
		if s.Client == id && s.Start >= from && s.Start < to {
			n++
			by[s.Outcome]++
		}
	}
	return fmt.Sprintf("%d grants (%d writes accepted, %d rejected as stale, %d failed, %d aborted)",
		n, by[history.Accepted], by[history.Rejected], by[history.Failed], by[history.Aborted])
}

// grantOverlaps counts pairs of sections of different clients whose grants
// overlapped in time (Start to End), whatever their writes became: the
// lock granted twice.
func grantOverlaps(secs []history.Section) int {
	n := 0
	for i, a := range secs {
		for _, b := range secs[i+1:] {
			if a.Client != b.Client && a.Start < b.End && b.Start < a.End {
				n++
			}
		}
	}
	return n
}

// healthAfter waits until the service is healthy after the heal, for the
// row's Health.
func healthAfter(ctx context.Context, e *Env, healed time.Duration) string {
	if err := faults.WaitHealthy(context.WithoutCancel(ctx), recoveryBound, e.Service.Healthy); err != nil {
		return fmt.Sprintf("ok before; NOT healthy %v after the heal: %v", recoveryBound, err)
	}
	return fmt.Sprintf("ok before; ok %v after the heal", (e.Now() - healed).Round(time.Millisecond))
}

// recoveryBound bounds how long a node scenario waits for the service to
// fail over during a partition, and to be healthy after the heal.
const recoveryBound = 30 * time.Second

// attemptBound bounds each critical section attempt of a node scenario, so
// that a client cut off from its service tries again.
const attemptBound = 3 * time.Second

func nodeNames(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = fmt.Sprintf("n%d", n)
	}
	return strings.Join(s, ",")
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }

// SplitBrain is Jepsen's split brain of a primary watched by Sentinels:
// client A (client 0) talks to the primary directly, as a client with its
// connections open does, and B (client 1) through the Sentinels. Both
// increment for Warm; then the primary and A are cut off from the replica,
// the Sentinels and B (nodes.Isolate) until B has been granted and Hold has
// passed (B waits at most Bound, 30 s if 0); both keep acquiring and writing; then
// the cut heals and both go on for After, while the old primary rejoins
// as a replica.
type SplitBrain struct {
	Options                  NodeOptions
	Warm, Hold, After, Bound time.Duration
}

func (l *SplitBrain) Prepare(ctx context.Context, e *Env) error {
	err := e.onNodes(ctx, 2, l.Options, func(p *Placed, leader, i int) []int {
		if i == 0 {
			return []int{leader}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(e.Placed.Watchers) == 0 {
		return Skip("split-brain needs a primary failed over by watchers (Redis Sentinel): a consensus cluster has no primary that serves without a quorum; see isolate-leader")
	}
	return nil
}

func (l *SplitBrain) Planned(*Env) time.Duration { return l.Warm + l.Hold + l.After + 3*time.Second }

func (l *SplitBrain) Run(ctx context.Context, e *Env, _ faults.Fault) (Outcome, error) {
	t0 := e.Now()
	stop := make(chan struct{})
	failed := make([]atomic.Int64, 2)
	wait := nodeLoop(ctx, e, 2, stop, attemptBound, failed)
	end := sync.OnceFunc(func() { close(stop); wait() })
	defer end()
	sleepCtx(ctx, l.Warm)
	cut := nodes.Isolate(nodes.All(len(e.Net.Nodes())), e.leaderNode(), e.ClientNodes[0])
	heal, err := e.Log.Strike(ctx, nodes.AsFault(e.Net, cut), false)
	if err != nil {
		return Outcome{}, fmt.Errorf("suite: %s: %s: %w", e.Backend, cut, err)
	}
	cutAt := e.Now()
	awaitB(ctx, e, cutAt, cmp.Or(l.Bound, recoveryBound))
	sleepCtx(ctx, l.Hold)
	failedCut := [2]int64{failed[0].Load(), failed[1].Load()}
	if err := heal(); err != nil {
		return Outcome{}, fmt.Errorf("suite: %s: heal %s: %w", e.Backend, cut, err)
	}
	healed := e.Now()
	sleepCtx(ctx, l.After)
	end()
	health := healthAfter(ctx, e, healed)
	d := e.Now() - t0
	return Outcome{Elapsed: d, Amend: func(r *checker.Result) {
		secs := e.Rec.Sections()
		b := firstGrant(secs, 1, cutAt)
		bs := "B was not granted during the cut"
		if b != 0 && b < healed {
			bs = fmt.Sprintf("B's side first granted %s after the cut", ms(b-cutAt))
		} else if b != 0 {
			bs = fmt.Sprintf("B was first granted %s after the cut, %s after the heal", ms(b-cutAt), ms(b-healed))
		}
		as := "A was never granted during the cut"
		if a := lastGrant(secs, 0, cutAt, healed); a != 0 {
			as = fmt.Sprintf("A's last grant from the old primary %s after the cut", ms(a-cutAt))
		}
		r.Reason = strings.TrimSpace(fmt.Sprintf("%s; %s; during the %s cut A got %s and %d failed attempts, B got %s and %d failed attempts; grants that overlapped: %d. %s",
			bs, as, ms(healed-cutAt), during(secs, 0, cutAt, healed), failedCut[0], during(secs, 1, cutAt, healed), failedCut[1], grantOverlaps(secs), r.Reason))
	}, Row: func(r *report.Row) {
		r.Health = health
		availability(r, e.Rec, d)
	}}, nil
}

// IsolateLeader: A (client 0) holds a lease granted through the leader (or
// primary) only; the leader and A are cut off from the rest (nodes.Isolate)
// at once; A works on within its lease, by its own clock (it writes half
// its TTL after its grant), then keeps acquiring through the isolated
// leader; B (client 1) works through the majority from the cut on. The cut
// heals Hold after B's first grant (at most recoveryBound), and both go on
// for After.
type IsolateLeader struct {
	Hold, After time.Duration
}

func (l *IsolateLeader) Prepare(ctx context.Context, e *Env) error {
	return e.onNodes(ctx, 2, NodeOptions{}, func(p *Placed, leader, i int) []int {
		if i == 0 {
			return []int{leader}
		}
		var rest []int
		for m := range p.Members {
			if m != leader {
				rest = append(rest, m)
			}
		}
		if len(p.Watchers) > 0 {
			return nil // B finds the new primary through the Sentinels
		}
		return rest
	})
}

func (l *IsolateLeader) Planned(e *Env) time.Duration { return e.Expiry() + l.Hold + l.After }

func (l *IsolateLeader) Run(ctx context.Context, e *Env, _ faults.Fault) (Outcome, error) {
	t0 := e.Now()
	cut := nodes.Isolate(nodes.All(len(e.Net.Nodes())), e.leaderNode(), e.ClientNodes[0])
	var (
		heal      func() error
		cutAt     time.Duration
		granted   time.Duration
		strikeErr error
	)
	// A's first section: the cut strikes as soon as A is granted, before
	// any renewal can reach the majority.
	err := load.Increment(ctx, 0, e.Lockers[0], e.Store, e.Rec, e.Work, load.Hooks{
		Granted: func(backends.Lease) {
			granted = e.Now()
			heal, strikeErr = e.Log.Strike(ctx, nodes.AsFault(e.Net, cut), true)
			cutAt = e.Now()
		},
		BeforeWrite: func(ctx context.Context) {
			sleepCtx(ctx, granted+e.TTL()/2-e.Now())
		},
	})
	if strikeErr != nil {
		return Outcome{}, fmt.Errorf("suite: %s: %s: %w", e.Backend, cut, strikeErr)
	}
	if heal == nil {
		return Outcome{}, fmt.Errorf("suite: %s: A's first section through the leader: %w", e.Backend, err)
	}
	aFirst := "accepted"
	if err != nil {
		aFirst = err.Error()
	}
	stop := make(chan struct{})
	failed := make([]atomic.Int64, 2)
	wait := nodeLoop(ctx, e, 2, stop, attemptBound, failed)
	awaitB(ctx, e, cutAt, recoveryBound)
	sleepCtx(ctx, l.Hold)
	failedA := failed[0].Load()
	herr := heal()
	healed := e.Now()
	if herr == nil {
		sleepCtx(ctx, l.After)
	}
	close(stop)
	wait()
	if herr != nil {
		return Outcome{}, fmt.Errorf("suite: %s: heal %s: %w", e.Backend, cut, herr)
	}
	health := healthAfter(ctx, e, healed)
	d := e.Now() - t0
	expiry := granted + e.TTL()
	return Outcome{Elapsed: d, Amend: func(r *checker.Result) {
		secs := e.Rec.Sections()
		b := firstGrant(secs, 1, cutAt)
		var bs string
		switch {
		case b == 0:
			bs = "B was never granted"
		case b < expiry:
			bs = fmt.Sprintf("B WAS GRANTED BEFORE A's LEASE EXPIRED: %s after the cut, %s before A's lease (granted %s before the cut, TTL %v) expired by the majority's clock", ms(b-cutAt), ms(expiry-b), ms(cutAt-granted), e.TTL())
		case b < healed:
			bs = fmt.Sprintf("B was granted %s after the cut, %s after A's lease (TTL %v) expired by the majority's clock", ms(b-cutAt), ms(b-expiry), e.TTL())
		default:
			bs = fmt.Sprintf("B was granted only after the heal (%s after the cut)", ms(b-cutAt))
		}
		r.Reason = strings.TrimSpace(fmt.Sprintf("%s; A's write inside its lease: %s; A through the isolated leader during the %s cut: %s and %d failed attempts; grants that overlapped: %d. %s",
			bs, aFirst, ms(healed-cutAt), during(secs, 0, cutAt+time.Nanosecond, healed), failedA, grantOverlaps(secs), r.Reason))
	}, Row: func(r *report.Row) {
		r.Health = health
		availability(r, e.Rec, d)
	}}, nil
}

// PartitionRandom is Jepsen's random partitions under load: Clients
// clients, each on a node of its own, increment through the service's own
// discovery while the nemesis strikes Count faults drawn from Seed among
// every node (halves, isolate, majorities ring, one-way), each for Cut,
// then Healed with none. Every fault is a span of the row's schedule and a
// band on the timeline.
type PartitionRandom struct {
	Clients     int
	Count       int
	Cut, Healed time.Duration
	Seed        uint64
	schedule    []nodes.Fault
}

func (l *PartitionRandom) Prepare(ctx context.Context, e *Env) error {
	if err := e.onNodes(ctx, l.Clients, NodeOptions{}, nil); err != nil {
		return err
	}
	if l.Seed == 0 {
		l.Seed = rand.Uint64()
	}
	var err error
	l.schedule, err = nodes.Schedule(l.Seed, nodes.All(len(e.Net.Nodes())), l.Count,
		nodes.KindHalves, nodes.KindIsolate, nodes.KindRing, nodes.KindOneWay)
	return err
}

func (l *PartitionRandom) Planned(*Env) time.Duration {
	return time.Second + time.Duration(l.Count)*(l.Cut+l.Healed)
}

func (l *PartitionRandom) Run(ctx context.Context, e *Env, _ faults.Fault) (Outcome, error) {
	t0 := e.Now()
	stop := make(chan struct{})
	failed := make([]atomic.Int64, l.Clients)
	wait := nodeLoop(ctx, e, l.Clients, stop, attemptBound, failed)
	sleepCtx(ctx, time.Second)
	var ferr error
	for _, f := range l.schedule {
		if ctx.Err() != nil {
			break
		}
		heal, err := e.Log.Strike(ctx, nodes.AsFault(e.Net, f), false)
		if err != nil {
			ferr = fmt.Errorf("suite: %s: %s: %w", e.Backend, f, err)
			break
		}
		sleepCtx(ctx, l.Cut)
		if err := heal(); err != nil {
			ferr = fmt.Errorf("suite: %s: heal %s: %w", e.Backend, f, err)
			break
		}
		sleepCtx(ctx, l.Healed)
	}
	healed := e.Now()
	close(stop)
	wait()
	if ferr != nil {
		return Outcome{}, ferr
	}
	health := healthAfter(ctx, e, healed)
	d := e.Now() - t0
	return Outcome{Elapsed: d, Amend: func(r *checker.Result) {
		var f int64
		for i := range failed {
			f += failed[i].Load()
		}
		r.Reason = strings.TrimSpace(fmt.Sprintf("clients on %s; %d failed attempts; grants that overlapped: %d. %s",
			nodeNames(e.ClientNodes), f, grantOverlaps(e.Rec.Sections()), r.Reason))
	}, Row: func(r *report.Row) {
		r.Seed, r.Health, r.Workers = l.Seed, health, l.Clients
		availability(r, e.Rec, d)
	}}, nil
}
