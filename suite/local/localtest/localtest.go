// Package localtest starts a local.Env for a test and opens clients of its
// servers, to check what a run left on them.
package localtest

import (
	"context"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/locksuite/locksuite/suite/local"
)

// Start is local.Start for a test: it fails the test if Start fails, and
// closes the Env when the test and its subtests end (after the test's
// deferred calls, so after the clients a test closes with defer).
func Start(t testing.TB, ctx context.Context, names []string, opts ...local.Option) *local.Env {
	t.Helper()
	env, err := local.Start(ctx, names, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	return env
}

// Vars are env's Environ as a map: variable → value.
func Vars(env *local.Env) map[string]string {
	vars := map[string]string{}
	for _, kv := range env.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	return vars
}

// Redis is a client of env's Redis server (REDIS_URL), closed when the test
// ends.
func Redis(t testing.TB, env *local.Env) *goredis.Client {
	t.Helper()
	ro, _ := goredis.ParseURL(Vars(env)["REDIS_URL"])
	rc := goredis.NewClient(ro)
	t.Cleanup(func() { rc.Close() })
	return rc
}

// Etcd is a client of env's etcd server (ETCDCTL_ENDPOINTS), closed when the
// test ends.
func Etcd(t testing.TB, env *local.Env) *clientv3.Client {
	t.Helper()
	ec, err := clientv3.New(clientv3.Config{Endpoints: []string{Vars(env)["ETCDCTL_ENDPOINTS"]}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ec.Close() })
	return ec
}
