package bench_test

import (
	"context"
	"fmt"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/harness/bench"
)

// Measure a lock of your own: the Target makes its clients, each dialling
// the lock service through the dialer it is given (so that a takeover can
// kill or freeze the holder), and Run measures them. Here the lock is the
// in-process one, whose clients dial nothing: its takeovers are skipped.
func ExampleRun() {
	inProcess := bench.Mutex(nil)
	target := bench.Target{
		Name: "my-lock",
		NewLocker: func(ctx context.Context, id int, key string, dial bench.Dialer) (backends.Locker, error) {
			return inProcess.NewLocker(ctx, id, key, dial) // your constructor, given key and dial
		},
	}
	res := bench.Run(context.Background(), target, bench.Options{Clients: []int{1, 8}, Duration: time.Second})
	if p, ok := res.Point(8, bench.Empty, false); ok {
		fmt.Printf("%.0f grants/s with 8 clients, Jain's index %.2f\n", p.GrantsPerSec.Median, p.Fairness.Jain)
	}
	for _, t := range res.Takeovers {
		fmt.Println(t.Fault, t.Skipped)
	}
}
