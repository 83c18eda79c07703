package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/locksuite/locksuite/harness/kuberun"
)

// startKube starts --kubernetes's run in the cluster of the kubeconfig
// (KUBECONFIG, or ~/.kube/config): the Run (kuberun.Start, which deletes
// the stale runs of the namespace first) and its etcd pod, which the
// servers of this process then reach through ETCDCTL_ENDPOINTS, as a
// user's own etcd.
func startKube(ctx context.Context, o options, stderr io.Writer) (*kuberun.Run, error) {
	t0 := time.Now()
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("--kubernetes: no kubeconfig (set KUBECONFIG, or write ~/.kube/config): %w", err)
	}
	ns := o.namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, fmt.Errorf("--kubernetes: the kubeconfig's namespace: %w", err)
		}
	}
	cfg.UserAgent = "locksuite"
	r, err := kuberun.Start(ctx, cfg, ns, o.image)
	if err != nil {
		return nil, err
	}
	if sw := r.Swept(); len(sw) > 0 {
		fmt.Fprintf(stderr, "locksuite: kubernetes: deleted the objects of %d stale runs (driver gone): %s\n", len(sw), strings.Join(sw, ", "))
	}
	ep, err := r.StartEtcd(ctx)
	if err != nil {
		closeKube(r, stderr)
		return nil, err
	}
	if err := os.Setenv("ETCDCTL_ENDPOINTS", ep); err != nil {
		closeKube(r, stderr)
		return nil, err
	}
	fmt.Fprintf(stderr, "locksuite: kubernetes: run %s in namespace %s, etcd pod at %s, in %v\n", r.ID(), ns, ep, time.Since(t0).Round(time.Millisecond))
	return r, nil
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
