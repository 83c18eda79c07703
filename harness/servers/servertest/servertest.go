// Package servertest starts the harness's servers for tests.
package servertest

import (
	"context"
	"testing"

	"github.com/locksuite/locksuite/harness/servers"
)

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
