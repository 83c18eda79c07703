// Package servertest starts the harness's servers for tests.
package servertest

import (
	"context"
	"testing"
	"time"

	"github.com/locksuite/locksuite/harness/servers"
)

// Slow skips the test under -short, saying why (what it starts), and
// returns a context that ends after timeout or when the test and its
// subtests end, whichever comes first. Called first in a test, it
// registers the context's cancel with t.Cleanup before anything else, so
// the cancel runs after the other cleanups (the servers Start stops, the
// clients the test closes), which may still use the context.
func Slow(t testing.TB, why string, timeout time.Duration) context.Context {
	t.Helper()
	if testing.Short() {
		t.Skip(why)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return ctx
}

// Start starts a server with start (servers.StartRedis, servers.StartPostgres,
// ...) and opts, failing the test if it cannot, and stops it when the test
// and its subtests end: after the test's deferred calls, so after the
// clients a test closes with defer.
func Start[S interface{ Stop() error }](t testing.TB, ctx context.Context, start func(context.Context, ...servers.Option) (S, error), opts ...servers.Option) S {
	t.Helper()
	s, err := start(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop() })
	return s
}

// Cluster starts an n-member cluster with start (nats.StartCluster,
// servers.StartZooKeeperEnsemble, ...) and opts as Start starts a server,
// and logs how long it took to be healthy.
func Cluster[C interface{ Stop() error }](t testing.TB, ctx context.Context, start func(context.Context, int, ...servers.Option) (C, error), n int, opts ...servers.Option) C {
	t.Helper()
	t0 := time.Now()
	c, err := start(ctx, n, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	t.Logf("cluster healthy in %v", time.Since(t0).Round(time.Millisecond))
	return c
}
