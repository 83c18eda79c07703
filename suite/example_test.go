package suite_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/redis"
	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/fencing/pgstore"
	"github.com/locksuite/locksuite/suite"
)

// A lock library's own CI: plug its Locker and a counter store into the
// suite, and run every scenario with one call. Here the Locker is this
// module's Redis adapter; yours is whatever implements backends.Locker.
func ExampleTest() {
	var t *testing.T // the *testing.T of your TestXxx function
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "") // PG* variables or DATABASE_URL-style DSN
	if err != nil {
		panic(err)
	}
	defer pool.Close()

	cfg := suite.NewConfig()
	cfg.Name = "my-redis-lock"
	cfg.NewLocker = func(ctx context.Context, c suite.Client) (backends.Locker, error) {
		// c.Dial: every connection through this client's fault path.
		return redis.New(redis.Config{Addr: "127.0.0.1:6379", Dial: c.Dial, Key: c.Key, Lease: c.Lease})
	}
	cfg.NewStore = func(ctx context.Context, name string, fenced bool) (fencing.Store, error) {
		return pgstore.New(ctx, pool, "", name, fenced)
	}
	cfg.Fenced = true // the configuration you ship must keep the invariant
	suite.Test(t, cfg)
}

// Inside an existing Ginkgo suite, register the specs and let your own
// RunSpecs run them; a BeforeEach may change cfg per context.
func ExampleGinkgoTest() {
	cfg := suite.NewConfig()
	cfg.Name = "my-lock"
	// cfg.NewLocker and cfg.NewStore as in the Test example.
	suite.GinkgoTest(&cfg)
}

// NewConfig gives the documented defaults; a lock library sets its name,
// its Locker and its counter store, and the sizes its lock needs (a lease
// at or above its service's floor). Validate names the first field that
// is missing or wrong, and the fix; Sizes says what the Config runs with.
func ExampleNewConfig() {
	cfg := suite.NewConfig()
	cfg.Name = "my-lock"
	fmt.Println(cfg.Validate())

	cfg.NewLocker = func(ctx context.Context, c suite.Client) (backends.Locker, error) {
		return redis.New(redis.Config{Addr: "127.0.0.1:6379", Dial: c.Dial, Key: c.Key, Lease: c.Lease})
	}
	cfg.NewStore = func(ctx context.Context, name string, fenced bool) (fencing.Store, error) {
		return nil, errors.New("give pgstore.New or etcdstore.New here")
	}
	cfg.Lease = 200 * time.Millisecond
	fmt.Println(cfg.Validate())
	fmt.Println(cfg.Sizes())
	// Output:
	// suite: my-lock: Config.NewLocker is nil: give a function that makes one client's Locker
	// <nil>
	// lease 200ms; baseline and control: 3 clients for 2s, work 20ms; chaos: 3 workers for 10s, 6 pauses of 800ms every 700ms, every 20th section stalls, long lease 2s
}

// Execute runs Configs as one Ginkgo suite and returns their rows, for a
// program or a test that reads the verdicts itself (the locksuite CLI
// does); Test is Execute plus the failures of a *testing.T.
func ExampleExecute() {
	var t *testing.T // the *testing.T of your TestXxx function
	cfg := suite.NewConfig()
	cfg.Name = "my-lock"
	// cfg.NewLocker and cfg.NewStore as in the Test example.
	res := suite.Execute(t, suite.Options{Scenarios: []string{"baseline", "deterministic-pause"}}, cfg)
	for _, why := range res.Unregistered {
		fmt.Println(why)
	}
	for _, r := range res.Rows {
		// r.Verdict: kept, broken, unknown or skipped; r.Expected: what
		// the scenario's table says this configuration should give.
		fmt.Printf("%s fenced=%v %s: %s (%d lost of %d writes)\n", r.Backend, r.Fencing, r.Scenario, r.Verdict, r.Lost, r.Writes)
	}
}
