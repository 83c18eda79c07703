// Package apiserver is what package kube and its kubecluster share of
// running kube-apiserver: its files and command line, its readiness check,
// and the suite's namespace.
package apiserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/servers"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
)

// Namespace is the namespace a kube-apiserver of the harness (and a cluster
// of it) makes for the suite.
const Namespace = "locksuite"

// disabledAdmission are the admission plugins on by default that the
// harness turns off: they watch APIs it does not serve (webhooks, storage
// classes, runtime classes, ...), and would wait for those watches before
// admitting a request. NamespaceLifecycle stays on.
var disabledAdmission = []string{
	"LimitRanger", "ServiceAccount", "DefaultStorageClass", "PersistentVolumeClaimResize",
	"DefaultTolerationSeconds", "MutatingAdmissionWebhook", "ValidatingAdmissionWebhook", "ResourceQuota",
	"StorageObjectInUseProtection", "PodGroupProtection", "Priority", "TaintNodesByCondition", "RuntimeClass",
	"CertificateApproval", "CertificateSigning", "ClusterTrustBundleAttest", "CertificateSubjectRestriction",
	"DefaultIngressClass", "PodSecurity", "PodTopologyLabels", "MutatingAdmissionPolicy",
	"ValidatingAdmissionPolicy", "NodeDeclaredFeatureValidator", "PodResizeValidator",
}

// CreateNamespace makes the namespace "locksuite" through cfg, trying
// for up to 30 s (a server that just became ready may still refuse).
func CreateNamespace(ctx context.Context, cfg *rest.Config) error {
	nsc, err := Namespaces(cfg)
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	err = faults.WaitHealthy(ctx, 30*time.Second, func(ctx context.Context) error {
		_, err := nsc.Create(ctx, ns, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("create namespace %s: %w", Namespace, err)
	}
	return nil
}

// Files are what a kube-apiserver of the harness reads: a test CA and
// a server certificate for 127.0.0.1 (servers.NewPKI), a service-account signing
// key (ECDSA P-256) and a static token file.
type Files struct {
	Certs        *servers.PKI
	SAKey, SAPub string // PKCS#8 private key and PKIX public key, PEM
	Tokens       string // the --token-auth-file
}

// NewFiles writes Files into dir; tokens are the lines of the token
// file ("token,user,uid,\"group,...\"").
func NewFiles(dir string, tokens ...string) (*Files, error) {
	certs, err := servers.NewPKI(dir, -1, -1)
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
	f := &Files{Certs: certs,
		SAKey: filepath.Join(dir, "service-account.key"), SAPub: filepath.Join(dir, "service-account.pub"),
		Tokens: filepath.Join(dir, "tokens.csv")}
	if err := servers.WritePEM(f.SAKey, "PRIVATE KEY", der, 0o600, -1, -1); err != nil {
		return nil, err
	}
	if err := servers.WritePEM(f.SAPub, "PUBLIC KEY", pub, 0o644, -1, -1); err != nil {
		return nil, err
	}
	if err := os.WriteFile(f.Tokens, []byte(strings.Join(tokens, "\n")+"\n"), 0o600); err != nil {
		return nil, err
	}
	return f, nil
}

// Argv is the command line of kube-apiserver bin serving on
// bind:port with etcd at etcdURL and the files f, its own files in dir
// (kube.StartAPIServer says what the flags make of it), authorizing
// requests with authorization (--authorization-mode).
func Argv(bin, etcdURL, bind string, port int, dir string, f *Files, authorization string) []string {
	return []string{bin,
		"--etcd-servers=" + etcdURL,
		"--bind-address=" + bind, "--advertise-address=" + bind, fmt.Sprintf("--secure-port=%d", port),
		"--tls-cert-file=" + f.Certs.ServerCert, "--tls-private-key-file=" + f.Certs.ServerKey,
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--token-auth-file=" + f.Tokens, "--anonymous-auth=false",
		"--authorization-mode=" + authorization,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + f.SAPub, "--service-account-signing-key-file=" + f.SAKey,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--enable-admission-plugins=NamespaceLifecycle",
		"--disable-admission-plugins=" + strings.Join(disabledAdmission, ","),
		"--enable-priority-and-fairness=false",
		"--endpoint-reconciler-type=none",
		"--profiling=false",
	}
}

// Ready is nil once GET /readyz answers 200.
func Ready(ctx context.Context, hc *http.Client, url string) error {
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

// Namespaces is the client of cfg's namespaces.
func Namespaces(cfg *rest.Config) (corev1client.NamespaceInterface, error) {
	c, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return c.Namespaces(), nil
}
