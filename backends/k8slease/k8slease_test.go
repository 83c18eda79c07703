package k8slease

import (
	"context"
	"net"
	"os"
	"sort"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

func newLocker(t *testing.T, s kube.API, name string, dial func(context.Context, string, string) (net.Conn, error)) *locker {
	t.Helper()
	l, err := New(Config{Rest: s.RestConfig(), Namespace: s.Namespace(), Name: name, TTL: time.Second, Dial: dial})
	return lockertest.Managed(t, l, err, false).(*locker)
}

// TestConfig: the Lease's duration is whole seconds, and a missing field is
// named.
func TestConfig(t *testing.T) {
	lockertest.Refuses(t, New, []lockertest.Refusal[Config]{
		{Cfg: Config{Namespace: "ns", Name: "n", TTL: 1500 * time.Millisecond}, Want: "whole number of seconds"},
		{Cfg: Config{Namespace: "ns", Name: "n", TTL: 500 * time.Millisecond}, Want: "at least 1s"},
		{Cfg: Config{Name: "n"}, Want: "Namespace"},
		{Cfg: Config{Namespace: "ns"}, Want: "Name"},
		{Cfg: Config{Namespace: "ns", Name: "n"}, Want: "Config.Rest is nil"},
		{Cfg: Config{Namespace: "ns", Name: "N_1"}, Want: "Lease name"},
	})
}

// TestExclusiveAndFenced: three clients take the Lease in turn; no two hold
// it at once and each grant's fence is larger than the one before.
func TestExclusiveAndFenced(t *testing.T) {
	s := kubetest.Start(t)
	kubetest.Exclusive(t, 3, 5, func() backends.Locker { return newLocker(t, s, "exclusive", nil) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := newLocker(t, s, "exclusive", nil).Cleanup(ctx); err != nil {
		t.Error(err)
	}
	if _, err := newLocker(t, s, "exclusive", nil).c.Leases.Get(ctx, "exclusive", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Lease after Cleanup: %v, want not found", err)
	}
}

// TestStalledHolder: a holder whose path to the API server is frozen is told
// it lost the lease, a waiting client takes the Lease no sooner than TTL
// after the holder's last renewal, and the holder's late Release, once its
// path is thawed, leaves the new holder's Lease alone. Ten rounds; the time
// from the last renewal to the takeover is logged (the expiry
// docs/services/kubernetes.md reports).
func TestStalledHolder(t *testing.T) {
	s := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var takeovers, notices []time.Duration
	for round := range 10 {
		p := faults.NewPath()
		defer p.Close()
		a := newLocker(t, s, "stalled", p.Dial)
		b := newLocker(t, s, "stalled", nil)
		ga, got := kubetest.Stall(t, ctx, a, b, p, 300*time.Millisecond)
		sa := ga.(*lease)
		select {
		case <-sa.Lost():
		case <-time.After(10 * time.Second):
			t.Fatal("a frozen holder was not told of its loss within 10s")
		}
		lostAt := time.Now()
		r := <-got
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		sa.mu.Lock()
		last := sa.validUntil.Add(-a.ttl)
		sa.mu.Unlock()
		took := r.At.Sub(last)
		if took < a.ttl {
			t.Errorf("round %d: b took the Lease %v after a's last renewal, before the %v lease ran out", round, took, a.ttl)
		}
		takeovers = append(takeovers, took)
		notices = append(notices, lostAt.Sub(last))
		if r.Lease.Fence() <= ga.Fence() {
			t.Errorf("round %d: b's fence %d after a's %d", round, r.Lease.Fence(), ga.Fence())
		}
		p.Thaw()
		if err := ga.Release(ctx); err != nil {
			t.Errorf("round %d: a's late Release: %v", round, err)
		}
		if h := kubetest.Holder(kubetest.Lease(t, s, "stalled")); h != b.id {
			t.Errorf("round %d: after a's late Release the Lease names %q, want b (%s)", round, h, b.id)
		}
		select {
		case <-r.Lease.(*lease).Lost():
			t.Errorf("round %d: b lost the Lease after a's late Release", round)
		default:
		}
		if err := r.Lease.Release(ctx); err != nil {
			t.Error(err)
		}
	}
	sort.Slice(takeovers, func(i, j int) bool { return takeovers[i] < takeovers[j] })
	sort.Slice(notices, func(i, j int) bool { return notices[i] < notices[j] })
	t.Logf("TTL 1s, RetryPeriod %v: takeover after the last renewal: min %v median %v max %v; holder told after: min %v max %v",
		time.Second*2/15, takeovers[0].Round(time.Millisecond), takeovers[len(takeovers)/2].Round(time.Millisecond), takeovers[len(takeovers)-1].Round(time.Millisecond),
		notices[0].Round(time.Millisecond), notices[len(notices)-1].Round(time.Millisecond))
}

// TestServerStalled stops kube-apiserver (SIGSTOP) under a holder: the
// holder is told of its loss by its own clock while the server is stopped,
// and once it runs again a waiting client takes the Lease with a larger
// fence, which the first holder's Release leaves alone.
func TestServerStalled(t *testing.T) {
	s := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := newLocker(t, s, "server-stalled", nil)
	b := newLocker(t, s, "server-stalled", nil)
	ga, err := a.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan backends.Lease, 1)
	go func() {
		g, err := b.Acquire(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- g
	}()
	time.Sleep(300 * time.Millisecond)
	if err := s.Member().Stop(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ga.(*lease).Lost():
	case <-time.After(5 * time.Second):
		t.Error("the holder was not told of its loss while kube-apiserver was stopped")
	}
	select {
	case <-got:
		t.Error("b took the Lease while kube-apiserver was stopped")
	default:
	}
	if err := s.Member().Cont(); err != nil {
		t.Fatal(err)
	}
	gb := <-got
	if gb == nil {
		t.FailNow()
	}
	if gb.Fence() <= ga.Fence() {
		t.Errorf("b's fence %d after a's %d", gb.Fence(), ga.Fence())
	}
	if err := ga.Release(ctx); err != nil {
		t.Error(err)
	}
	if h := kubetest.Holder(kubetest.Lease(t, s, "server-stalled")); h != b.id {
		t.Errorf("after a's Release the Lease names %q, want b (%s)", h, b.id)
	}
}
