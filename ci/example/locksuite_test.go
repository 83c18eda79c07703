package mylock

import (
	"context"
	"testing"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/suite"
	"github.com/locksuite/locksuite/suite/local"
)

// TestLocksuite runs every locksuite scenario against this lock. local.Start
// starts a throwaway redis-server (or uses REDIS_URL) and the counter store
// (the embedded etcd); env.Config gives the servers, the store and the fault
// proxies, and only the Locker is ours.
func TestLocksuite(t *testing.T) {
	env, err := local.Start(context.Background(), []string{"redis"})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	if err := env.Unavailable["redis"]; err != nil {
		t.Fatal(err) // names the fix: install redis-server (ci/setup.sh) or set REDIS_URL
	}
	addr := env.Endpoint("redis") // REDIS_URL's host:port, or the harness's server
	var cfgs []suite.Config
	for _, fenced := range []bool{false, true} {
		cfg := env.Config("redis", fenced)
		cfg.Name = "mylock"
		cfg.NewLocker = func(ctx context.Context, c suite.Client) (backends.Locker, error) {
			return newLocker(addr, c.Dial, c.Key, c.Lease), nil // c.Dial: this client's fault path
		}
		// A lease alone cannot protect a stalled holder: pin that down, so
		// that CI fails if the pause scenarios ever stop finding the loss.
		cfg.ExpectLoss = !fenced
		cfgs = append(cfgs, cfg)
	}
	suite.Test(t, cfgs...)
}
