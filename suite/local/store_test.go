package local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/harness/services"
)

// TestChooseStore: the counter store is the first of stores whose service
// Start provides, else the last (embedded); WithStore's choice is the only
// one tried; an unknown one is refused with the choices.
func TestChooseStore(t *testing.T) {
	for _, tc := range []struct {
		asked string
		want  []string // services Start provides
		try   string
	}{
		{"", []string{"redis"}, "etcd"},
		{"", []string{"postgres", "redis"}, "postgres,etcd"},
		{"", []string{"pg-xact"}, "etcd"}, // want holds services, not backends: Start maps them
		{"etcd", []string{"postgres"}, "etcd"},
		{"postgres", []string{"redis"}, "postgres"},
	} {
		want := map[string]bool{}
		for _, n := range tc.want {
			want[n] = true
		}
		got, err := chooseStore(tc.asked, want)
		var names []string
		for _, s := range got {
			names = append(names, s.Name)
		}
		if err != nil || strings.Join(names, ",") != tc.try {
			t.Errorf("store %q with %v: tries %v, %v; want %s", tc.asked, tc.want, names, err, tc.try)
		}
	}
	if _, err := chooseStore("redis", nil); err == nil || !strings.Contains(err.Error(), `unknown store "redis": choose postgres or etcd`) {
		t.Errorf("store redis: %v", err)
	}
	if Stores[len(Stores)-1] != "etcd" {
		t.Errorf("Stores %v: the last, always available, must be the embedded etcd", Stores)
	}
}

// TestOwnStore: with the store's service under test on a server Start
// starts, the counter store gets a server of its own: not the one under
// test, named in Environ by StoreEnv, and not the Configs' StoreService;
// another Env given that variable (a worker process) counts on the same
// store and starts no store of its own; Close stops it.
func TestOwnStore(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd servers")
	}
	ctx := context.Background()
	e, err := Start(ctx, []string{"etcd"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Store != "etcd" || e.storeSrv == nil || e.storeAt == "" || e.storeAt == e.Endpoint("etcd") {
		t.Fatalf("store %s at %q (server %v); etcd under test at %q: want a server of the store's own", e.Store, e.storeAt, e.storeSrv, e.Endpoint("etcd"))
	}
	if cfg := e.Config("etcd", true); cfg.StoreService != "" {
		t.Errorf("StoreService %q: the store shares no server under test", cfg.StoreService)
	}
	if !slices.Contains(e.Environ(), StoreEnv+"="+e.storeAt) {
		t.Errorf("Environ %v: does not name the store's server", e.Environ())
	}
	st, err := e.newStore(ctx, "own-store", false)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	if err := st.Write(ctx, 41, 1); err != nil {
		t.Fatal(err)
	}

	t.Setenv(StoreEnv, e.storeAt)
	w, err := Start(ctx, []string{"etcd"}, WithStore("etcd"))
	if err != nil {
		t.Fatal(err)
	}
	if w.storeSrv != nil || w.storeAt != e.storeAt {
		t.Errorf("with %s set: store at %q, own server %v; want %q and none", StoreEnv, w.storeAt, w.storeSrv, e.storeAt)
	}
	wst, err := w.newStore(ctx, "own-store", false)
	if err == nil {
		var v int64
		v, err = wst.Value(ctx)
		if err == nil && v != 41 {
			err = fmt.Errorf("counter %d, want the 41 written through the first Env", v)
		}
	}
	w.Close()
	if err != nil {
		t.Error(err)
	}

	at := e.storeAt
	e.Close()
	if c, err := net.DialTimeout("tcp", services.StripScheme(at), time.Second); err == nil {
		c.Close()
		t.Errorf("the store's server at %s still listens after Close", at)
	}
}

// TestStoreEnvRefused: a StoreEnv of another kind than WithStore's, or
// naming no server, is refused with the variable named, within seconds.
func TestStoreEnvRefused(t *testing.T) {
	ctx := context.Background()
	t.Setenv(StoreEnv, "postgres://locksuite:s3cret@127.0.0.1:1/postgres?sslmode=disable")
	if _, err := Start(ctx, []string{"redis"}, WithStore("etcd")); err == nil || !strings.Contains(err.Error(), "LOCKSUITE_STORE_URL names a postgres server, but the counter store asked for is etcd") {
		t.Errorf("postgres URL, etcd store: %v", err)
	}
	t0 := time.Now()
	_, err := Start(ctx, nil)
	if err == nil || !strings.Contains(err.Error(), "counter store at LOCKSUITE_STORE_URL") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("no server at the URL: %v", err)
	}
	if d := time.Since(t0); d > 15*time.Second {
		t.Errorf("refused after %v", d)
	}
}

// TestStartRetrying: a start that failed on a port another process took
// is tried again, three times at most; any other failure is returned at
// once.
func TestStartRetrying(t *testing.T) {
	for _, tc := range []struct {
		err   string
		tries int
	}{
		{"redis-server exited (exit status 1): ... bind: Address already in use", 3},
		{"initdb: permission denied", 1},
	} {
		n := 0
		_, err := startRetrying(func() (servers.Server, error) {
			n++
			return nil, errors.New(tc.err)
		})
		if err == nil || n != tc.tries {
			t.Errorf("%q: %d tries, %v; want %d", tc.err, n, err, tc.tries)
		}
	}
	n := 0
	if _, err := startRetrying(func() (servers.Server, error) {
		if n++; n < 2 {
			return nil, errors.New("listen tcp 127.0.0.1:30913: bind: address already in use")
		}
		return nil, nil
	}); err != nil || n != 2 {
		t.Errorf("taken, then started: %d tries, %v", n, err)
	}
}
