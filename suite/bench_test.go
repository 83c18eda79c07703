package suite_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/suite"
	"github.com/locksuite/locksuite/suite/local"
)

// expiryFloor is the time after which each backend frees a stalled lease:
// Redis the lease; etcd TTL plus its 500 ms expiry check; Consul about 2 ×
// TTL; Postgres idle_session_timeout.
func expiryFloor(n string) time.Duration {
	l := local.Leases[n]
	switch n {
	case "etcd":
		return l + 500*time.Millisecond
	case "consul":
		return 2 * l
	}
	return l
}

// BenchmarkDeterministicPause measures one deterministic pause case per
// backend and fencing mode. It reports ms/case, the target (1.25 × the
// expiry floor + 100 ms) and the ratio of the two; it asserts nothing about
// time. Run it with:
//
//	go test ./suite/ -run '^$' -bench DeterministicPause -benchtime 5x
func BenchmarkDeterministicPause(b *testing.B) {
	env, err := local.Start(context.Background(), local.Names)
	if err != nil {
		b.Fatal(err)
	}
	defer env.Close()
	for _, n := range local.Names {
		for _, fenced := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/fencing=%v", n, fenced), func(b *testing.B) {
				if err := env.Unavailable[n]; err != nil {
					b.Skip(err)
				}
				cfg := env.Config(n, fenced)
				var total time.Duration
				for b.Loop() {
					row, err := suite.Run(context.Background(), cfg, suite.DeterministicPause)
					if err != nil {
						b.Fatal(err)
					}
					if row.Verdict == report.Skipped {
						b.Skip(row.Reason)
					}
					if want := map[bool]string{false: report.Broken, true: report.Kept}[fenced]; row.Verdict != want {
						b.Errorf("verdict %s, want %s: %s", row.Verdict, want, row.Reason)
					}
					total += time.Duration(row.DurationMS) * time.Millisecond
				}
				target := expiryFloor(n)*5/4 + 100*time.Millisecond
				per := float64(total.Milliseconds()) / float64(b.N)
				b.ReportMetric(per, "ms/case")
				b.ReportMetric(float64(target.Milliseconds()), "target-ms")
				b.ReportMetric(per/float64(target.Milliseconds()), "of-target")
			})
		}
	}
}
