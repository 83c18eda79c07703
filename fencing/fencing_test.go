package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/fencing/etcdstore"
	"github.com/locksuite/locksuite/fencing/pgstore"
	"github.com/locksuite/locksuite/harness/role"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/harness/servers/servertest"
	"github.com/locksuite/locksuite/harness/services/etcd"
)

// TestMain serves the roles this test binary is run again in (a cluster
// member, a Kubernetes node: harness/role) before any test.
func TestMain(m *testing.M) { os.Exit(role.Main(m)) }

// TestStores runs the same table against a real Postgres and a real
// (embedded) etcd: each step is an operation with a token and the outcome a
// fenced and an unfenced store must give.
func TestStores(t *testing.T) {
	ctx := servertest.Slow(t, "starts real servers", 2*time.Minute)
	pool := startPostgres(t)
	et := servertest.Start(t, ctx, etcd.Start)
	ec, err := clientv3.New(clientv3.Config{Endpoints: []string{et.Endpoint()}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	open := map[string]func(name string, fenced bool) (fencing.Store, error){
		"postgres": func(name string, fenced bool) (fencing.Store, error) {
			return pgstore.New(ctx, pool, "", name, fenced)
		},
		"etcd": func(name string, fenced bool) (fencing.Store, error) { return etcdstore.New(ctx, ec, name, fenced) },
	}
	type step struct {
		op     string // "read" or "write"
		fence  uint64
		value  int64 // for writes
		stale  bool  // fenced outcome
		result int64 // counter after the step, fenced
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"holders in order", []step{{"read", 1, 0, false, 0}, {"write", 1, 1, false, 1}, {"read", 2, 0, false, 1}, {"write", 2, 2, false, 2}}},
		{"late write after a newer write is refused", []step{{"read", 1, 0, false, 0}, {"read", 2, 0, false, 0}, {"write", 2, 1, false, 1}, {"write", 1, 1, true, 1}}},
		// The window of write-only fencing: the old holder writes between
		// the new holder's read and write.
		{"late write after a newer read is refused", []step{{"read", 1, 0, false, 0}, {"read", 2, 0, false, 0}, {"write", 1, 1, true, 0}, {"write", 2, 1, false, 1}}},
		{"late read after a newer read is refused", []step{{"read", 2, 0, false, 0}, {"read", 1, 0, true, 0}}},
	} {
		for backend, mk := range open {
			t.Run(backend+"/"+tc.name, func(t *testing.T) {
				for _, fenced := range []bool{true, false} {
					s, err := mk(fmt.Sprintf("locksuite/test/%s/%v", t.Name(), fenced), fenced)
					if err != nil {
						t.Fatal(err)
					}
					defer s.Close(ctx)
					rejected := uint64(0)
					for i, st := range tc.steps {
						if st.op == "read" {
							_, err = s.Read(ctx, st.fence)
						} else {
							err = s.Write(ctx, st.value, st.fence)
						}
						wantStale := fenced && st.stale
						if errors.Is(err, fencing.ErrStale) != wantStale || (err != nil && !errors.Is(err, fencing.ErrStale)) {
							t.Fatalf("fenced=%v step %d %+v: err %v, want stale=%v", fenced, i, st, err, wantStale)
						}
						if wantStale {
							rejected++
						}
						if fenced {
							if v, _ := s.Value(ctx); v != st.result {
								t.Fatalf("fenced step %d %+v: counter %d, want %d", i, st, v, st.result)
							}
						}
					}
					if s.Rejected() != rejected {
						t.Errorf("fenced=%v: Rejected() = %d, want %d", fenced, s.Rejected(), rejected)
					}
				}
			})
		}
	}
}

// TestPostgresRefusesForeignTable: pgstore.New uses only a counter table it
// created (marked with TableMark); a table of the same name made by someone
// else is refused with an error naming it and the fix, and left as it was.
// Concurrent openers of a new table (the workers of one run) all succeed.
func TestPostgresRefusesForeignTable(t *testing.T) {
	ctx := servertest.Slow(t, "starts a real server", 2*time.Minute)
	pool := startPostgres(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// Someone else's tables: one with the suite's default name, one with a
	// comment of its own.
	must2 := func(_ any, err error) { t.Helper(); must(err) }
	must2(pool.Exec(ctx, `CREATE TABLE locksuite_counter (name text PRIMARY KEY, value bigint NOT NULL, fence bigint NOT NULL)`))
	must2(pool.Exec(ctx, `INSERT INTO locksuite_counter VALUES ('theirs', 41, 0)`))
	must2(pool.Exec(ctx, `CREATE TABLE billing (name text PRIMARY KEY, value bigint NOT NULL, fence bigint NOT NULL)`))
	must2(pool.Exec(ctx, `COMMENT ON TABLE billing IS 'invoices, do not touch'`))
	for _, table := range []string{"", "billing"} {
		_, err := pgstore.New(ctx, pool, table, "locksuite/test/x", false)
		name := table
		if name == "" {
			name = pgstore.DefaultTable
		}
		if err == nil || !strings.Contains(err.Error(), "table "+name+" exists but was not created by locksuite") || !strings.Contains(err.Error(), "pass another table name") {
			t.Errorf("table %q: err %v, want a refusal naming the table and the fix", name, err)
		}
	}
	var rows int
	var comment *string
	must(pool.QueryRow(ctx, `SELECT count(*) FROM locksuite_counter`).Scan(&rows))
	must(pool.QueryRow(ctx, `SELECT obj_description('billing'::regclass, 'pg_class')`).Scan(&comment))
	if rows != 1 || comment == nil || *comment != "invoices, do not touch" {
		t.Errorf("the foreign tables changed: %d rows in locksuite_counter, billing's comment %v", rows, comment)
	}

	// A new table: created and marked once, however many open it at once.
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			s, err := pgstore.New(ctx, pool, "locksuite_fresh", fmt.Sprintf("locksuite/test/%d", i), true)
			if err == nil {
				err = s.Write(ctx, 1, 1)
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Errorf("concurrent open of a new table: %v", err)
		}
	}
	must(pool.QueryRow(ctx, `SELECT obj_description('locksuite_fresh'::regclass, 'pg_class')`).Scan(&comment))
	if comment == nil || *comment != pgstore.TableMark {
		t.Errorf("the created table's comment is %v, want the mark %q", comment, pgstore.TableMark)
	}
}

// startPostgres starts a throwaway Postgres for t and returns a pool on it;
// both end with t.
func startPostgres(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pg := servertest.Start(t, context.Background(), servers.StartPostgres)
	pool, err := pgxpool.New(context.Background(), pg.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
