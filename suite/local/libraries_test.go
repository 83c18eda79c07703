package local_test

import (
	"context"
	"os"
	"strings"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/locksuite/locksuite/suite"
	"github.com/locksuite/locksuite/suite/local"
	"github.com/locksuite/locksuite/suite/local/localtest"
)

// TestLibraries runs the lock libraries (local.Libraries, each as the library
// ships it) through the baseline, the deterministic pause and
// release-after-expiry, fenced and unfenced, on real servers the harness
// starts (three redis-servers for redsync-3). Unfenced, every library must
// lose the stalled holder's update (ExpectLoss): each frees a stalled
// holder's lock and none can stop its late write. Fenced, the pause must
// lose nothing; a library that gives no token (redsync, consul/api's Lock)
// is skipped there. LOCKSUITE_LIBRARIES narrows the list (comma-separated).
func TestLibraries(t *testing.T) {
	names := local.Libraries
	if v := os.Getenv("LOCKSUITE_LIBRARIES"); v != "" {
		names = strings.Split(v, ",")
	}
	env := localtest.Start(t, context.Background(), names)
	for _, n := range names {
		if err := env.Unavailable[n]; err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	for _, n := range names {
		for _, fenced := range []bool{false, true} {
			cfg := env.Config(n, fenced)
			cfg.ExpectLoss = !fenced
			suite.GinkgoTest(&cfg)
		}
	}
	RegisterFailHandler(Fail)
	sc, rc := GinkgoConfiguration()
	if sc.LabelFilter == "" {
		sc.LabelFilter = strings.Join([]string{suite.Baseline, suite.DeterministicPause, suite.ReleaseAfterExpiry}, " || ")
	}
	RunSpecs(t, "lock libraries", sc, rc)
}
