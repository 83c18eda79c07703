package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/locksuite/locksuite/harness/kuberun"
)

// startKube starts --kubernetes's run in the cluster of the kubeconfig
// (KUBECONFIG, or ~/.kube/config): the Run (kuberun.Start, which deletes
// the stale runs of the namespace first), its etcd pod (the counter's
// store, and the etcd backends' service) and, for the redis backend, its
// Redis pod, which the servers of this process then reach through
// ETCDCTL_ENDPOINTS and REDIS_URL, as a user's own.
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
	pods := "etcd pod at " + ep
	if slices.Contains(o.backends, "redis") {
		u, err := r.StartRedis(ctx)
		if err == nil {
			err = os.Setenv("REDIS_URL", u)
		}
		if err != nil {
			closeKube(r, stderr)
			return nil, err
		}
		pods += ", redis pod at " + u
	}
	fmt.Fprintf(stderr, "locksuite: kubernetes: run %s in namespace %s, %s, in %v\n", r.ID(), ns, pods, time.Since(t0).Round(time.Millisecond))
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
