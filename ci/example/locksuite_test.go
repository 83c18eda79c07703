package mylock

import (
	"context"
	"testing"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/suite"
	"github.com/locksuite/locksuite/suite/local"
)

// TestLocksuite runs every locksuite scenario against this lock. local.Start
// starts a throwaway redis-server (or uses the one REDIS_URL names, with
// its password and TLS settings) and the counter store (the embedded etcd);
// env.ConfigFor plugs our Locker into that service and gives the servers,
// the store, the service's default sizes and its Endpoint.
func TestLocksuite(t *testing.T) {
	env, err := local.Start(context.Background(), []string{"redis"})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	ours := func(ctx context.Context, c suite.Client) (backends.Locker, error) {
		return newLocker(c) // c.Endpoint: REDIS_URL (password, TLS) or the harness's server
	}
	var cfgs []suite.Config
	for _, fenced := range []bool{false, true} {
		cfg, err := env.ConfigFor("mylock", "redis", fenced, ours)
		if err != nil {
			t.Fatal(err) // names the fix: install redis-server (ci/setup.sh) or set REDIS_URL
		}
		// A lease alone cannot protect a stalled holder: pin that down, so
		// that CI fails if the scenarios that aim a fault at the holder ever
		// stop finding the loss (those chance decides are measured).
		cfg.ExpectLoss = !fenced
		cfgs = append(cfgs, cfg)
	}
	suite.Test(t, cfgs...)
}
