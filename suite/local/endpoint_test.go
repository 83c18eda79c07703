package local

import (
	"slices"
	"testing"
)

// TestEndpointOf: the Endpoint a Config carries is the user's variable,
// credentials included, for a server they named, and the harness's
// server's address in the variable's form otherwise.
func TestEndpointOf(t *testing.T) {
	redisSvc, _ := serviceOf("redis")
	pgSvc, _ := serviceOf("postgres")
	e := &Env{endpoint: map[string]string{"redis": "127.0.0.1:6390", "postgres": "postgres://locksuite@127.0.0.1:5499/locksuite?sslmode=disable"}, conns: map[string]*conn{}}
	if ep := e.endpointOf(redisSvc); ep.URL != "redis://127.0.0.1:6390/0" || !slices.Equal(ep.Addrs, []string{"127.0.0.1:6390"}) || ep.Password != "" || ep.TLS != nil {
		t.Errorf("the harness's redis: %+v", ep)
	}
	if ep := e.endpointOf(pgSvc); ep.URL != e.endpoint["postgres"] || !slices.Equal(ep.Addrs, []string{"127.0.0.1:5499"}) || ep.Username != "locksuite" {
		t.Errorf("the harness's postgres: %+v", ep)
	}

	t.Setenv("REDIS_URL", "rediss://alice:s3cret@redis.example:6380/2")
	c, err := redisFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	e.conns["redis"], e.endpoint["redis"] = c, c.endpoint
	ep := e.endpointOf(redisSvc)
	if ep.URL != "rediss://alice:s3cret@redis.example:6380/2" || !slices.Equal(ep.Addrs, []string{"redis.example:6380"}) ||
		ep.Username != "alice" || ep.Password != "s3cret" || ep.TLS == nil {
		t.Errorf("REDIS_URL's redis: %+v", ep)
	}
}
