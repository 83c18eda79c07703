package suite_test

import (
	"context"
	"fmt"
	"net"
	"sync"
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
					if want := map[bool]report.Verdict{false: report.Broken, true: report.Kept}[fenced]; row.Verdict != want {
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

// BenchmarkHarnessOverhead compares, with no faults, the critical-section
// rate of the chaos harness (3 worker processes, every section recorded and
// streamed to the coordinator) with a bare loop of the same client calls in
// 3 goroutines of one process (acquire, read, 20 ms of work, write,
// release; nothing recorded). It reports both rates and harness/bare; it
// asserts nothing about speed. Run it with:
//
//	go test ./suite/ -run '^$' -bench HarnessOverhead -benchtime 1x
func BenchmarkHarnessOverhead(b *testing.B) {
	env, err := local.Start(context.Background(), local.Names)
	if err != nil {
		b.Fatal(err)
	}
	defer env.Close()
	const d = 4 * time.Second
	for _, n := range local.Names {
		b.Run(n, func(b *testing.B) {
			if err := env.Unavailable[n]; err != nil {
				b.Skip(err)
			}
			cfg := env.Config(n, false)
			cfg.Chaos.Duration = d
			var harness, bare float64
			for b.Loop() {
				row, err := suite.Run(context.Background(), cfg, suite.ChaosNone)
				if err != nil {
					b.Fatal(err)
				}
				if row.Verdict != report.Kept {
					b.Fatalf("no faults, verdict %s: %s", row.Verdict, row.Reason)
				}
				harness += row.WritesPerSec
				bare += bareRate(b, cfg, d)
			}
			b.ReportMetric(harness/float64(b.N), "harness-writes/s")
			b.ReportMetric(bare/float64(b.N), "bare-writes/s")
			b.ReportMetric(harness/bare, "harness/bare")
		})
	}
}

// bareRate runs cfg.Chaos.Workers goroutines of acquire → read → work →
// write → release for d, with nothing recorded, and returns writes/s.
func bareRate(b *testing.B, cfg suite.Config, d time.Duration) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	key := fmt.Sprintf("locksuite/bench/%s/%d", cfg.Name, time.Now().UnixNano())
	s, err := cfg.NewStore(context.Background(), key, false)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(context.Background())
	var mu sync.Mutex
	writes := 0
	var wg sync.WaitGroup
	t0 := time.Now()
	for id := range cfg.Chaos.Workers {
		l, err := cfg.NewLocker(ctx, suite.Client{ID: id, Key: key, Dial: (&net.Dialer{}).DialContext, Lease: cfg.Lease})
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer l.Close()
			for ctx.Err() == nil {
				lease, err := l.Acquire(ctx)
				if err != nil {
					return
				}
				v, err := s.Read(ctx, lease.Fence())
				if err == nil {
					time.Sleep(cfg.Work)
					err = s.Write(context.WithoutCancel(ctx), v+1, lease.Fence())
				}
				lease.Release(context.WithoutCancel(ctx))
				if err == nil {
					mu.Lock()
					writes++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return float64(writes) / time.Since(t0).Seconds()
}
