package suite_test

import (
	"context"
	"testing"
	"time"

	"github.com/locksuite/locksuite/suite"
	"github.com/locksuite/locksuite/suite/local"
)

// TestSuite runs every spec on the four real backends, which the harness
// starts itself (or takes from REDIS_URL, DATABASE_URL, CONSUL_HTTP_ADDR,
// ETCDCTL_ENDPOINTS). Unfenced, the pause scenarios must lose an update on
// every backend (ExpectLoss): a lease alone does not protect a stalled
// holder's write. Fenced, they must lose none. The chaos scenarios run
// worker processes (this test binary, run again) with 3 pauses each, so the
// whole suite takes a few minutes. The fault scenarios (a cut or blackholed
// holder, a stopped server, a terminated session, a clock jump) use the
// servers the harness started (Config.Servers): about 21 s of it.
func TestSuite(t *testing.T) {
	env, err := local.Start(context.Background(), local.Names)
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	for n, err := range env.Unavailable {
		t.Errorf("%s: %v", n, err)
	}
	if t.Failed() {
		t.FailNow()
	}
	var cfgs []suite.Config
	for _, n := range local.Names {
		for _, fenced := range []bool{false, true} {
			cfg := env.Config(n, fenced)
			cfg.ExpectLoss = !fenced
			cfg.Chaos.Pauses = 3
			cfg.Chaos.Duration = 3 * time.Second
			cfgs = append(cfgs, cfg)
		}
	}
	suite.Test(t, cfgs...)
}
