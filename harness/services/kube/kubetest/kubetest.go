// Package kubetest starts the harness's kube-apiserver for tests.
package kubetest

import (
	"testing"
	"time"

	"github.com/locksuite/locksuite/harness/servers/servertest"
	"github.com/locksuite/locksuite/harness/services/kube"
)

// APIServer starts kube-apiserver (kube.StartAPIServer) as
// servertest.Start does, logging how long it took, or skips the test under
// -short or when the binary is not built, saying how to build it.
func APIServer(t testing.TB) *kube.APIServer {
	t.Helper()
	if _, err := kube.APIServerBinary(); err != nil && !testing.Short() {
		t.Skipf("%v: run ci/setup.sh to build kube-apiserver %s (or set LOCKSUITE_KUBE_APISERVER)", err, kube.Version)
	}
	ctx := servertest.Slow(t, "starts a real kube-apiserver", 2*time.Minute)
	t0 := time.Now()
	s := servertest.Start(t, ctx, kube.StartAPIServer)
	t.Logf("kube-apiserver ready in %v", time.Since(t0).Round(time.Millisecond))
	return s
}
