package local

import (
	"context"
	"slices"
	"testing"

	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/suite"
)

// givenServer is a server a caller started, as kuberun's pods are: a
// servers.Server that is its own suite.Servers (no members here).
type givenServer struct {
	name, endpoint string
	stopped        int
}

func (g *givenServer) Name() string                      { return g.name }
func (g *givenServer) Endpoint() string                  { return g.endpoint }
func (g *givenServer) Stop() error                       { g.stopped++; return nil }
func (g *givenServer) Members() []faults.Member          { return nil }
func (g *givenServer) Healthy(ctx context.Context) error { return nil }
func (g *givenServer) CanCrash(powerLoss bool) error     { return nil }
func (g *givenServer) Sync() error                       { return nil }
func (g *givenServer) Crash(context.Context, bool) (faults.CrashReport, error) {
	return faults.CrashReport{}, nil
}

var _ suite.Crasher = (*givenServer)(nil)

// TestWithServer: a server given with WithServer is the service's server:
// neither started nor probed, its endpoint the one the workers get
// (Environ), itself the Configs' Servers, and stopped by Close.
func TestWithServer(t *testing.T) {
	g := &givenServer{name: "redis", endpoint: "redis://10.78.1.2:6379"}
	e, err := Start(context.Background(), []string{"redis"}, WithServer(g), WithStore("etcd"))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Unavailable["redis"]; err != nil {
		t.Fatalf("redis unavailable: %v", err)
	}
	if !slices.Contains(e.Environ(), "REDIS_URL=redis://10.78.1.2:6379") {
		t.Errorf("Environ %q: want the given server's REDIS_URL", e.Environ())
	}
	if s := e.Config("redis", false).Servers; s != suite.Servers(g) {
		t.Errorf("Config's Servers %T %v, want the given server itself", s, s)
	}
	var _ servers.Server = g
	e.Close()
	if g.stopped != 1 {
		t.Errorf("the given server stopped %d times by Close, want 1", g.stopped)
	}
}
