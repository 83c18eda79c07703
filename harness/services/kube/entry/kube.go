package entry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/k8slease"
	"github.com/locksuite/locksuite/backends/leaderelection"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/harness/services"
	"github.com/locksuite/locksuite/harness/services/kube"
	"github.com/locksuite/locksuite/suite"
)

// NamespaceEnv, with KUBECONFIG, names a namespace that exists in the
// kubeconfig's cluster: the suite then uses it as it is (it creates and
// deletes only its Leases there) instead of creating a namespace of its
// own. Worker processes reach their coordinator's Kubernetes API through
// the two.
const NamespaceEnv = "LOCKSUITE_KUBE_NAMESPACE"

// Why kube-apiserver's clock is not jumped (wrapped in errors.ErrUnsupported).
const noClockKube = "the Lease's expiry is judged by each candidate's own clock, not the server's: client-go (and k8s-lease) time it from when the candidate first saw the record, with Go's monotonic clock, which a stepped wall clock does not move; kube-apiserver itself is a Go program that libfaketime cannot move (as consul), and the suite's clock fault moves a server's clock, not a client's"

// kubeService is the Kubernetes API the two Lease backends run on:
// kube-apiserver started by the harness (kube.Start), a namespace
// it creates in the cluster KUBECONFIG names, or, with KUBECONFIG and
// LOCKSUITE_KUBE_NAMESPACE, that namespace as it is.
//
// leaseDurationSeconds is whole seconds: 1 s is the shortest lease. The
// expiry with it is 1.4 s (k8s-lease) and 1.72 s (leader-election); a
// chaos pause of 3 s outlasts both.
var kubeService = &services.Service{
	Name: "kube", Title: "Kubernetes API", Server: "kube-apiserver (the build of ci/setup.sh)",
	Lease: time.Second, Pause: 3 * time.Second, Pauses: 3, Duration: 10 * time.Second,
	Vars:    []string{"KUBECONFIG", NamespaceEnv},
	FromEnv: kubeFromEnv,
	Start: func(ctx context.Context, o ...servers.Option) (servers.Server, error) {
		return kube.Start(ctx, o...)
	},
	Timeout:    120 * time.Second, // kube-apiserver waits for its informers: 3-4 s idle, more on a busy machine
	Connect:    kubeConnect,
	Probe:      probeKube,
	Diagnose:   diagnoseKube,
	HostPortOf: kubeHostPort,
	Servers:    kubeServers,
	Version:    kubeVersion,
	NoCompose:  "kube-apiserver needs its own etcd, certificates and flags: point KUBECONFIG at a cluster (kind, minikube) instead",
	// Crashable (WithCrash), its etcd fsyncs on commit, as packaged.
	Durability: servers.DurabilityPackaged,
}

// kube-apiserver is a 170 MB build (ci/setup.sh) and takes seconds to
// start: its two backends run when named.
var Backends = []services.Backend{
	{Name: "k8s-lease", Kind: services.Adapter, On: kubeService, NewLocker: newK8sLease, WhenNamed: true, Modules: []string{"k8s.io/client-go"}},
	{Name: "leader-election", Kind: services.Library, On: kubeService, NewLocker: newLeaderElection, WhenNamed: true, Modules: []string{"k8s.io/client-go"}},
}

// kubeVersion asks the kube-apiserver binary the harness would start.
func kubeVersion() string {
	b, err := kube.APIServerBinary()
	if err != nil {
		return "not found here (" + err.Error() + ")"
	}
	return services.BinVersion(nil, b)
}

// kubeFromEnv: with LOCKSUITE_KUBE_NAMESPACE, the namespace of the cluster
// KUBECONFIG names; with KUBECONFIG alone, nil (kube.Start creates
// a namespace there, and Stop deletes it).
func kubeFromEnv() (*services.Conn, error) {
	ns, kc := os.Getenv(NamespaceEnv), os.Getenv("KUBECONFIG")
	switch {
	case ns == "":
		return nil, nil
	case kc == "":
		return nil, &servers.Unavailable{Backend: "kube", Err: errors.New(NamespaceEnv + " is set but KUBECONFIG is not"),
			Fix: "set KUBECONFIG to the kubeconfig of the namespace's cluster, or unset " + NamespaceEnv}
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return nil, &servers.Unavailable{Backend: "kube", Err: fmt.Errorf("%s %q: %v", NamespaceEnv, ns, errs), Fix: "name an existing namespace"}
	}
	rc, err := kubeconfig(kc)
	if err != nil {
		return nil, &servers.Unavailable{Backend: "kube", Err: err, Fix: "check the kubeconfig (KUBECONFIG) and its current context"}
	}
	return &services.Conn{Endpoint: kc, Rest: rc, Namespace: ns}, nil
}

// kubeconfig loads the client configuration of the files path names
// (KUBECONFIG's syntax), in its current context.
func kubeconfig(path string) (*rest.Config, error) {
	rules := &clientcmd.ClientConfigLoadingRules{Precedence: filepath.SplitList(path)}
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
}

// kubeConnect is the connection to the Kubernetes API the harness started
// or made a namespace in, with the variables that point a worker process at
// it: KUBECONFIG (the user's, or a file for the harness's kube-apiserver)
// and the namespace, which the worker then uses as it is.
func kubeConnect(s servers.Server) (*services.Conn, error) {
	k := s.(kube.API)
	kc := os.Getenv("KUBECONFIG")
	if a, ok := k.(*kube.APIServer); ok {
		var err error
		if kc, err = a.Kubeconfig(); err != nil {
			return nil, err
		}
	}
	return &services.Conn{Endpoint: kc, Rest: k.RestConfig(), Namespace: k.Namespace(),
		Env: []string{"KUBECONFIG=" + kc, NamespaceEnv + "=" + k.Namespace()}}, nil
}

// leases is the Lease client of c's namespace.
func kubeLeases(c *services.Conn) (coordinationv1client.LeaseInterface, error) {
	if c.Rest == nil {
		return nil, errors.New("no Kubernetes client configuration")
	}
	cc, err := coordinationv1client.NewForConfig(rest.CopyConfig(c.Rest))
	if err != nil {
		return nil, err
	}
	return cc.Leases(c.Namespace), nil
}

// probeKube reads a Lease that does not exist in the namespace: "not
// found" says the server answers, the credentials are accepted, and the
// user may read Leases there. Then it reads the namespace, which the Lease
// read does not check: "not found" is an error, "forbidden" is not (the
// user needs no more than the Leases).
func probeKube(ctx context.Context, c *services.Conn) error {
	l, err := kubeLeases(c)
	if err != nil {
		return err
	}
	if _, err = l.Get(ctx, "locksuite-probe", metav1.GetOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	cc, err := corev1client.NewForConfig(rest.CopyConfig(c.Rest))
	if err != nil {
		return err
	}
	if _, err = cc.Namespaces().Get(ctx, c.Namespace, metav1.GetOptions{}); err != nil && !apierrors.IsForbidden(err) {
		return err
	}
	return nil
}

func diagnoseKube(s services.Symptoms) (problem, fix string) {
	switch {
	case apierrors.IsUnauthorized(s.Err):
		return "authentication failed: the API server refuses the kubeconfig's credentials", "check the user of KUBECONFIG's current context"
	case apierrors.IsForbidden(s.Err):
		return "the kubeconfig's user may not use Leases in " + s.C.Namespace, "grant get, create, update and delete on coordination.k8s.io leases in " + NamespaceEnv + "'s namespace"
	case apierrors.IsNotFound(s.Err):
		return "the namespace " + s.C.Namespace + " does not exist", "create it, or unset " + NamespaceEnv + " to let the suite create one"
	case s.Untrusted():
		return "the API server's TLS certificate is not trusted", "put its CA in the kubeconfig's cluster (certificate-authority-data)"
	}
	return "", "check KUBECONFIG and " + NamespaceEnv + ", or unset both to let the harness start kube-apiserver"
}

// kubeHostPort is the host:port of the API server a kubeconfig names.
func kubeHostPort(ep string) string {
	rc, err := kubeconfig(ep)
	if err != nil {
		return ""
	}
	u, err := url.Parse(rc.Host)
	if err != nil || u.Host == "" {
		return rc.Host
	}
	if u.Port() == "" {
		return net.JoinHostPort(u.Hostname(), "443")
	}
	return u.Host
}

// kubeServers: kube-apiserver as the one member (its etcd, embedded in this
// process or under WithCrash a process of its own, is no member: a fault of
// the member leaves it running; a crash kills both), or none for a cluster
// of the user's.
func kubeServers(sv *services.Service, s servers.Server) suite.Servers {
	k := &Members{svc: sv, c: &services.Conn{Rest: s.(kube.API).RestConfig(), Namespace: s.(kube.API).Namespace()}}
	if a, ok := s.(*kube.APIServer); ok {
		k.members = []suite.Member{&services.Process{Label: "kube-apiserver", Proc: a.Member(), Jump: services.Unsupported(noClockKube)}}
	}
	return k
}

type Members struct {
	svc     *services.Service
	c       *services.Conn
	members []suite.Member
	*services.Crashing
}

func (k *Members) Members() []suite.Member { return k.members }

// Healthy: a Lease read in the namespace is answered (probeKube).
func (k *Members) Healthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := probeKube(ctx, k.c); err != nil {
		return fmt.Errorf("%s: %w", k.svc.Name, err)
	}
	return nil
}

// leaseName is the Lease object's name for the suite's key: the key with
// "/" as "." and other characters a DNS subdomain refuses as "-", or a
// hash of the key when that is still no subdomain.
func leaseName(key string) string {
	n := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '.':
			return r
		case r >= 'A' && r <= 'Z':
			return r - 'A' + 'a'
		case r == '/':
			return '.'
		}
		return '-'
	}, key)
	if len(validation.IsDNS1123Subdomain(n)) == 0 {
		return n
	}
	h := sha256.Sum256([]byte(key))
	return "locksuite-" + hex.EncodeToString(h[:16])
}

// wholeSeconds is the lease rounded up to whole seconds, at least 1 s:
// leaseDurationSeconds has no finer unit (long-lease asks for 2.5 × the
// pause). The Lockers' TTL says what they were given.
func wholeSeconds(d time.Duration) time.Duration {
	return max(time.Second, (d + time.Second - 1).Truncate(time.Second))
}

func newK8sLease(c *services.Conn, cl suite.Client) (backends.Locker, error) {
	return k8slease.New(k8slease.Config{Rest: c.Rest, Dial: cl.Dial, Namespace: c.Namespace, Name: leaseName(cl.Key), TTL: wholeSeconds(cl.Lease)})
}

func newLeaderElection(c *services.Conn, cl suite.Client) (backends.Locker, error) {
	return leaderelection.New(leaderelection.Config{Rest: c.Rest, Dial: cl.Dial, Namespace: c.Namespace, Name: leaseName(cl.Key), TTL: wholeSeconds(cl.Lease)})
}

func (k *Members) SetCrashing(c *services.Crashing) { k.Crashing = c }

var (
	_ suite.Crasher      = (*Members)(nil)
	_ services.Crashable = (*Members)(nil)
)
