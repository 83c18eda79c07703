package suite_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/jackc/pgx/v5"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/suite"
	"github.com/locksuite/locksuite/suite/local"
	"github.com/locksuite/locksuite/suite/local/localtest"
)

// TestSharedServers seeds each backend with data that is not the suite's,
// runs the scenarios that touch the lock service and the store, and checks
// that the seeded data is untouched and that the suite left nothing of its
// own behind (keys, sessions, fence counters, sequences, counter rows).
func TestSharedServers(t *testing.T) {
	ctx := context.Background()
	// The four adapters, and the lock libraries on the same servers
	// (redsync-3 needs servers of its own).
	names := append(slices.Clone(local.Names), "consul-lock", "etcd-mutex", "pg-xact", "redsync")
	env := localtest.Start(t, ctx, names)
	vars := localtest.Vars(env)

	rc, ec := localtest.Redis(t, env), localtest.Etcd(t, env)
	ccfg := consulapi.DefaultConfig()
	ccfg.Address = vars["CONSUL_HTTP_ADDR"]
	cc, _ := consulapi.NewClient(ccfg)
	pg, err := pgx.Connect(ctx, vars["DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close(ctx)

	// Someone else's data.
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(rc.Set(ctx, "app:user:1", "alice", 0).Err())
	must(rc.Set(ctx, "locksuite", "not the suite's: no prefix separator", 0).Err())
	_, err = ec.Put(ctx, "app/config", "v1")
	must(err)
	_, err = cc.KV().Put(&consulapi.KVPair{Key: "app/config", Value: []byte("v1")}, nil)
	must(err)
	_, err = pg.Exec(ctx, `CREATE TABLE app_orders (id int); INSERT INTO app_orders VALUES (1), (2); CREATE SEQUENCE app_seq`)
	must(err)

	for _, n := range names {
		for _, fenced := range []bool{false, true} {
			cfg := env.Config(n, fenced)
			cfg.Duration = 500 * time.Millisecond
			for _, sc := range []string{suite.Baseline, suite.DeterministicPause, suite.ReleaseAfterExpiry, suite.PartitionCut, suite.SessionKill, suite.ClockJump} {
				row, err := suite.Run(ctx, cfg, sc)
				if err != nil {
					t.Fatalf("%s fenced=%v %s: %v", n, fenced, sc, err)
				}
				if row.Verdict == report.Unknown {
					t.Fatalf("%s fenced=%v %s: unknown: %s", n, fenced, sc, row.Reason)
				}
			}
		}
	}
	keys, err := rc.Keys(ctx, "*").Result()
	must(err)
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"app:user:1", "locksuite"}) {
		t.Errorf("redis keys after the run: %q, want only the seeded app:user:1 and locksuite", keys)
	}
	if v, _ := rc.Get(ctx, "app:user:1").Result(); v != "alice" {
		t.Errorf("redis app:user:1 = %q, want alice", v)
	}
	er, err := ec.Get(ctx, "", clientv3.WithFromKey())
	must(err)
	var ekeys []string
	for _, kv := range er.Kvs {
		ekeys = append(ekeys, string(kv.Key))
	}
	if !slices.Equal(ekeys, []string{"app/config"}) {
		t.Errorf("etcd keys after the run: %q, want only app/config", ekeys)
	}
	cpairs, _, err := cc.KV().List("", nil)
	must(err)
	var ckeys []string
	for _, p := range cpairs {
		ckeys = append(ckeys, p.Key)
	}
	if !slices.Equal(ckeys, []string{"app/config"}) {
		t.Errorf("consul keys after the run: %q, want only app/config", ckeys)
	}
	sessions, _, err := cc.Session().List(nil)
	must(err)
	for _, s := range sessions {
		if strings.HasPrefix(s.Name, "locksuite") {
			t.Errorf("consul session %s (%s) left behind", s.ID, s.Name)
		}
	}
	var orders, ours, seqs int
	must(pg.QueryRow(ctx, `SELECT count(*) FROM app_orders`).Scan(&orders))
	// The counter rows are on the store's server: a Postgres of its own
	// (local.StoreEnv), since the Postgres under test is the harness's.
	store, ok := vars[local.StoreEnv]
	if !ok {
		t.Fatalf("Environ names no %s: the counter store shares the Postgres under test", local.StoreEnv)
	}
	sp, err := pgx.Connect(ctx, store)
	must(err)
	defer sp.Close(ctx)
	must(sp.QueryRow(ctx, `SELECT count(*) FROM locksuite_counter`).Scan(&ours))
	must(pg.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relkind = 'S' AND relname <> 'app_seq'`).Scan(&seqs))
	if orders != 2 {
		t.Errorf("app_orders has %d rows, want the 2 seeded", orders)
	}
	if ours != 0 || seqs != 0 {
		t.Errorf("postgres: %d counter rows and %d sequences of the suite left behind", ours, seqs)
	}
}
