package kuberun

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/locksuite/locksuite/harness/faults"
)

// NetworkChaos is Chaos Mesh's NetworkChaos resource (chaos-mesh.org/v1alpha1).
var NetworkChaos = schema.GroupVersionResource{Group: "chaos-mesh.org", Version: "v1alpha1", Resource: "networkchaos"}

// Partition is a network partition that Chaos Mesh makes: a NetworkChaos
// (action partition, direction both, mode all) between the pods labelled
// From and those labelled To, in Namespace. Chaos Mesh's controller says
// when it is in effect (the condition AllInjected), but it says so from
// what its chaos daemons answered, and a daemon that is missing,
// misconfigured or blind to the pods' network does nothing: Inject counts
// the partition only once Probe sees it, and otherwise deletes it and
// returns an error saying "injected, but not observed". Heal deletes the
// NetworkChaos and waits until it is gone (Chaos Mesh's finalizer
// recovers the pods first).
//
// Applies says the fault does not apply (faults.ErrNotApplicable) where
// the cluster has no NetworkChaos resource: Chaos Mesh's CRDs are not
// installed.
type Partition struct {
	Config    *rest.Config // the cluster's API, as the driver's identity
	Namespace string
	// Name is the NetworkChaos object's name; it carries the run's labels
	// if Labels is set.
	Name   string
	Labels map[string]string
	// From and To select the two sides' pods by their labels.
	From, To map[string]string
	// Probe returns nil when it sees the two sides cut off from each
	// other (a connection from a From pod to a To pod fails), and an error
	// saying what still goes through otherwise. Required.
	Probe func(ctx context.Context) error
	// Timeout bounds each wait: for AllInjected, for the probe to see the
	// partition, for the heal. Default 30 s.
	Timeout time.Duration
	// Lane and What place the fault in the history (faults.Span).
	Lane int
	What string
}

var _ faults.Fault = (*Partition)(nil)

func (p *Partition) client() (dynamic.NamespaceableResourceInterface, error) {
	cfg := rest.CopyConfig(p.Config)
	cfg.QPS, cfg.Burst = 50, 100 // polls every 50 ms (within), not client-go's 5 per second
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return dc.Resource(NetworkChaos), nil
}

func (p *Partition) timeout() time.Duration {
	if p.Timeout > 0 {
		return p.Timeout
	}
	return 30 * time.Second
}

// Applies returns an error wrapping faults.ErrNotApplicable when the
// cluster does not serve NetworkChaos.
func (p *Partition) Applies(ctx context.Context) error {
	if p.Probe == nil {
		return errors.New("kubernetes: a Partition needs a Probe: no partition is counted without evidence")
	}
	rc, err := p.client()
	if err != nil {
		return err
	}
	return p.served(ctx, rc.Namespace(p.Namespace))
}

// served is Applies's check that nc, NetworkChaos in the namespace, is
// served.
func (p *Partition) served(ctx context.Context, nc dynamic.ResourceInterface) error {
	_, err := nc.List(ctx, metav1.ListOptions{Limit: 1})
	if apierrors.IsNotFound(err) {
		return faults.NotApplicable("Chaos Mesh's CRDs are not installed (no " + NetworkChaos.Resource + "." + NetworkChaos.Group + " in the cluster): install Chaos Mesh to partition pods")
	}
	if err != nil {
		return fmt.Errorf("kubernetes: list %s: %w", NetworkChaos.Resource, err)
	}
	return nil
}

// Inject creates the NetworkChaos, waits for Chaos Mesh to report it
// injected and for Probe to see it, and returns its heal. On any failure
// it deletes the NetworkChaos before it returns.
func (p *Partition) Inject(ctx context.Context) (func() error, error) {
	if p.Probe == nil {
		return nil, p.Applies(ctx)
	}
	rc, err := p.client()
	if err != nil {
		return nil, err
	}
	nc := rc.Namespace(p.Namespace)
	if err := p.served(ctx, nc); err != nil {
		return nil, err
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": NetworkChaos.GroupVersion().String(),
		"kind":       "NetworkChaos",
		"metadata":   map[string]any{"name": p.Name, "namespace": p.Namespace, "labels": anyMap(p.Labels)},
		"spec": map[string]any{
			"action":    "partition",
			"mode":      "all",
			"direction": "both",
			"selector":  map[string]any{"namespaces": []any{p.Namespace}, "labelSelectors": anyMap(p.From)},
			"target": map[string]any{"mode": "all",
				"selector": map[string]any{"namespaces": []any{p.Namespace}, "labelSelectors": anyMap(p.To)}},
		},
	}}
	if _, err := nc.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("kubernetes: create NetworkChaos %s: %w", p.Name, err)
	}
	heal := func() error { return p.remove(nc) }
	fail := func(err error) (func() error, error) {
		if herr := heal(); herr != nil {
			err = errors.Join(err, herr)
		}
		return nil, err
	}
	d := p.timeout()
	injected := func(ctx context.Context) error {
		o, err := nc.Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !condition(o, "AllInjected") {
			return errors.New("not reported injected")
		}
		return nil
	}
	if err := within(ctx, d, injected); err != nil {
		return fail(fmt.Errorf("kubernetes: NetworkChaos %s: Chaos Mesh did not report it injected (condition AllInjected): is its controller-manager running? (%w)", p.Name, err))
	}
	if err := within(ctx, d, p.Probe); err != nil {
		return fail(fmt.Errorf("kubernetes: NetworkChaos %s: injected, but not observed: %w (is chaos-daemon running on the pods' nodes?)", p.Name, err))
	}
	return heal, nil
}

// remove deletes the NetworkChaos and waits until it is gone (Chaos Mesh's
// finalizer recovers the pods first), up to the timeout.
func (p *Partition) remove(nc dynamic.ResourceInterface) error {
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout())
	defer cancel()
	err := nc.Delete(ctx, p.Name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kubernetes: delete NetworkChaos %s: %w", p.Name, err)
	}
	if err := within(ctx, p.timeout(), func(ctx context.Context) error {
		_, err := nc.Get(ctx, p.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return errors.New("still there")
	}); err != nil {
		return fmt.Errorf("kubernetes: NetworkChaos %s not gone: %w", p.Name, err)
	}
	return nil
}

func (p *Partition) Span() faults.Span {
	return faults.Span{Lane: p.Lane, Kind: "partition", What: p.What}
}

// condition says whether obj's status has the condition typ with status
// "True" (Chaos Mesh's status.conditions).
func condition(obj *unstructured.Unstructured, typ string) bool {
	cs, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range cs {
		m, ok := c.(map[string]any)
		if ok && m["type"] == typ && m["status"] == "True" {
			return true
		}
	}
	return false
}

// within calls check until it returns nil, up to d (faults.WaitHealthy);
// the error is check's last.
func within(ctx context.Context, d time.Duration, check func(context.Context) error) error {
	err := faults.WaitHealthy(ctx, d, check)
	if last := errors.Unwrap(err); last != nil {
		return fmt.Errorf("after %v: %w", d, last)
	}
	return err
}

func anyMap(m map[string]string) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	return out
}
