// Package kube gives the suite a Kubernetes API for its Lease backends: a
// kube-apiserver of the harness's own (StartAPIServer), with an etcd of its
// own (harness/services/etcd), or a namespace in a cluster of the user's
// (UseKubeconfig); and finds the Kubernetes binaries the harness runs.
package kube

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/harness/services/etcd"
	"github.com/locksuite/locksuite/harness/services/kube/internal/apiserver"
	"github.com/locksuite/locksuite/internal/spawn"
	"github.com/locksuite/locksuite/internal/tempdir"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Version is the kube-apiserver the harness runs, built from source by
// ci/setup.sh from the tools module in harness/kubebuild.
const Version = "1.37.2"

// APIServerBinary is Binary("kube-apiserver").
func APIServerBinary() (string, error) { return Binary("kube-apiserver") }

// APIServerCachePath is CachePath("kube-apiserver").
func APIServerCachePath() string { return CachePath("kube-apiserver") }

// Components are the Kubernetes programs the harness runs, all of version
// Version: kube-apiserver for the Lease backends, and the other three for
// the cluster of kubecluster.Start. ci/setup.sh builds the missing ones in
// one go build from the tools module harness/kubebuild.
var Components = []string{"kube-apiserver", "kubelet", "kube-controller-manager", "kube-scheduler"}

// Binary finds the binary of component, one of Components: the
// file that $LOCKSUITE_<COMPONENT> names if it is set (the name in upper
// case, '-' as '_': LOCKSUITE_KUBE_APISERVER, LOCKSUITE_KUBELET,
// LOCKSUITE_KUBE_CONTROLLER_MANAGER, LOCKSUITE_KUBE_SCHEDULER), then the
// build cache (CachePath), then PATH.
func Binary(component string) (string, error) {
	if !slices.Contains(Components, component) {
		return "", fmt.Errorf("kube: Binary(%q): not one of %v", component, Components)
	}
	return servers.FindBinary(BinaryEnv(component), CachePath(component), component)
}

// BinaryEnv is the variable that names the binary of component:
// LOCKSUITE_ and the component's name in upper case, '-' as '_'.
func BinaryEnv(component string) string {
	return "LOCKSUITE_" + strings.ToUpper(strings.ReplaceAll(component, "-", "_"))
}

// CachePath is where ci/setup.sh leaves the binary of component that it
// builds: <user cache dir>/locksuite/<component>-<Version>.
func CachePath(component string) string {
	return servers.BuildCachePath(component + "-" + Version)
}

// API is a Kubernetes API that the suite's Lease objects live in: one the
// harness started (APIServer) or a cluster of the user's own (Namespace).
// Its Stop removes what the harness made there.
type API interface {
	servers.Server
	// RestConfig is a new copy of the client configuration (server URL,
	// CA, credentials), to be changed freely (its Dial, its timeouts).
	RestConfig() *rest.Config
	// Namespace is the namespace the suite may create Leases in.
	Namespace() string
}

var (
	_ API = (*APIServer)(nil)
	_ API = (*Namespace)(nil)
)

// Start returns the Kubernetes API the suite uses: with KUBECONFIG set,
// a namespace of its own in that kubeconfig's current context
// (UseKubeconfig); otherwise a kube-apiserver of the harness's own
// (StartAPIServer, with opts). Only an explicitly set KUBECONFIG
// counts: the default ~/.kube/config, which may name a production
// cluster, is never read. A cluster of the user's takes no options: it is
// never crashed.
func Start(ctx context.Context, opts ...servers.Option) (API, error) {
	if p := os.Getenv("KUBECONFIG"); p != "" {
		return UseKubeconfig(ctx, p)
	}
	return StartAPIServer(ctx, opts...)
}

// APIServer is a kube-apiserver process with an etcd of its own, started
// by StartAPIServer. It is a Crasher when started WithCrash or WithLazyFS.
type APIServer struct {
	etcd  *etcd.Server
	m     *servers.Member
	dir   string
	addr  string
	token string
	ca    string
	once  sync.Once
}

var _ servers.Crasher = (*APIServer)(nil)

func (s *APIServer) Name() string { return "kube-apiserver" }

// Endpoint is the API's host:port (HTTPS).
func (s *APIServer) Endpoint() string { return s.addr }

// URL is https://host:port.
func (s *APIServer) URL() string { return "https://" + s.addr }

// Member is the kube-apiserver process, for faults that stop (SIGSTOP) or
// kill it. Its etcd is not stopped with it: it is embedded in this process,
// or (WithCrash) a process of its own.
func (s *APIServer) Member() *servers.Member { return s.m }

// Pid is the kube-apiserver's process id.
func (s *APIServer) Pid() int { return s.m.Pid() }

// Log is the kube-apiserver's log file, in the directory Stop removes: copy
// it before Stop to keep it.
func (s *APIServer) Log() string { return filepath.Join(s.dir, "kube-apiserver.log") }

// Namespace is "locksuite", made at start.
func (s *APIServer) Namespace() string { return apiserver.Namespace }

// RestConfig authenticates with the static token of the user "locksuite"
// (group system:masters; the server authorizes every request anyway) and
// trusts the server's test CA.
func (s *APIServer) RestConfig() *rest.Config {
	return &rest.Config{
		Host:            s.URL(),
		BearerToken:     s.token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: s.ca},
		UserAgent:       "locksuite",
	}
}

// Kubeconfig writes a kubeconfig file for this server (its URL, test CA
// and token; its current context names the namespace "locksuite") in the
// directory Stop removes, and returns its path: for another process that
// should reach this server, such as a chaos worker.
func (s *APIServer) Kubeconfig() (string, error) {
	const n = "locksuite"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[n] = &clientcmdapi.Cluster{Server: s.URL(), CertificateAuthority: s.ca}
	cfg.AuthInfos[n] = &clientcmdapi.AuthInfo{Token: s.token}
	cfg.Contexts[n] = &clientcmdapi.Context{Cluster: n, AuthInfo: n, Namespace: apiserver.Namespace}
	cfg.CurrentContext = n
	p := filepath.Join(s.dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, p); err != nil {
		return "", fmt.Errorf("kube-apiserver: write %s: %w", p, err)
	}
	return p, nil
}

// StartAPIServer starts kube-apiserver (APIServerBinary) on a free
// loopback port, in its own process group, against an etcd embedded in this
// process (etcd.Start), and waits until /readyz answers and the namespace
// "locksuite" exists.
//
// WithCrash (or WithLazyFS) makes it a Crasher: its etcd then runs as a
// process of its own (etcd.Start WithCrash, or WithLazyFS with its data
// directory on lazyfs), and Crash kills kube-apiserver and etcd at once,
// restarts etcd on its data directory and address, then kube-apiserver on
// its address, certificates and token, and returns once /readyz answers
// and the namespace "locksuite" is there again. Sync syncs etcd's data
// directory. WithDurability is etcd's: DurabilityHarness (the default)
// runs it with --unsafe-no-fsync, DurabilityPackaged with fsync on commit.
// WithAuth and WithTLS are refused: the server always has TLS and a token.
//
// Everything it needs is made in a temporary directory that Stop removes:
// a test CA and a server certificate for 127.0.0.1, a service-account
// signing key (ECDSA P-256), and a static token file with one user,
// "locksuite", in the group system:masters.
//
// The server authorizes every authenticated request
// (--authorization-mode=AlwaysAllow; anonymous requests are refused), runs
// without priority and fairness, with NamespaceLifecycle its only admission
// plugin and without the endpoints reconciler. It serves its default APIs:
// with only the core and coordination.k8s.io APIs, its own informers
// (webhook configurations, endpoint slices, service CIDRs, CRDs) never
// sync, and it never becomes ready.
func StartAPIServer(ctx context.Context, opts ...servers.Option) (*APIServer, error) {
	const fix = "run ci/setup.sh (builds kube-apiserver " + Version + " with go build, about 5 minutes once), set LOCKSUITE_KUBE_APISERVER to a kube-apiserver binary, or name a cluster with KUBECONFIG"
	o := servers.Apply(opts)
	unavailable := func(err error, fix string) error {
		return &servers.Unavailable{Backend: "kube-apiserver", Err: err, Fix: fix}
	}
	if o.Auth || o.TLS {
		return nil, unavailable(errors.New("WithAuth and WithTLS are not options of kube-apiserver"), "start it without them: it always serves TLS and authenticates a token")
	}
	if err := o.CheckDurability("kube-apiserver"); err != nil {
		return nil, err
	}
	bin, err := APIServerBinary()
	if err != nil {
		return nil, unavailable(err, fix)
	}
	port, err := servers.FreePort()
	if err != nil {
		return nil, unavailable(err, "free loopback ports")
	}
	dir, err := tempdir.New("", "locksuite-kube-apiserver-")
	if err != nil {
		return nil, unavailable(err, "a writable temporary directory")
	}
	s := &APIServer{dir: dir, addr: fmt.Sprintf("127.0.0.1:%d", port), token: servers.RandomSecret()}
	fail := func(err error, fix string) (*APIServer, error) {
		s.Stop()
		return nil, unavailable(err, fix)
	}
	f, err := apiserver.NewFiles(dir, s.token+`,locksuite,locksuite,"system:masters"`)
	if err != nil {
		return fail(err, "a writable temporary directory and a working crypto/rand")
	}
	s.ca = f.Certs.CA
	var etcdOpts []servers.Option
	switch {
	case o.Lazy:
		etcdOpts = append(etcdOpts, servers.WithLazyFS())
	case o.Crash:
		etcdOpts = append(etcdOpts, servers.WithCrash())
	}
	if s.etcd, err = etcd.Start(ctx, append(etcdOpts, servers.WithDurability(o.Durability))...); err != nil {
		return fail(err, servers.FixFUSE(err, "see the etcd error"))
	}
	argv := apiserver.Argv(bin, s.etcd.URL(), "127.0.0.1", port, dir, f, "AlwaysAllow")
	s.m = servers.NewMember("kube-apiserver", s.addr, dir, func() (*servers.Proc, error) {
		return servers.Launch(spawn.Start, "kube-apiserver", dir, nil, nil, argv...)
	})
	if err := s.serve(ctx); err != nil {
		return fail(err, "check that "+bin+" runs; see its log above")
	}
	if err := apiserver.CreateNamespace(ctx, s.RestConfig()); err != nil {
		return fail(err, "see the server's log")
	}
	if err := s.Sync(); err != nil { // the namespace and the server's own objects
		return fail(err, "see the etcd error")
	}
	return s, nil
}

// readyTimeout is how long kube-apiserver may take to become ready,
// at start and after a crash.
const readyTimeout = 90 * time.Second

// serve starts the kube-apiserver process (again) and waits until /readyz
// answers.
func (s *APIServer) serve(ctx context.Context) error {
	if err := s.m.Run(); err != nil {
		return err
	}
	hc, err := rest.HTTPClientFor(s.RestConfig())
	if err != nil {
		return err
	}
	defer hc.CloseIdleConnections()
	return servers.WaitReady(ctx, s.m.Proc(), readyTimeout, func(ctx context.Context) error {
		return apiserver.Ready(ctx, hc, s.URL())
	})
}

// Crash kills kube-apiserver and its etcd at once (SIGKILL), with
// powerLoss drops what etcd did not sync, restarts etcd, then
// kube-apiserver, and returns once /readyz answers and the namespace
// "locksuite" exists (Crasher.Crash; StartAPIServer says how). Its
// error wraps errors.ErrUnsupported when the server was not started
// WithCrash (its etcd is embedded in this process), or, with powerLoss,
// not WithLazyFS. The report's Dropped is etcd's.
func (s *APIServer) Crash(ctx context.Context, powerLoss bool) (servers.CrashReport, error) {
	if len(s.etcd.Members()) == 0 {
		return servers.CrashReport{PowerLoss: powerLoss}, fmt.Errorf("%w: kube-apiserver's etcd runs inside this process: start it WithCrash", errors.ErrUnsupported)
	}
	etcdServes := false
	r, err := s.etcd.CrashAlso(ctx, powerLoss, []*servers.Member{s.m}, func(ctx context.Context) error {
		etcdServes = true
		if err := s.serve(ctx); err != nil {
			return fmt.Errorf("after the crash: %w", err)
		}
		nsc, err := apiserver.Namespaces(s.RestConfig())
		if err != nil {
			return err
		}
		if _, err := nsc.Get(ctx, apiserver.Namespace, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("after the crash: namespace %s: %w", apiserver.Namespace, err)
		}
		return nil
	})
	if err != nil && !etcdServes && !errors.Is(err, errors.ErrUnsupported) {
		err = fmt.Errorf("etcd: %w", err) // its restart failed
	}
	return r, err
}

// Sync syncs etcd's data directory (Crasher.Sync): nothing to do without
// WithLazyFS.
func (s *APIServer) Sync() error { return s.etcd.Sync() }

// Stop stops kube-apiserver (SIGTERM, SIGKILL after 5 s; a SIGSTOPped
// server is continued first), then its etcd, and removes the directory.
func (s *APIServer) Stop() error {
	s.once.Do(func() {
		if s.m != nil {
			s.m.End(syscall.SIGTERM, 5*time.Second)
		}
		if s.etcd != nil {
			s.etcd.Stop()
		}
		os.RemoveAll(s.dir)
	})
	return nil
}

// Namespace is a namespace that UseKubeconfig made in a cluster of the
// user's own; Stop deletes it, and with it every Lease the suite left.
type Namespace struct {
	cfg  *rest.Config
	ns   string
	once sync.Once
}

// UseKubeconfig loads the kubeconfig file at path (or, with path "", the
// files KUBECONFIG names) in its current context, and creates a namespace
// "locksuite-<random>" there for the suite. The kubeconfig's user needs to
// create and delete namespaces, and to create, update and delete
// coordination.k8s.io Leases in them.
func UseKubeconfig(ctx context.Context, path string) (*Namespace, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	} else if os.Getenv("KUBECONFIG") == "" {
		return nil, &servers.Unavailable{Backend: "kubernetes", Err: errors.New("KUBECONFIG is not set"), Fix: "set KUBECONFIG to a kubeconfig file, or leave it unset to let the harness start kube-apiserver"}
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, &servers.Unavailable{Backend: "kubernetes", Err: err, Fix: "check the kubeconfig (KUBECONFIG) and its current context"}
	}
	ns, err := apiserver.Namespaces(cfg)
	if err != nil {
		return nil, &servers.Unavailable{Backend: "kubernetes", Err: err, Fix: "check the kubeconfig's cluster and user"}
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	made, err := ns.Create(cctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "locksuite-"}}, metav1.CreateOptions{})
	if err != nil {
		return nil, &servers.Unavailable{Backend: "kubernetes", Err: fmt.Errorf("create namespace at %s: %w", cfg.Host, err), Fix: "check that the cluster is reachable and that the kubeconfig's user may create namespaces"}
	}
	return &Namespace{cfg: cfg, ns: made.Name}, nil
}

func (k *Namespace) Name() string { return "kubernetes" }

// Endpoint is the cluster's API server URL.
func (k *Namespace) Endpoint() string { return k.cfg.Host }

// RestConfig is a copy of the kubeconfig's client configuration.
func (k *Namespace) RestConfig() *rest.Config { return rest.CopyConfig(k.cfg) }

// Namespace is the namespace UseKubeconfig made.
func (k *Namespace) Namespace() string { return k.ns }

// Stop deletes the namespace (the cluster removes what is in it), waiting
// at most 30 s for the request, not for the namespace to be gone.
func (k *Namespace) Stop() error {
	var err error
	k.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var ns corev1client.NamespaceInterface
		if ns, err = apiserver.Namespaces(k.cfg); err == nil {
			err = ns.Delete(ctx, k.ns, metav1.DeleteOptions{})
		}
		if apierrors.IsNotFound(err) {
			err = nil
		}
		if err != nil {
			err = fmt.Errorf("delete namespace %s at %s: %w", k.ns, k.cfg.Host, err)
		}
	})
	return err
}
