// Package k8slease is the locksuite adapter for a Kubernetes Lease object
// (coordination.k8s.io/v1) used as a lock directly, with the record and the
// expiry rule of client-go's leader election but none of its code.
//
// # Mechanism
//
// The lock is one Lease. Every write is a compare-and-swap: an Update
// carries the resourceVersion of the object it was computed from, and the
// API server refuses it (409 Conflict) if the object changed since.
//
//   - Acquire reads the Lease. Absent, it creates it (holderIdentity this
//     client, acquireTime and renewTime now, leaseDurationSeconds the TTL,
//     leaseTransitions 0). Present, it takes it with an Update when the
//     Lease is free: no holder (released), this client's own (a grant it
//     failed to release), or expired.
//   - Expired is judged as client-go's leaderelection judges it: by the
//     candidate's own clock, never by the renewTime written by another
//     machine's clock. The candidate notes when it first saw the Lease's
//     current record (any change of holder, times, duration or count resets
//     it) and deems the Lease expired once leaseDurationSeconds have passed
//     since then. A candidate that arrives late therefore waits a whole
//     lease from its first look, however long ago the holder stalled.
//   - The holder renews with an Update of renewTime every RetryPeriod. It
//     deems itself lost (Lost) when TTL has passed since the start of its
//     last successful write without another success, which is the earliest
//     moment a candidate, seeing that write at the earliest when it was
//     made, can take over (on clocks that run at the same rate), or when
//     a renewal finds another holder.
//   - Release writes the record client-go's leader election writes on
//     release (no holder, leaseDurationSeconds 1), with the resourceVersion
//     of the holder's last write: it cannot clear a later holder.
//
// # Fence
//
// The fencing token is leaseTransitions + 1 as written by the grant (0 is
// "no token" in the suite's contract, and the first grant's count is 0).
// This adapter increments leaseTransitions on every grant, its own leftover
// included, and keeps it on renewal and release; since each grant's write is
// a compare-and-swap on the object it read, no two grants write the same
// count, and a later grant writes a larger one. It is strictly increasing
// while only this adapter writes the Lease and the object is not deleted
// (Cleanup deletes it; a new object starts at 0 again). client-go's own
// leader election does not give that guarantee: it increments the count
// only when the holder identity changes, so a leader that takes back its
// own expired Lease under the same identity keeps the count (see package
// leaderelection). The resourceVersion would be a fence without those
// conditions (the API server sets it from etcd's modification revision,
// which grows with every write to the store), but the API documents it as
// opaque and a restore from backup may lower it; within this adapter's
// conditions leaseTransitions needs no such assumption.
package k8slease

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/internal/kube"
)

// Config describes one client of one Lease lock.
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
	// Identity is the holderIdentity this client writes. Default
	// "locksuite-" and 12 random hex digits; two clients must never share
	// one.
	Identity string
	// TTL is the lease: leaseDurationSeconds, so a whole number of seconds,
	// at least 1s. Default 15s (client-go's LeaseDuration default).
	TTL time.Duration
	// RetryPeriod is how often the holder renews and a waiting candidate
	// reads the Lease again. Default TTL × 2/15 (client-go's defaults: 2 s
	// of a 15 s lease); it must be below TTL.
	RetryPeriod time.Duration
	_           struct{}
}

type locker struct {
	c     *kube.Client
	name  string
	id    string
	ttl   time.Duration
	retry time.Duration
	held  kube.Holding // the lease not yet released, for Close
}

var (
	_ backends.Locker       = (*locker)(nil)
	_ backends.TTLer        = (*locker)(nil)
	_ backends.Cleaner      = (*locker)(nil)
	_ backends.LossNotifier = (*lease)(nil)
)

// New returns a Locker for cfg. It does not contact the API server.
func New(cfg Config) (backends.Locker, error) {
	if err := kube.Check("k8slease", cfg.Namespace, cfg.Name, &cfg.TTL, &cfg.RetryPeriod, &cfg.Identity); err != nil {
		return nil, err
	}
	if cfg.RetryPeriod < 0 || cfg.RetryPeriod >= cfg.TTL {
		return nil, fmt.Errorf("k8slease: RetryPeriod %v must be positive and below TTL %v", cfg.RetryPeriod, cfg.TTL)
	}
	c, err := kube.NewClient("k8slease", cfg.Rest, cfg.Dial, cfg.Namespace)
	if err != nil {
		return nil, err
	}
	return &locker{c: c, name: cfg.Name, id: cfg.Identity, ttl: cfg.TTL, retry: cfg.RetryPeriod}, nil
}

func (l *locker) TTL() time.Duration { return l.ttl }

// Expiry is TTL + 3 × RetryPeriod: a waiting candidate sees the holder's
// last renewal up to one RetryPeriod after it was written, starts its TTL
// then, and looks again one RetryPeriod later at most; the third is for
// the read and the write themselves (a 1 s lease was taken 1.269 s after
// the last renewal at most in 30 runs on a busy machine, where TTL + 2 ×
// RetryPeriod is 1.267 s).
func (l *locker) Expiry() time.Duration { return l.ttl + 3*l.retry }

// record is what the candidate compares to tell whether the Lease changed:
// client-go compares the same fields (its LeaderElectionRecord).
type record struct {
	holder          string
	acquire, renew  time.Time
	dur, transition int32
}

func recordOf(s *coordinationv1.LeaseSpec) record {
	var r record
	if s.HolderIdentity != nil {
		r.holder = *s.HolderIdentity
	}
	if s.AcquireTime != nil {
		r.acquire = s.AcquireTime.Time
	}
	if s.RenewTime != nil {
		r.renew = s.RenewTime.Time
	}
	if s.LeaseDurationSeconds != nil {
		r.dur = *s.LeaseDurationSeconds
	}
	if s.LeaseTransitions != nil {
		r.transition = *s.LeaseTransitions
	}
	return r
}

// spec is the Lease spec of a grant or renewal by holder at now.
func (l *locker) spec(holder string, acquire, now time.Time, transitions int32) coordinationv1.LeaseSpec {
	dur := int32(l.ttl / time.Second)
	return coordinationv1.LeaseSpec{
		HolderIdentity:       &holder,
		LeaseDurationSeconds: &dur,
		AcquireTime:          &metav1.MicroTime{Time: acquire},
		RenewTime:            &metav1.MicroTime{Time: now},
		LeaseTransitions:     &transitions,
	}
}

// Acquire reads the Lease every RetryPeriod until it is free or expired by
// this client's clock, then takes it with a compare-and-swap. Errors that
// asking again will not mend (refused credentials, a missing namespace)
// end it; others (a timeout, a server that is down) are retried until ctx
// is done.
func (l *locker) Acquire(ctx context.Context) (backends.Lease, error) {
	var (
		seen    record
		seenAt  time.Time
		haveRec bool
		last    error
	)
	wait := func() error {
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("k8slease: acquire %s: %w (last error: %v)", l.name, ctx.Err(), last)
			}
			return fmt.Errorf("k8slease: acquire %s: %w", l.name, ctx.Err())
		case <-time.After(l.retry):
			return nil
		}
	}
	for {
		if l.held.Closed() {
			return nil, backends.ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("k8slease: acquire %s: %w", l.name, err)
		}
		cur, err := l.c.Leases.Get(ctx, l.name, metav1.GetOptions{})
		now := time.Now()
		switch {
		case apierrors.IsNotFound(err) && !kube.Fatal(err):
			obj := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: l.name}, Spec: l.spec(l.id, now, now, 0)}
			made, err := l.c.Leases.Create(ctx, obj, metav1.CreateOptions{})
			if err == nil {
				return l.grant(made, now), nil
			}
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			if kube.Fatal(err) || apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("k8slease: create Lease %s: %w", l.name, err)
			}
			last = err
		case err != nil:
			if kube.Fatal(err) {
				return nil, fmt.Errorf("k8slease: read Lease %s: %w", l.name, err)
			}
			last = err
		default:
			r := recordOf(&cur.Spec)
			if !haveRec || r != seen {
				seen, seenAt, haveRec = r, now, true
			}
			held := r.holder != "" && r.holder != l.id && now.Before(seenAt.Add(time.Duration(r.dur)*time.Second))
			if !held {
				next := cur.DeepCopy()
				next.Spec = l.spec(l.id, now, now, r.transition+1)
				got, err := l.c.Leases.Update(ctx, next, metav1.UpdateOptions{})
				if err == nil {
					return l.grant(got, now), nil
				}
				if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
					continue // another candidate was first, or the Lease was deleted
				}
				if kube.Fatal(err) {
					return nil, fmt.Errorf("k8slease: take Lease %s: %w", l.name, err)
				}
				last = err
			}
		}
		if err := wait(); err != nil {
			return nil, err
		}
	}
}

// grant starts renewing obj, written by this client at start.
func (l *locker) grant(obj *coordinationv1.Lease, start time.Time) *lease {
	ctx, stop := context.WithCancel(context.Background())
	s := &lease{l: l, obj: obj, fence: uint64(*obj.Spec.LeaseTransitions) + 1, acquired: start,
		validUntil: start.Add(l.ttl), stop: stop, done: make(chan struct{}), lost: make(chan struct{})}
	l.held.Hold(s)
	go s.renew(ctx)
	return s
}

// Close stops renewing and releases a lease still held (bounded by 2 s),
// then closes the client's idle connections.
func (l *locker) Close() error {
	l.held.Close(l.c, func(s backends.Lease) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.Release(ctx)
	})
	return nil
}

// Cleanup deletes the Lease object.
func (l *locker) Cleanup(ctx context.Context) error { return l.c.Delete(ctx, l.name) }

type lease struct {
	l        *locker
	fence    uint64
	acquired time.Time
	stop     context.CancelFunc
	done     chan struct{} // closed when renew returns

	mu         sync.Mutex
	obj        *coordinationv1.Lease // the object of this client's last write
	validUntil time.Time             // start of the last successful write + TTL

	lost     chan struct{}
	lostOnce sync.Once

	relMu    sync.Mutex
	released bool
}

func (s *lease) Fence() uint64         { return s.fence }
func (s *lease) Lost() <-chan struct{} { return s.lost }
func (s *lease) markLost()             { s.lostOnce.Do(func() { close(s.lost) }) }

// renew writes renewTime every RetryPeriod, each write bounded by the
// lease's validity, until stopped or lost.
func (s *lease) renew(ctx context.Context) {
	defer close(s.done)
	l := s.l
	t := time.NewTicker(l.retry)
	defer t.Stop()
	for {
		s.mu.Lock()
		until := s.validUntil
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(until)):
			s.markLost()
			return
		case <-t.C:
		}
		start := time.Now()
		rctx, cancel := context.WithDeadline(ctx, until)
		ok, err := s.write(rctx, func(next *coordinationv1.Lease) {
			next.Spec = l.spec(l.id, s.acquired, start, int32(s.fence-1))
		})
		cancel()
		switch {
		case ok:
			s.mu.Lock()
			s.validUntil = start.Add(l.ttl)
			s.mu.Unlock()
		case err == nil: // another holder
			s.markLost()
			return
		}
	}
}

// write applies change to a copy of the lease's last object and writes it
// with a compare-and-swap. On a conflict it reads the Lease: while it is
// still this grant's (this client's identity and this grant's count: a
// renewal that timed out here may have been applied there), it tries again
// on the new object. ok is false with a nil error when the Lease is no
// longer this grant's.
func (s *lease) write(ctx context.Context, change func(*coordinationv1.Lease)) (ok bool, err error) {
	l := s.l
	for {
		s.mu.Lock()
		next := s.obj.DeepCopy()
		s.mu.Unlock()
		change(next)
		got, err := l.c.Leases.Update(ctx, next, metav1.UpdateOptions{})
		if err == nil {
			s.mu.Lock()
			s.obj = got
			s.mu.Unlock()
			return true, nil
		}
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if !apierrors.IsConflict(err) {
			return false, err
		}
		cur, err := l.c.Leases.Get(ctx, l.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		r := recordOf(&cur.Spec)
		if r.holder != l.id || r.transition != int32(s.fence-1) {
			return false, nil
		}
		s.mu.Lock()
		s.obj = cur
		s.mu.Unlock()
	}
}

// Release stops renewing and, if the Lease is still this grant's, writes
// the released record (no holder, leaseDurationSeconds 1, the count kept)
// with a compare-and-swap: a Lease taken by another holder since is left
// alone.
func (s *lease) Release(ctx context.Context) error {
	s.relMu.Lock()
	defer s.relMu.Unlock()
	if s.released {
		return nil
	}
	s.stop()
	<-s.done
	l := s.l
	now := time.Now()
	_, err := s.write(ctx, func(next *coordinationv1.Lease) {
		next.Spec = l.spec("", now, now, int32(s.fence-1))
		one := int32(1)
		next.Spec.LeaseDurationSeconds = &one
	})
	if err != nil {
		return fmt.Errorf("k8slease: release %s: %w", l.name, err)
	}
	s.released = true
	l.held.Released(s)
	return nil
}
