package kube

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/locksuite/locksuite/harness/role"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/harness/servers/servertest"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// TestMain serves the roles this test binary is run again in (a cluster
// member, a Kubernetes node: harness/role) before any test.
func TestMain(m *testing.M) { os.Exit(role.Main(m)) }

// startKube starts kube-apiserver for a test, or skips the test when the
// binary is not built.
func startKube(t *testing.T) *APIServer {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real kube-apiserver")
	}
	if _, err := APIServerBinary(); err != nil {
		t.Skipf("%v: run ci/setup.sh to build kube-apiserver %s (or set LOCKSUITE_KUBE_APISERVER)", err, Version)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t0 := time.Now()
	s, err := StartAPIServer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-apiserver ready in %v", time.Since(t0).Round(time.Millisecond))
	return s
}

// TestAPIServer starts kube-apiserver, writes a Lease through the
// RestConfig, checks that it cannot crash (not started WithCrash), stops
// the process (SIGSTOP: a request then times out) and continues it, and
// checks that Stop leaves no process and no directory.
func TestAPIServer(t *testing.T) {
	s := startKube(t)
	defer s.Stop()
	leases := func() coordinationv1client.LeaseInterface {
		c, err := coordinationv1client.NewForConfig(s.RestConfig())
		if err != nil {
			t.Fatal(err)
		}
		return c.Leases(s.Namespace())
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create a Lease: %v", err)
	}
	// Started without WithCrash, its etcd is embedded: no crash.
	if _, err := s.Crash(ctx, false); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Crash of a kube-apiserver started without WithCrash: %v, want errors.ErrUnsupported", err)
	}
	if err := s.Member().Stop(); err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, time.Second)
	_, err := leases.Get(sctx, "probe", metav1.GetOptions{})
	scancel()
	if err == nil {
		t.Error("a Get answered while kube-apiserver was stopped (SIGSTOP)")
	}
	if err := s.Member().Cont(); err != nil {
		t.Fatal(err)
	}
	if _, err := leases.Get(ctx, "probe", metav1.GetOptions{}); err != nil {
		t.Errorf("Get after SIGCONT: %v", err)
	}
	// A wrong token is refused.
	bad := s.RestConfig()
	bad.BearerToken = "wrong"
	bc, err := coordinationv1client.NewForConfig(bad)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bc.Leases(s.Namespace()).Get(ctx, "probe", metav1.GetOptions{}); err == nil {
		t.Error("a wrong token was accepted")
	}
	pid, dir, etcdDir := s.Pid(), s.dir, filepath.Dir(s.etcd.Log())
	s.Stop()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("kube-apiserver pid %d after Stop: kill 0 = %v, want ESRCH", pid, err)
	}
	for _, d := range []string{dir, etcdDir} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s after Stop: %v, want it gone", d, err)
		}
	}
}

// TestUseKubeconfig: a kubeconfig naming the harness's server gives a
// namespace of the suite's own, which Stop deletes.
func TestUseKubeconfig(t *testing.T) {
	s := startKube(t)
	defer s.Stop()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: %q, certificate-authority: %q}
users:
- name: u
  user: {token: %q}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`, s.URL(), s.ca, s.token)
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, err := UseKubeconfig(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	ns := k.Namespace()
	c, err := corev1client.NewForConfig(k.RestConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
		t.Fatalf("namespace %s: %v", ns, err)
	}
	if err := k.Stop(); err != nil {
		t.Fatal(err)
	}
	// No namespace controller runs here: the namespace is Terminating.
	got, err := c.Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err == nil && got.DeletionTimestamp == nil {
		t.Errorf("namespace %s after Stop: not being deleted", ns)
	}
	if _, err := UseKubeconfig(ctx, filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("UseKubeconfig of a missing file: no error")
	}
}

// TestCrash is harness/servers' TestCrash for kube-apiserver
// (servertest.Crash): its keys are Leases (the value their
// holderIdentity), kept in its etcd, so its rows are etcd's with the
// apiserver restarted after it. They are skipped when the kube-apiserver
// binary is not built.
func TestCrash(t *testing.T) {
	servertest.Crash(t, []servertest.CrashCase{
		{Name: "kube-apiserver-etcd-unsafe-no-fsync", Start: crashRow(servers.WithDurability(servers.DurabilityHarness)), Crash: servertest.Kept, Loss: servertest.Lost},
		{Name: "kube-apiserver-etcd-packaged", Start: crashRow(servers.WithDurability(servers.DurabilityPackaged)), Crash: servertest.Kept, Loss: servertest.Kept},
	})
}

// crashRow starts kube-apiserver with its etcd on lazyfs and opts, or
// fails with an error wrapping servertest.ErrSkip when the binary is not
// built. Its processes are kube-apiserver's and etcd's; Stop removes its
// directory and etcd's.
func crashRow(opts ...servers.Option) func(context.Context) (servertest.Crashed, error) {
	return func(ctx context.Context) (servertest.Crashed, error) {
		if _, err := APIServerBinary(); err != nil {
			return servertest.Crashed{}, fmt.Errorf("%w: %v: run ci/setup.sh to build kube-apiserver %s", servertest.ErrSkip, err, Version)
		}
		s, err := StartAPIServer(ctx, append([]servers.Option{servers.WithLazyFS()}, opts...)...)
		if err != nil {
			return servertest.Crashed{}, err
		}
		pids := func() []int { return []int{s.m.Pid(), s.etcd.Members()[0].Pid()} }
		return servertest.Crashed{S: s, KV: leaseOps(s), Dirs: []string{s.dir, filepath.Dir(s.etcd.Log())}, Pids: pids}, nil
	}
}

// leaseOps writes and reads Leases: a key is a Lease's name, its value the
// Lease's holderIdentity.
func leaseOps(s *APIServer) servertest.KV {
	leases := func() (coordinationv1client.LeaseInterface, error) {
		c, err := coordinationv1client.NewForConfig(s.RestConfig())
		if err != nil {
			return nil, err
		}
		return c.Leases(s.Namespace()), nil
	}
	return servertest.KV{
		Put: func(ctx context.Context, k, v string) error {
			l, err := leases()
			if err != nil {
				return err
			}
			_, err = l.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: k},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: &v}}, metav1.CreateOptions{})
			return err
		},
		Get: func(ctx context.Context, k string) (string, error) {
			l, err := leases()
			if err != nil {
				return "", err
			}
			got, err := l.Get(ctx, k, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				return "", nil
			case err != nil:
				return "", err
			case got.Spec.HolderIdentity == nil:
				return "", fmt.Errorf("lease %s has no holder", k)
			}
			return *got.Spec.HolderIdentity, nil
		},
	}
}
