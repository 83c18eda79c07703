package local

import (
	"slices"
	"strings"
	"testing"

	redisentry "github.com/locksuite/locksuite/harness/services/redis/entry"

	"github.com/locksuite/locksuite/harness/services"
)

// TestEndpointOf: the Endpoint a Config carries is the user's variable,
// credentials included, for a server they named, and the harness's
// server's address in the variable's form otherwise.
func TestEndpointOf(t *testing.T) {
	redisSvc, _ := serviceOf("redis")
	pgSvc, _ := serviceOf("postgres")
	e := &Env{endpoint: map[string]string{"redis": "127.0.0.1:6390", "postgres": "postgres://locksuite@127.0.0.1:5499/locksuite?sslmode=disable"}, conns: map[string]*services.Conn{}}
	if ep := e.endpointOf(redisSvc); ep.URL != "redis://127.0.0.1:6390/0" || !slices.Equal(ep.Addrs, []string{"127.0.0.1:6390"}) || ep.Password != "" || ep.TLS != nil {
		t.Errorf("the harness's redis: %+v", ep)
	}
	if ep := e.endpointOf(pgSvc); ep.URL != e.endpoint["postgres"] || !slices.Equal(ep.Addrs, []string{"127.0.0.1:5499"}) || ep.Username != "locksuite" {
		t.Errorf("the harness's postgres: %+v", ep)
	}

	t.Setenv("REDIS_URL", "rediss://alice:s3cret@redis.example:6380/2")
	c, err := redisentry.Service.FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	e.conns["redis"], e.endpoint["redis"] = c, c.Endpoint
	ep := e.endpointOf(redisSvc)
	if ep.URL != "rediss://alice:s3cret@redis.example:6380/2" || !slices.Equal(ep.Addrs, []string{"redis.example:6380"}) ||
		ep.Username != "alice" || ep.Password != "s3cret" || ep.TLS == nil {
		t.Errorf("REDIS_URL's redis: %+v", ep)
	}
}

// TestEnvironBlanksSharedVariables: a worker of a cluster the harness
// started must not take the credentials the user set for the single server
// (ETCDCTL_CACERT here): Environ blanks them, and a server the user named
// sets them after the blanks, so that its value is the one a process sees.
func TestEnvironBlanksSharedVariables(t *testing.T) {
	last := func(env []string, v string) (string, bool) {
		val, ok := "", false
		for _, kv := range env {
			if k, x, _ := strings.Cut(kv, "="); k == v {
				val, ok = x, true
			}
		}
		return val, ok
	}
	e := &Env{endpoint: map[string]string{"etcd-cluster": "127.0.0.1:2379,127.0.0.1:2380"}, conns: map[string]*services.Conn{}}
	if v, ok := last(e.Environ(), "ETCDCTL_CACERT"); !ok || v != "" {
		t.Errorf("harness's etcd-cluster: ETCDCTL_CACERT=%q (set %v), want it blank", v, ok)
	}
	e.endpoint["etcd"] = "https://etcd.example:2379"
	e.conns["etcd"] = &services.Conn{Endpoint: e.endpoint["etcd"], Env: []string{"ETCDCTL_ENDPOINTS=https://etcd.example:2379", "ETCDCTL_CACERT=/ca.pem"}}
	for range 10 { // map order
		if v, _ := last(e.Environ(), "ETCDCTL_CACERT"); v != "/ca.pem" {
			t.Fatalf("the user's etcd: ETCDCTL_CACERT=%q, want /ca.pem", v)
		}
	}
}
