package kuberun

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/services/kube/kubetest"
	"github.com/locksuite/locksuite/internal/servercheck"
)

// networkChaosCRD is the NetworkChaos resource as Chaos Mesh's CRD names
// it (group, version, kind, plural, namespaced, a status subresource),
// with an open schema: what the API server needs to serve the objects
// Partition writes. Chaos Mesh's own CRD has the full schema.
var networkChaosCRD = map[string]any{
	"apiVersion": "apiextensions.k8s.io/v1",
	"kind":       "CustomResourceDefinition",
	"metadata":   map[string]any{"name": "networkchaos.chaos-mesh.org"},
	"spec": map[string]any{
		"group": "chaos-mesh.org",
		"scope": "Namespaced",
		"names": map[string]any{"kind": "NetworkChaos", "listKind": "NetworkChaosList", "plural": "networkchaos", "singular": "networkchaos"},
		"versions": []any{map[string]any{
			"name": "v1alpha1", "served": true, "storage": true,
			"subresources": map[string]any{"status": map[string]any{}},
			"schema": map[string]any{"openAPIV3Schema": map[string]any{
				"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
		}},
	},
}

// TestPartitionNeedsEvidence runs Partition on a real kube-apiserver with
// no Chaos Mesh: without its CRD the fault does not apply, saying why;
// with the CRD and no controller, Inject fails within its timeout; with a
// controller that reports the partition injected while nothing cuts the
// path (a chaos daemon that does nothing), Inject refuses it, "injected,
// but not observed", within a bounded time; and when the probe sees the
// cut, Inject counts it and its heal deletes the object. No NetworkChaos
// is left after any of them.
func TestPartitionNeedsEvidence(t *testing.T) {
	srv := kubetest.APIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := srv.RestConfig()
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	// The path the partition should cut: a listener that nothing cuts
	// (accepted and closed: a backlog left to fill made a probe see it cut
	// once, and Inject count a partition that was not there).
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	servercheck.AcceptAndClose(l)
	defer l.Close()
	cut := make(chan struct{}) // closed: the probe sees the path cut
	probe := func(ctx context.Context) error {
		select {
		case <-cut:
			return nil
		default:
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", l.Addr().String())
		if err != nil {
			return nil
		}
		c.Close()
		return fmt.Errorf("a connection to %s still goes through", l.Addr())
	}
	p := &Partition{Config: cfg, Namespace: srv.Namespace(), Name: "locksuite-partition-test", From: map[string]string{"app": "a"},
		To: map[string]string{"app": "b"}, Probe: probe, Timeout: 3 * time.Second, Lane: 0, What: "a | b"}
	nc := dc.Resource(NetworkChaos).Namespace(srv.Namespace())
	gone := func() {
		t.Helper()
		if _, err := nc.Get(ctx, p.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("NetworkChaos %s left behind (%v)", p.Name, err)
		}
	}

	if err := p.Applies(ctx); !errors.Is(err, faults.ErrNotApplicable) || !strings.Contains(err.Error(), "Chaos Mesh's CRDs are not installed") {
		t.Fatalf("without the CRD: Applies %v", err)
	}
	crds := dc.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	if _, err := crds.Create(ctx, &unstructured.Unstructured{Object: networkChaosCRD}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := faults.WaitHealthy(ctx, 30*time.Second, p.Applies); err != nil {
		t.Fatalf("the CRD is not served: %v", err)
	}

	t0 := time.Now()
	_, err = p.Inject(ctx)
	if err == nil || !strings.Contains(err.Error(), "did not report it injected") {
		t.Errorf("no controller: Inject %v", err)
	}
	t.Logf("no controller: refused after %v: %v", time.Since(t0).Round(time.Millisecond), err)
	gone()

	// A controller that reports every NetworkChaos injected, and a daemon
	// that does (closes cut) or does not.
	report := func(daemon bool) {
		for ctx.Err() == nil {
			o, err := nc.Get(ctx, p.Name, metav1.GetOptions{})
			if err == nil {
				_ = unstructured.SetNestedSlice(o.Object, []any{map[string]any{"type": "AllInjected", "status": "True"}}, "status", "conditions")
				if _, err := nc.UpdateStatus(ctx, o, metav1.UpdateOptions{}); err == nil {
					if daemon {
						close(cut)
					}
					return
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	go report(false)
	t0 = time.Now()
	_, err = p.Inject(ctx)
	took := time.Since(t0)
	if err == nil || !strings.Contains(err.Error(), "injected, but not observed") || !strings.Contains(err.Error(), "still goes through") {
		t.Errorf("reported injected, path open: Inject %v", err)
	}
	if took > 3*p.Timeout {
		t.Errorf("refused after %v: want within its waits (%v each)", took, p.Timeout)
	}
	t.Logf("reported injected, not observed: refused after %v: %v", took.Round(time.Millisecond), err)
	gone()

	go report(true)
	heal, err := p.Inject(ctx)
	if err != nil {
		t.Fatalf("reported injected and observed: %v", err)
	}
	if err := heal(); err != nil {
		t.Error(err)
	}
	gone()
}
