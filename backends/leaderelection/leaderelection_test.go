package leaderelection

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/internal/kube/kubetest"
	"github.com/locksuite/locksuite/backends/internal/lockertest"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/role"
	"github.com/locksuite/locksuite/harness/services/kube"
)

// TestMain serves the roles this test binary is run again in (a cluster
// member, a Kubernetes node: harness/role) before any test.
func TestMain(m *testing.M) { os.Exit(role.Main(m)) }

func newLocker(t *testing.T, s kube.API, name string, ttl time.Duration, dial func(context.Context, string, string) (net.Conn, error)) *locker {
	t.Helper()
	l, err := New(Config{Rest: s.RestConfig(), Namespace: s.Namespace(), Name: name, TTL: ttl, Dial: dial})
	return lockertest.Managed(t, l, err, false).(*locker)
}

// TestConfig: client-go's own checks of the durations are applied by New.
func TestConfig(t *testing.T) {
	lockertest.Refuses(t, New, []lockertest.Refusal[Config]{
		{Cfg: Config{Namespace: "ns", Name: "n", TTL: 1500 * time.Millisecond}, Want: "whole number of seconds"},
		{Cfg: Config{Namespace: "ns", Name: "n", TTL: time.Second, RenewDeadline: 2 * time.Second}, Want: "leaseDuration must be greater than renewDeadline"},
		{Cfg: Config{Namespace: "ns", Name: "n", TTL: time.Second, RetryPeriod: 600 * time.Millisecond}, Want: "renewDeadline must be greater than retryPeriod"},
		{Cfg: Config{Namespace: "ns", Name: "n", TTL: time.Second}, Want: "Config.Rest is nil"},
	})
}

// TestExclusiveAndFenced: three electors lead in turn; no two lead at once,
// and each grant's fence (leaseTransitions + 1) is larger than the one
// before.
func TestExclusiveAndFenced(t *testing.T) {
	s := kubetest.Start(t)
	kubetest.Exclusive(t, 3, 4, func() backends.Locker { return newLocker(t, s, "exclusive", time.Second, nil) })
}

// stall makes a leader a (TTL ttl, its path to the API server p) and a
// waiting elector b (RetryPeriod retryB), freezes p half a second after a
// leads, and returns a's lease, and b's grant and when b.Acquire returned.
func stall(t *testing.T, ctx context.Context, s kube.API, name string, ttl, retryB time.Duration, p *faults.Path) (*lease, *lease, time.Time) {
	t.Helper()
	a := newLocker(t, s, name, ttl, p.Dial)
	bl, err := New(Config{Rest: s.RestConfig(), Namespace: s.Namespace(), Name: name, TTL: ttl, RetryPeriod: retryB})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bl.Close() })
	ga, got := kubetest.Stall(t, ctx, a, bl, p, 500*time.Millisecond)
	r := <-got
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	return ga.(*lease), r.Lease.(*lease), r.At
}

// TestStalledLeader freezes the leader's path to the API server while a
// second elector waits, and checks what client-go 0.37.2 does, as measured
// here (docs/services/kubernetes.md's figures, logged):
//
//   - The waiting elector leads no sooner than LeaseDuration − 1 s after the
//     leader's last renewal, not LeaseDuration: client-go notices a change
//     of the record by comparing it as JSON, where renewTime has whole
//     seconds, so it misses renewals within the same second when
//     RetryPeriod is below 1 s, as it is for a lease scaled below 7.5 s.
//   - The leader is told (OnStoppedLeading) by its own timer, without a
//     thaw, but only after it gave up renewing (RetryPeriod +
//     RenewDeadline) and then tried to release (ReleaseOnCancel) for
//     another RenewDeadline: RetryPeriod + 2 × RenewDeadline after its last
//     renewal, which with client-go's proportions is 0.47 × LeaseDuration
//     after the lease ran out, while the other elector leads.
func TestStalledLeader(t *testing.T) {
	s := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ttl = 2 * time.Second
	for round := range 3 {
		p := faults.NewPath()
		defer p.Close()
		a, b, at := stall(t, ctx, s, "stalled", ttl, ttl*2/15, p)
		last := a.lock.renewed().RenewTime.Time
		if took := at.Sub(last); took <= ttl-time.Second {
			t.Errorf("round %d: b led %v after a's last renewal, a second or more before the %v lease ran out", round, took, ttl)
		}
		if b.Fence() <= a.Fence() {
			t.Errorf("round %d: b's fence %d after a's %d", round, b.Fence(), a.Fence())
		}
		select {
		case <-a.Lost():
		case <-time.After(3 * ttl):
			t.Fatalf("round %d: a frozen leader got no OnStoppedLeading within %v", round, 3*ttl)
		}
		lostAt := time.Now()
		t.Logf("round %d: LeaseDuration %v, RenewDeadline %v, RetryPeriod %v: after a's last renewal b led at %v, a's OnStoppedLeading came at %v (%v after the lease ran out)",
			round, ttl, a.l.renew, a.l.retry, at.Sub(last).Round(time.Millisecond), lostAt.Sub(last).Round(time.Millisecond), lostAt.Sub(last.Add(ttl)).Round(time.Millisecond))
		p.Thaw()
		if err := a.Release(ctx); err != nil {
			t.Error(err)
		}
		if h := kubetest.Holder(kubetest.Lease(t, s, "stalled")); h != b.id {
			t.Errorf("round %d: after a's release timed out, the Lease names %q, want b (%s)", round, h, b.id)
		}
		if err := b.Release(ctx); err != nil {
			t.Error(err)
		}
	}
}

// TestLateReleaseClearsNextHolder pins a defect of client-go 0.37.2's
// release (ReleaseOnCancel): tryRelease reads the Lease again, which
// refreshes the resourceVersion its Update is conditioned on, but decides
// whether it still leads from its own stale record, not from what it read.
// A leader whose path was frozen gives up renewing and sends that read;
// when the path thaws after another elector took the Lease, the read
// returns the new holder's object, and the old leader's Update, now
// conditioned on the new holder's resourceVersion, succeeds: it clears the
// new holder's Lease (holderIdentity ""), and a third elector could lead at
// once beside it. If this test fails, client-go no longer does that: the
// leader-election rows of docs/services/kubernetes.md must change.
func TestLateReleaseClearsNextHolder(t *testing.T) {
	s := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ttl = 2 * time.Second
	p := faults.NewPath()
	defer p.Close()
	// b tries every 100 ms, so that it leads well before a's release read
	// times out (RetryPeriod + 2 × RenewDeadline = 2.93 s after a's last
	// renewal).
	a, b, _ := stall(t, ctx, s, "late", ttl, 100*time.Millisecond, p)
	// b may lead from LeaseDuration − 1 s after a's last renewal on, before
	// a gives up renewing (RetryPeriod + RenewDeadline after it) and sends
	// its release read: a thaw then would let a read b's record while still
	// renewing, and its release would touch nothing. So the path thaws once
	// that read is held on it, well before it times out (another
	// RenewDeadline later).
	last := a.lock.renewed().RenewTime.Time
	time.Sleep(time.Until(last.Add(a.l.retry + a.l.renew + 300*time.Millisecond)))
	select {
	case <-a.Lost():
		t.Fatal("a's release timed out before the thaw: the race this test needs did not happen")
	default:
	}
	p.Thaw()
	select {
	case <-a.Lost():
	case <-time.After(3 * ttl):
		t.Fatalf("a got no OnStoppedLeading within %v of the thaw", 3*ttl)
	}
	h := kubetest.Holder(kubetest.Lease(t, s, "late"))
	t.Logf("b (%s) leads; after a's late release the Lease names %q", b.id, h)
	if h != "" {
		t.Errorf("the Lease names %q after a's late release: client-go no longer clears the next holder (b is %s)", h, b.id)
	}
	_ = b.Release(ctx)
}
