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

	"github.com/locksuite/locksuite/harness/servers"
)

// Start starts kube-apiserver (servers.StartKubeAPIServer) and stops it
// when the test ends, or skips the test when the binary is not built.
func Start(t *testing.T) *servers.KubeAPIServer {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real kube-apiserver")
	}
	if _, err := servers.KubeAPIServerBinary(); err != nil {
		t.Skipf("%v: run ci/setup.sh to build kube-apiserver %s (or set LOCKSUITE_KUBE_APISERVER)", err, servers.KubeAPIServerVersion)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t0 := time.Now()
	s, err := servers.StartKubeAPIServer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-apiserver ready in %v", time.Since(t0).Round(time.Millisecond))
	t.Cleanup(func() { s.Stop() })
	return s
}

// Lease reads the Lease name in s's namespace.
func Lease(t *testing.T, s servers.Kube, name string) *coordinationv1.Lease {
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
