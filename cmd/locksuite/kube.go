package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/locksuite/locksuite/harness/kuberun"
	"github.com/locksuite/locksuite/suite/local"
)

// startKube starts --kubernetes's run in the cluster of the kubeconfig
// (KUBECONFIG, or ~/.kube/config): the Run (kuberun.Start, which deletes
// the stale runs of the namespace first), its etcd pod (the counter's
// store, and the etcd backends' service) and the pod of each other
// service the backends run on (local.Pod: Redis's, NATS's). It returns them as
// local.WithServer options.
func startKube(ctx context.Context, o options, stderr io.Writer) (*kuberun.Run, []local.Option, error) {
	t0 := time.Now()
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("--kubernetes: no kubeconfig (set KUBECONFIG, or write ~/.kube/config): %w", err)
	}
	ns := o.namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, nil, fmt.Errorf("--kubernetes: the kubeconfig's namespace: %w", err)
		}
	}
	cfg.UserAgent = "locksuite"
	r, err := kuberun.Start(ctx, cfg, ns, o.image)
	if err != nil {
		return nil, nil, err
	}
	if sw := r.Swept(); len(sw) > 0 {
		fmt.Fprintf(stderr, "locksuite: kubernetes: deleted the objects of %d stale runs (driver gone): %s\n", len(sw), strings.Join(sw, ", "))
	}
	starts := []string{"etcd"} // the counter's store
	for _, b := range o.backends {
		if p := local.Pod(b); p != "" && !slices.Contains(starts, p) {
			starts = append(starts, p)
		}
	}
	opts := []local.Option{local.WithStore("etcd")}
	var pods []string
	for _, name := range starts {
		svc, err := r.StartPod(ctx, name)
		if err != nil {
			closeKube(r, stderr)
			return nil, nil, err
		}
		opts = append(opts, local.WithServer(svc))
		pods = append(pods, fmt.Sprintf("%s pod at %s", svc.Name(), svc.Endpoint()))
	}
	fmt.Fprintf(stderr, "locksuite: kubernetes: run %s in namespace %s, %s, in %v\n", r.ID(), ns, strings.Join(pods, ", "), time.Since(t0).Round(time.Millisecond))
	return r, opts, nil
}

// closeKube deletes the run's objects, waiting up to a minute for its
// pods to go.
func closeKube(r *kuberun.Run, stderr io.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.Close(ctx); err != nil {
		fmt.Fprintf(stderr, "locksuite: %v (a later --kubernetes run in namespace %s deletes what is left once it is %v old)\n", err, r.Namespace(), kuberun.StaleAfter)
	}
}
