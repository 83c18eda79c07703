package servers

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/internal/tempdir"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// KubeAPIServerVersion is the kube-apiserver the harness runs, built from
// source by ci/setup.sh from the tools module in harness/kubebuild.
const KubeAPIServerVersion = "1.37.2"

// KubeAPIServerBinary is KubeBinary("kube-apiserver").
func KubeAPIServerBinary() (string, error) { return KubeBinary("kube-apiserver") }

// KubeAPIServerCachePath is KubeCachePath("kube-apiserver").
func KubeAPIServerCachePath() string { return KubeCachePath("kube-apiserver") }

// KubeComponents are the Kubernetes programs the harness runs, all of
// version KubeAPIServerVersion: kube-apiserver for the Lease backends, and
// the other three for the cluster of StartKubeCluster. ci/setup.sh builds
// the missing ones in one go build from the tools module harness/kubebuild.
var KubeComponents = []string{"kube-apiserver", "kubelet", "kube-controller-manager", "kube-scheduler"}

// KubeBinary finds the binary of component, one of KubeComponents: the
// file that $LOCKSUITE_<COMPONENT> names if it is set (the name in upper
// case, '-' as '_': LOCKSUITE_KUBE_APISERVER, LOCKSUITE_KUBELET,
// LOCKSUITE_KUBE_CONTROLLER_MANAGER, LOCKSUITE_KUBE_SCHEDULER), then the
// build cache (KubeCachePath), then PATH.
func KubeBinary(component string) (string, error) {
	if !slices.Contains(KubeComponents, component) {
		return "", fmt.Errorf("servers: KubeBinary(%q): not one of %v", component, KubeComponents)
	}
	return findBinary(KubeBinaryEnv(component), KubeCachePath(component), component)
}

// KubeBinaryEnv is the variable that names the binary of component:
// LOCKSUITE_ and the component's name in upper case, '-' as '_'.
func KubeBinaryEnv(component string) string {
	return "LOCKSUITE_" + strings.ToUpper(strings.ReplaceAll(component, "-", "_"))
}

// KubeCachePath is where ci/setup.sh leaves the binary of component that it
// builds: <user cache dir>/locksuite/<component>-<KubeAPIServerVersion>.
func KubeCachePath(component string) string {
	return buildCachePath(component + "-" + KubeAPIServerVersion)
}

// Kube is a Kubernetes API that the suite's Lease objects live in: one the
// harness started (KubeAPIServer) or a cluster of the user's own
// (KubeNamespace). Its Stop removes what the harness made there.
type Kube interface {
	Server
	// RestConfig is a new copy of the client configuration (server URL,
	// CA, credentials), to be changed freely (its Dial, its timeouts).
	RestConfig() *rest.Config
	// Namespace is the namespace the suite may create Leases in.
	Namespace() string
}

var (
	_ Kube = (*KubeAPIServer)(nil)
	_ Kube = (*KubeNamespace)(nil)
)

// StartKube returns the Kubernetes API the suite uses: with KUBECONFIG set,
// a namespace of its own in that kubeconfig's current context
// (UseKubeconfig); otherwise a kube-apiserver of the harness's own
// (StartKubeAPIServer, with opts). Only an explicitly set KUBECONFIG
// counts: the default ~/.kube/config, which may name a production
// cluster, is never read. A cluster of the user's takes no options: it is
// never crashed.
func StartKube(ctx context.Context, opts ...Option) (Kube, error) {
	if p := os.Getenv("KUBECONFIG"); p != "" {
		return UseKubeconfig(ctx, p)
	}
	return StartKubeAPIServer(ctx, opts...)
}

// KubeAPIServer is a kube-apiserver process with an etcd of its own,
// started by StartKubeAPIServer. It is a Crasher when started WithCrash
// or WithLazyFS.
type KubeAPIServer struct {
	etcd  *Etcd
	m     *Member
	dir   string
	addr  string
	token string
	ca    string
	once  sync.Once
}

var _ Crasher = (*KubeAPIServer)(nil)

// kubeNamespace is the namespace StartKubeAPIServer makes for the suite.
const kubeNamespace = "locksuite"

func (s *KubeAPIServer) Name() string { return "kube-apiserver" }

// Endpoint is the API's host:port (HTTPS).
func (s *KubeAPIServer) Endpoint() string { return s.addr }

// URL is https://host:port.
func (s *KubeAPIServer) URL() string { return "https://" + s.addr }

// Member is the kube-apiserver process, for faults that stop (SIGSTOP) or
// kill it. Its etcd is not stopped with it: it is embedded in this process,
// or (WithCrash) a process of its own.
func (s *KubeAPIServer) Member() *Member { return s.m }

// Pid is the kube-apiserver's process id.
func (s *KubeAPIServer) Pid() int { return s.m.Pid() }

// Log is the kube-apiserver's log file, in the directory Stop removes: copy
// it before Stop to keep it.
func (s *KubeAPIServer) Log() string { return filepath.Join(s.dir, "kube-apiserver.log") }

// Namespace is "locksuite", made at start.
func (s *KubeAPIServer) Namespace() string { return kubeNamespace }

// RestConfig authenticates with the static token of the user "locksuite"
// (group system:masters; the server authorizes every request anyway) and
// trusts the server's test CA.
func (s *KubeAPIServer) RestConfig() *rest.Config {
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
func (s *KubeAPIServer) Kubeconfig() (string, error) {
	const n = "locksuite"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[n] = &clientcmdapi.Cluster{Server: s.URL(), CertificateAuthority: s.ca}
	cfg.AuthInfos[n] = &clientcmdapi.AuthInfo{Token: s.token}
	cfg.Contexts[n] = &clientcmdapi.Context{Cluster: n, AuthInfo: n, Namespace: kubeNamespace}
	cfg.CurrentContext = n
	p := filepath.Join(s.dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, p); err != nil {
		return "", fmt.Errorf("kube-apiserver: write %s: %w", p, err)
	}
	return p, nil
}

// kubeDisabledAdmission are the admission plugins on by default that the
// harness turns off: they watch APIs it does not serve (webhooks, storage
// classes, runtime classes, ...), and would wait for those watches before
// admitting a request. NamespaceLifecycle stays on.
var kubeDisabledAdmission = []string{
	"LimitRanger", "ServiceAccount", "DefaultStorageClass", "PersistentVolumeClaimResize",
	"DefaultTolerationSeconds", "MutatingAdmissionWebhook", "ValidatingAdmissionWebhook", "ResourceQuota",
	"StorageObjectInUseProtection", "PodGroupProtection", "Priority", "TaintNodesByCondition", "RuntimeClass",
	"CertificateApproval", "CertificateSigning", "ClusterTrustBundleAttest", "CertificateSubjectRestriction",
	"DefaultIngressClass", "PodSecurity", "PodTopologyLabels", "MutatingAdmissionPolicy",
	"ValidatingAdmissionPolicy", "NodeDeclaredFeatureValidator", "PodResizeValidator",
}

// StartKubeAPIServer starts kube-apiserver (KubeAPIServerBinary) on a free
// loopback port, in its own process group, against an etcd embedded in this
// process (StartEtcd), and waits until /readyz answers and the namespace
// "locksuite" exists.
//
// WithCrash (or WithLazyFS) makes it a Crasher: its etcd then runs as a
// process of its own (StartEtcd WithCrash, or WithLazyFS with its data
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
func StartKubeAPIServer(ctx context.Context, opts ...Option) (*KubeAPIServer, error) {
	const fix = "run ci/setup.sh (builds kube-apiserver " + KubeAPIServerVersion + " with go build, about 5 minutes once), set LOCKSUITE_KUBE_APISERVER to a kube-apiserver binary, or name a cluster with KUBECONFIG"
	o := apply(opts)
	if o.auth || o.tls {
		return nil, &Unavailable{"kube-apiserver", errors.New("WithAuth and WithTLS are not options of kube-apiserver"), "start it without them: it always serves TLS and authenticates a token"}
	}
	if err := o.checkDurability("kube-apiserver"); err != nil {
		return nil, err
	}
	bin, err := KubeAPIServerBinary()
	if err != nil {
		return nil, &Unavailable{"kube-apiserver", err, fix}
	}
	port, err := FreePort()
	if err != nil {
		return nil, &Unavailable{"kube-apiserver", err, "free loopback ports"}
	}
	dir, err := tempdir.New("", "locksuite-kube-apiserver-")
	if err != nil {
		return nil, &Unavailable{"kube-apiserver", err, "a writable temporary directory"}
	}
	s := &KubeAPIServer{dir: dir, addr: fmt.Sprintf("127.0.0.1:%d", port), token: randomSecret()}
	fail := func(err error, fix string) (*KubeAPIServer, error) {
		s.Stop()
		return nil, &Unavailable{"kube-apiserver", err, fix}
	}
	f, err := newKubeFiles(dir, s.token+`,locksuite,locksuite,"system:masters"`)
	if err != nil {
		return fail(err, "a writable temporary directory and a working crypto/rand")
	}
	s.ca = f.certs.ca
	var etcdOpts []Option
	switch {
	case o.lazy:
		etcdOpts = append(etcdOpts, WithLazyFS())
	case o.crash:
		etcdOpts = append(etcdOpts, WithCrash())
	}
	if s.etcd, err = StartEtcd(ctx, append(etcdOpts, WithDurability(o.durability))...); err != nil {
		return fail(err, fixFUSE(err, "see the etcd error"))
	}
	argv := kubeAPIServerArgv(bin, s.etcd.URL(), "127.0.0.1", port, dir, f, "AlwaysAllow")
	s.m = &Member{name: "kube-apiserver", addr: s.addr, dir: dir, start: func() (*proc, error) {
		return startMemberProc("kube-apiserver", dir, nil, argv...)
	}}
	if err := s.serve(ctx); err != nil {
		return fail(err, "check that "+bin+" runs; see its log above")
	}
	if err := createKubeNamespace(ctx, s.RestConfig()); err != nil {
		return fail(err, "see the server's log")
	}
	if err := s.Sync(); err != nil { // the namespace and the server's own objects
		return fail(err, "see the etcd error")
	}
	return s, nil
}

// kubeReadyTimeout is how long kube-apiserver may take to become ready,
// at start and after a crash.
const kubeReadyTimeout = 90 * time.Second

// serve starts the kube-apiserver process (again) and waits until /readyz
// answers.
func (s *KubeAPIServer) serve(ctx context.Context) error {
	if err := s.m.run(); err != nil {
		return err
	}
	s.m.mu.Lock()
	p := s.m.p
	s.m.mu.Unlock()
	hc, err := rest.HTTPClientFor(s.RestConfig())
	if err != nil {
		return err
	}
	defer hc.CloseIdleConnections()
	return waitReady(ctx, p, kubeReadyTimeout, func(ctx context.Context) error {
		return kubeReady(ctx, hc, s.URL())
	})
}

// Crash kills kube-apiserver and its etcd at once (SIGKILL), with
// powerLoss drops what etcd did not sync, restarts etcd, then
// kube-apiserver, and returns once /readyz answers and the namespace
// "locksuite" exists (Crasher.Crash; StartKubeAPIServer says how). Its
// error wraps errors.ErrUnsupported when the server was not started
// WithCrash (its etcd is embedded in this process), or, with powerLoss,
// not WithLazyFS. The report's Dropped is etcd's.
func (s *KubeAPIServer) Crash(ctx context.Context, powerLoss bool) (CrashReport, error) {
	e := &s.etcd.crasher
	e.mu.Lock()
	defer e.mu.Unlock()
	if s.etcd.m == nil {
		return CrashReport{PowerLoss: powerLoss}, fmt.Errorf("%w: kube-apiserver's etcd runs inside this process: start it WithCrash", errors.ErrUnsupported)
	}
	r, err := e.canCrash(powerLoss)
	if err != nil {
		return r, err
	}
	r.Killed = time.Now()
	killAll([]*Member{s.m, s.etcd.m})
	if err := e.restart(ctx, &r); err != nil {
		return r, fmt.Errorf("etcd: %w", err)
	}
	if err := s.serve(ctx); err != nil {
		return r, fmt.Errorf("after the crash: %w", err)
	}
	nsc, err := kubeNamespaces(s.RestConfig())
	if err != nil {
		return r, err
	}
	if _, err := nsc.Get(ctx, kubeNamespace, metav1.GetOptions{}); err != nil {
		return r, fmt.Errorf("after the crash: namespace %s: %w", kubeNamespace, err)
	}
	r.Serving = time.Now()
	return r, e.Sync()
}

// Sync syncs etcd's data directory (Crasher.Sync): nothing to do without
// WithLazyFS.
func (s *KubeAPIServer) Sync() error { return s.etcd.Sync() }

// createKubeNamespace makes the namespace "locksuite" through cfg, trying
// for up to 30 s (a server that just became ready may still refuse).
func createKubeNamespace(ctx context.Context, cfg *rest.Config) error {
	nsc, err := kubeNamespaces(cfg)
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kubeNamespace}}
	err = faults.WaitHealthy(ctx, 30*time.Second, func(ctx context.Context) error {
		_, err := nsc.Create(ctx, ns, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("create namespace %s: %w", kubeNamespace, err)
	}
	return nil
}

// kubeFiles are what a kube-apiserver of the harness reads: a test CA and
// a server certificate for 127.0.0.1 (newPKI), a service-account signing
// key (ECDSA P-256) and a static token file.
type kubeFiles struct {
	certs        *pki
	saKey, saPub string // PKCS#8 private key and PKIX public key, PEM
	tokens       string // the --token-auth-file
}

// newKubeFiles writes kubeFiles into dir; tokens are the lines of the token
// file ("token,user,uid,\"group,...\"").
func newKubeFiles(dir string, tokens ...string) (*kubeFiles, error) {
	certs, err := newPKI(dir, -1, -1)
	if err != nil {
		return nil, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(saKey)
	if err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	f := &kubeFiles{certs: certs,
		saKey: filepath.Join(dir, "service-account.key"), saPub: filepath.Join(dir, "service-account.pub"),
		tokens: filepath.Join(dir, "tokens.csv")}
	if err := writePEM(f.saKey, "PRIVATE KEY", der, 0o600, -1, -1); err != nil {
		return nil, err
	}
	if err := writePEM(f.saPub, "PUBLIC KEY", pub, 0o644, -1, -1); err != nil {
		return nil, err
	}
	if err := os.WriteFile(f.tokens, []byte(strings.Join(tokens, "\n")+"\n"), 0o600); err != nil {
		return nil, err
	}
	return f, nil
}

// kubeAPIServerArgv is the command line of kube-apiserver bin serving on
// bind:port with etcd at etcdURL and the files f, its own files in dir
// (StartKubeAPIServer says what the flags make of it).
func kubeAPIServerArgv(bin, etcdURL, bind string, port int, dir string, f *kubeFiles, authorization string) []string {
	return []string{bin,
		"--etcd-servers=" + etcdURL,
		"--bind-address=" + bind, "--advertise-address=" + bind, fmt.Sprintf("--secure-port=%d", port),
		"--tls-cert-file=" + f.certs.serverCert, "--tls-private-key-file=" + f.certs.serverKey,
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--token-auth-file=" + f.tokens, "--anonymous-auth=false",
		"--authorization-mode=" + authorization,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + f.saPub, "--service-account-signing-key-file=" + f.saKey,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--enable-admission-plugins=NamespaceLifecycle",
		"--disable-admission-plugins=" + strings.Join(kubeDisabledAdmission, ","),
		"--enable-priority-and-fairness=false",
		"--endpoint-reconciler-type=none",
		"--profiling=false",
	}
}

// kubeReady is nil once GET /readyz answers 200.
func kubeReady(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

func kubeNamespaces(cfg *rest.Config) (corev1client.NamespaceInterface, error) {
	c, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return c.Namespaces(), nil
}

// Stop stops kube-apiserver (SIGTERM, SIGKILL after 5 s; a SIGSTOPped
// server is continued first), then its etcd, and removes the directory.
func (s *KubeAPIServer) Stop() error {
	s.once.Do(func() {
		if s.m != nil {
			s.m.end(syscall.SIGTERM, 5*time.Second)
		}
		if s.etcd != nil {
			s.etcd.Stop()
		}
		os.RemoveAll(s.dir)
	})
	return nil
}

// KubeNamespace is a namespace that UseKubeconfig made in a cluster of the
// user's own; Stop deletes it, and with it every Lease the suite left.
type KubeNamespace struct {
	cfg  *rest.Config
	ns   string
	once sync.Once
}

// UseKubeconfig loads the kubeconfig file at path (or, with path "", the
// files KUBECONFIG names) in its current context, and creates a namespace
// "locksuite-<random>" there for the suite. The kubeconfig's user needs to
// create and delete namespaces, and to create, update and delete
// coordination.k8s.io Leases in them.
func UseKubeconfig(ctx context.Context, path string) (*KubeNamespace, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	} else if os.Getenv("KUBECONFIG") == "" {
		return nil, &Unavailable{"kubernetes", errors.New("KUBECONFIG is not set"), "set KUBECONFIG to a kubeconfig file, or leave it unset to let the harness start kube-apiserver"}
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, &Unavailable{"kubernetes", err, "check the kubeconfig (KUBECONFIG) and its current context"}
	}
	ns, err := kubeNamespaces(cfg)
	if err != nil {
		return nil, &Unavailable{"kubernetes", err, "check the kubeconfig's cluster and user"}
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	made, err := ns.Create(cctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "locksuite-"}}, metav1.CreateOptions{})
	if err != nil {
		return nil, &Unavailable{"kubernetes", fmt.Errorf("create namespace at %s: %w", cfg.Host, err), "check that the cluster is reachable and that the kubeconfig's user may create namespaces"}
	}
	return &KubeNamespace{cfg: cfg, ns: made.Name}, nil
}

func (k *KubeNamespace) Name() string { return "kubernetes" }

// Endpoint is the cluster's API server URL.
func (k *KubeNamespace) Endpoint() string { return k.cfg.Host }

// RestConfig is a copy of the kubeconfig's client configuration.
func (k *KubeNamespace) RestConfig() *rest.Config { return rest.CopyConfig(k.cfg) }

// Namespace is the namespace UseKubeconfig made.
func (k *KubeNamespace) Namespace() string { return k.ns }

// Stop deletes the namespace (the cluster removes what is in it), waiting
// at most 30 s for the request, not for the namespace to be gone.
func (k *KubeNamespace) Stop() error {
	var err error
	k.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var ns corev1client.NamespaceInterface
		if ns, err = kubeNamespaces(k.cfg); err == nil {
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
