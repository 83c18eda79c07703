// Package kubetest starts the kube-apiserver that the Kubernetes adapters'
// tests run against.
package kubetest

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/internal/lockertest"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/services/kube"
	"github.com/locksuite/locksuite/harness/services/kube/kubetest"
)

// Start starts kube-apiserver (harness/services/kube/kubetest.APIServer) and stops it
// when the test ends, or skips the test when the binary is not built.
func Start(t *testing.T) *kube.APIServer {
	t.Helper()
	return kubetest.APIServer(t)
}

// Lease reads the Lease name in s's namespace.
func Lease(t *testing.T, s kube.API, name string) *coordinationv1.Lease {
	t.Helper()
	c, err := coordinationv1client.NewForConfig(s.RestConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Leases(s.Namespace()).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("read Lease %s: %v", name, err)
	}
	return l
}

// Holder is the Lease's holderIdentity, "" for none.
func Holder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// Exclusive runs clients Lockers that take the lock rounds times each, in
// turn, holding it 20 ms, and fails the test if two hold it at once, if a
// grant's fence is not larger than the grant's before it, or if the first
// fence is 0. It returns the fences in grant order.
func Exclusive(t *testing.T, clients, rounds int, newLocker func() backends.Locker) []uint64 {
	t.Helper()
	ls := make([]backends.Locker, clients)
	for i := range ls {
		ls[i] = newLocker()
	}
	fences := lockertest.Turns(t, ls, rounds, 20*time.Millisecond)
	if fences[0] == 0 {
		t.Fatalf("fences %v: want the first fence 1 or more", fences)
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Errorf("fences in grant order %v: %d after %d", fences, fences[i], fences[i-1])
		}
	}
	return fences
}

// Takeover is a waiting client's grant, and when its Acquire returned.
type Takeover struct {
	Lease backends.Lease
	At    time.Time
	Err   error
}

// Stall takes the lock with a, starts b acquiring it (so that b has seen
// a's record before a stalls), and after wait freezes p, a's path to the
// API server. It returns a's lease and the channel b's grant comes on.
func Stall(t *testing.T, ctx context.Context, a, b backends.Locker, p *faults.Path, wait time.Duration) (backends.Lease, <-chan Takeover) {
	t.Helper()
	ga, err := a.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan Takeover, 1)
	go func() {
		g, err := b.Acquire(ctx)
		got <- Takeover{g, time.Now(), err}
	}()
	time.Sleep(wait)
	p.Freeze()
	return ga, got
}
