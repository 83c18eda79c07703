// Package leaderelection is the locksuite adapter for client-go's leader
// election (k8s.io/client-go/tools/leaderelection) on a Lease
// (resourcelock.LeaseLock), used as it ships: each Acquire runs a
// LeaderElector (NewLeaderElector and Run, which is what RunOrDie does
// without the panic) until it leads.
//
// The grant is OnStartedLeading, the loss OnStoppedLeading (Lost). Release
// cancels the elector's context with ReleaseOnCancel set, so that client-go
// writes its released record (no holder). LeaseDuration is the TTL (the
// Lease's leaseDurationSeconds: whole seconds, at least 1 s);
// RenewDeadline and RetryPeriod keep client-go's default proportions (10 s
// and 2 s of a 15 s lease): TTL × 2/3 and TTL × 2/15.
//
// client-go decides expiry by the candidate's own clock: a candidate takes
// the Lease once LeaseDuration has passed since it first saw the current
// record. What client-go 0.37.2 does with that, measured against a real
// kube-apiserver (this package's tests; docs/services/kubernetes.md has
// the figures):
//
//   - A candidate notices a renewal by comparing the record as JSON, where
//     renewTime has whole seconds: renewals within one second look alike,
//     so with RetryPeriod below 1 s a candidate may lead up to 1 s before
//     the lease ran out for the leader.
//   - A leader cut off from the API server gives up renewing after
//     RetryPeriod + RenewDeadline, then tries to release for another
//     RenewDeadline, and only then calls OnStoppedLeading: 1.47 ×
//     LeaseDuration after its last renewal at client-go's proportions,
//     after another candidate may lead.
//   - Its release reads the Lease again (refreshing the resourceVersion it
//     writes with) but judges leadership from its stale record: a release
//     answered after another candidate took the Lease clears that holder.
//     Release therefore does not keep the suite's contract (never remove
//     another grant's lock); this adapter does not hide it.
//
// # Fence
//
// client-go hands OnStartedLeading no record and offers no fencing token.
// The Lease it wrote has one candidate, leaseTransitions, which this adapter
// reads as it passes through: the LeaseLock is wrapped, unchanged, to keep
// the records client-go writes, and the fence is leaseTransitions + 1 of the
// write by which client-go took the Lease (0 means no token in the suite's contract; the
// first holder's count is 0). client-go increments the count when the
// holder identity changes, keeps it on renewal and release, and writes with
// a compare-and-swap on resourceVersion; so the count is strictly
// increasing across grants only when every grant has an identity of its
// own, which this adapter arranges (Identity-<n>, n counting the Locker's
// grants). With one identity per process, as deployments use (the pod's
// name), a leader that takes back its own expired Lease keeps the count:
// the count is then no fence.
package leaderelection

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/internal/kube"
)

// Config describes one client of one leader election.
type Config struct {
	// Rest is the API server and the credentials (a copy is used).
	// Required: kube.API.RestConfig (harness/services/kube), or clientcmd's from a kubeconfig.
	// The user needs get, create, update and delete on
	// coordination.k8s.io leases in Namespace.
	Rest *rest.Config
	// Dial, if not nil, makes every connection to the API server (TLS is
	// layered on top): pass suite.Client.Dial, so that the suite can
	// fault this client's network. Default: TCP.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// Namespace is the Lease's namespace. Required; it must exist.
	Namespace string
	// Name is the Lease object's name (a DNS subdomain). Required.
	Name string
	// Identity prefixes the holder identity of each grant, which is
	// Identity-<n> for the Locker's n-th Acquire. Default "locksuite-" and
	// 12 random hex digits; two clients must never share one.
	Identity string
	// TTL is LeaseDuration: a whole number of seconds, at least 1s. Default
	// 15s (client-go's usual value).
	TTL time.Duration
	// RenewDeadline is how long the leader keeps trying to renew before it
	// gives up. Default TTL × 2/3.
	RenewDeadline time.Duration
	// RetryPeriod is how often the leader renews and a candidate tries
	// (client-go adds up to 1.2 × RetryPeriod of jitter to a candidate's
	// wait). Default TTL × 2/15.
	RetryPeriod time.Duration
	_           struct{}
}

type locker struct {
	c      *kube.Client
	ns     string
	name   string
	id     string
	grants atomic.Uint64
	ttl    time.Duration
	renew  time.Duration
	retry  time.Duration
	held   kube.Holding
}

var (
	_ backends.Locker       = (*locker)(nil)
	_ backends.TTLer        = (*locker)(nil)
	_ backends.Cleaner      = (*locker)(nil)
	_ backends.LossNotifier = (*lease)(nil)
)

// New returns a Locker for cfg. It does not contact the API server; the
// durations are checked as client-go's NewLeaderElector checks them.
func New(cfg Config) (backends.Locker, error) {
	if err := kube.Check("leaderelection", cfg.Namespace, cfg.Name, &cfg.TTL, &cfg.RetryPeriod, &cfg.Identity); err != nil {
		return nil, err
	}
	if cfg.RenewDeadline == 0 {
		cfg.RenewDeadline = cfg.TTL * 2 / 3
	}
	l := &locker{ns: cfg.Namespace, name: cfg.Name, id: cfg.Identity, ttl: cfg.TTL, renew: cfg.RenewDeadline, retry: cfg.RetryPeriod}
	// Check the durations once, with a throwaway elector.
	if _, err := leaderelection.NewLeaderElector(l.config(&observedLock{LeaseLock: &resourcelock.LeaseLock{LockConfig: resourcelock.ResourceLockConfig{Identity: "check"}}}, nil)); err != nil {
		return nil, fmt.Errorf("leaderelection: TTL %v, RenewDeadline %v, RetryPeriod %v: %w", cfg.TTL, cfg.RenewDeadline, cfg.RetryPeriod, err)
	}
	c, err := kube.NewClient("leaderelection", cfg.Rest, cfg.Dial, cfg.Namespace)
	if err != nil {
		return nil, err
	}
	l.c = c
	return l, nil
}

// TTL is LeaseDuration. With RetryPeriod below 1 s a candidate may lead up
// to 1 s sooner after the leader's last renewal (see the package doc).
func (l *locker) TTL() time.Duration { return l.ttl }

// Expiry is TTL + 5.4 × RetryPeriod: a candidate waits up to 2.2 ×
// RetryPeriod between tries (client-go's jitter), so it sees the leader's
// last renewal up to that late, starts its LeaseDuration then, and tries
// again up to that late after it ran out; one more RetryPeriod is for the
// requests themselves.
func (l *locker) Expiry() time.Duration { return l.ttl + l.retry*54/10 }

// config is the elector's configuration for lock, with s's callbacks.
func (l *locker) config(lock *observedLock, s *lease) leaderelection.LeaderElectionConfig {
	cb := leaderelection.LeaderCallbacks{OnStartedLeading: func(context.Context) {}, OnStoppedLeading: func() {}}
	if s != nil {
		cb = leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { close(s.started) },
			OnStoppedLeading: func() { s.lostOnce.Do(func() { close(s.lost) }) },
		}
	}
	return leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   l.ttl,
		RenewDeadline:   l.renew,
		RetryPeriod:     l.retry,
		ReleaseOnCancel: true,
		Name:            l.name,
		Callbacks:       cb,
	}
}

// Acquire runs a new LeaderElector, with the identity Identity-<n>, until
// it leads or ctx is done (the elector then stops, releasing nothing it did
// not take).
func (l *locker) Acquire(ctx context.Context) (backends.Lease, error) {
	if l.held.Closed() {
		return nil, backends.ErrClosed
	}
	id := fmt.Sprintf("%s-%d", l.id, l.grants.Add(1))
	lock := &observedLock{LeaseLock: &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: l.ns, Name: l.name},
		Client:     l.c.Coordination,
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}}
	s := &lease{l: l, id: id, lock: lock, started: make(chan struct{}), lost: make(chan struct{}), done: make(chan struct{})}
	le, err := leaderelection.NewLeaderElector(l.config(lock, s))
	if err != nil {
		return nil, fmt.Errorf("leaderelection: %w", err)
	}
	// client-go logs every acquisition and renewal failure through klog;
	// the suite's output is its report, so the elector logs nowhere.
	runCtx, cancel := context.WithCancel(klog.NewContext(context.Background(), logr.Discard()))
	s.cancel = cancel
	go func() {
		defer close(s.done)
		le.Run(runCtx)
	}()
	select {
	case <-s.started:
		rec, ok := lock.grant()
		if !ok {
			// Not reachable: client-go calls OnStartedLeading only after
			// its own write made it the holder.
			_ = s.Release(context.Background())
			return nil, fmt.Errorf("leaderelection: %s leads without a record of its write", id)
		}
		s.fence = uint64(rec.LeaderTransitions) + 1
		l.held.Hold(s)
		return s, nil
	case <-ctx.Done():
		cancel()
		<-s.done
		return nil, fmt.Errorf("leaderelection: acquire %s/%s: %w", l.ns, l.name, ctx.Err())
	}
}

// Close releases a lease still held (bounded by RenewDeadline, client-go's
// own bound on its release) and closes the client's idle connections.
func (l *locker) Close() error {
	l.held.Close(l.c, func(s backends.Lease) { _ = s.Release(context.Background()) })
	return nil
}

// Cleanup deletes the Lease object.
func (l *locker) Cleanup(ctx context.Context) error { return l.c.Delete(ctx, l.name) }

type lease struct {
	l        *locker
	id       string
	lock     *observedLock
	fence    uint64
	cancel   context.CancelFunc
	started  chan struct{} // OnStartedLeading
	lost     chan struct{} // OnStoppedLeading
	lostOnce sync.Once
	done     chan struct{} // Run returned
}

func (s *lease) Fence() uint64 { return s.fence }

// Lost is closed by OnStoppedLeading: once the elector failed to renew for
// RenewDeadline and then tried to release (for up to another
// RenewDeadline), or after Release.
func (s *lease) Lost() <-chan struct{} { return s.lost }

// Release cancels the elector's context and waits for Run to return:
// client-go then writes its released record if it still deems itself the
// leader (ReleaseOnCancel). Release reports an error when, after that, the
// Lease still names this grant's identity (client-go's release failed: it
// only logs), or when the Lease cannot be read.
func (s *lease) Release(ctx context.Context) error {
	s.cancel()
	select {
	case <-s.done:
	case <-ctx.Done():
		return fmt.Errorf("leaderelection: release %s: %w", s.l.name, ctx.Err())
	}
	s.l.held.Released(s)
	if rec, ok := s.lock.last(); ok && rec.HolderIdentity == "" {
		return nil // client-go's release write succeeded
	}
	cur, err := s.l.c.Leases.Get(ctx, s.l.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("leaderelection: release %s: %w", s.l.name, err)
	}
	if cur.Spec.HolderIdentity != nil && *cur.Spec.HolderIdentity == s.id {
		return fmt.Errorf("leaderelection: release %s: client-go did not release it (the Lease still names %s)", s.l.name, s.id)
	}
	return nil
}

// observedLock is client-go's LeaseLock, unchanged, that also keeps the
// records of its successful Creates and Updates: the first that names its
// identity (the write by which client-go took the Lease) and the last.
type observedLock struct {
	*resourcelock.LeaseLock
	mu               sync.Mutex
	first, held, rec resourcelock.LeaderElectionRecord
	taken, have      bool
}

func (o *observedLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	err := o.LeaseLock.Create(ctx, r)
	if err == nil {
		o.keep(r)
	}
	return err
}

func (o *observedLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	err := o.LeaseLock.Update(ctx, r)
	if err == nil {
		o.keep(r)
	}
	return err
}

func (o *observedLock) keep(r resourcelock.LeaderElectionRecord) {
	o.mu.Lock()
	o.rec, o.have = r, true
	if r.HolderIdentity == o.Identity() {
		if !o.taken {
			o.first, o.taken = r, true
		}
		o.held = r
	}
	o.mu.Unlock()
}

// renewed is the last record written while client-go held the Lease: its
// RenewTime is when the last successful renewal began.
func (o *observedLock) renewed() resourcelock.LeaderElectionRecord {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.held
}

// grant is the record by which client-go took the Lease.
func (o *observedLock) grant() (resourcelock.LeaderElectionRecord, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.first, o.taken
}

func (o *observedLock) last() (resourcelock.LeaderElectionRecord, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.rec, o.have
}
