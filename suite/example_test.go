package suite_test

import (
	"context"
	"testing"

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
