package local_test

import (
	"context"
	"testing"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/postgres"
	"github.com/locksuite/locksuite/suite/local/localtest"
)

// TestPostgresKeepsSession: the postgres adapter grants a client's next
// lock on the session its last Release freed (one server process per
// client, not per grant), and dials a new one when that session has been
// idle for half a lease, before idle_session_timeout could end it.
func TestPostgresKeepsSession(t *testing.T) {
	ctx := context.Background()
	env := localtest.Start(t, ctx, []string{"postgres"})
	lease := 400 * time.Millisecond
	l, err := postgres.New(postgres.Config{ConnString: env.Endpoint("postgres"), Key: t.Name(), Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	grant := func() string {
		t.Helper()
		g, err := l.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := g.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}()
		return g.(backends.Sessioner).Session()
	}
	first := grant()
	for i := range 5 {
		if s := grant(); s != first {
			t.Fatalf("grant %d on %s, the first on %s: the released session was not kept", i+2, s, first)
		}
	}
	time.Sleep(lease / 2)
	if s := grant(); s == first {
		t.Errorf("after half a lease idle, granted on %s again: want a new session", s)
	}
}
