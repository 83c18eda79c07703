package local

import (
	"slices"
	"strings"
	"testing"

	postgresentry "github.com/locksuite/locksuite/harness/services/postgres/entry"
	zookeeperentry "github.com/locksuite/locksuite/harness/services/zookeeper/entry"

	"github.com/locksuite/locksuite/harness/services"
)

// TestCredentialsFromEnv: the ecosystem's variables give each backend its
// credentials and TLS settings, and the same variables reach worker
// processes through Config.WorkerEnv, and no other variable does.
func TestCredentialsFromEnv(t *testing.T) {
	vars := map[string]string{
		"REDIS_URL":          "rediss://app:redispw@127.0.0.1:6380/0",
		"PGHOST":             "127.0.0.1",
		"PGPORT":             "5433",
		"PGPASSWORD":         "pgpw",
		"PGSSLMODE":          "require",
		"CONSUL_HTTP_ADDR":   "https://127.0.0.1:8501",
		"CONSUL_HTTP_TOKEN":  "consul-token",
		"ETCDCTL_ENDPOINTS":  "https://127.0.0.1:2379",
		"ETCDCTL_USER":       "root:etcdpw",
		"CONSUL_HTTP_SSL":    "true",
		"ZOOKEEPER_ADDRS":    "127.0.0.1:2181",
		ZooKeeperAuthEnv:     "zkuser:zkpw",
		"MYSQL_URL":          "locksuite:mysqlpw@tcp(127.0.0.1:3306)/locksuite",
		"NATS_URL":           "nats://127.0.0.1:4222",
		"UNRELATED_PASSWORD": "not-ours",
	}
	for k, v := range vars {
		t.Setenv(k, v)
	}
	e := &Env{endpoint: map[string]string{}, conns: map[string]*services.Conn{}}
	for _, n := range Names {
		s, _ := serviceOf(n)
		c, err := named(s)
		if err != nil || c == nil {
			t.Fatalf("%s: %v, %v", n, c, err)
		}
		e.conns[n], e.endpoint[n] = c, c.Endpoint
	}
	r, p, cs, et := e.conns["redis"], e.conns["postgres"], e.conns["consul"], e.conns["etcd"]
	if r.TLS == nil || r.TLS.ServerName != "127.0.0.1" || !slices.Contains(r.Secrets, "redispw") {
		t.Errorf("redis: TLS %v, secrets %q: want rediss:// TLS for 127.0.0.1 and the URL's password as a secret", r.TLS, r.Secrets)
	}
	if !slices.Contains(p.Secrets, "pgpw") || postgresentry.HostPort(p.Endpoint) != "127.0.0.1:5433" {
		t.Errorf("postgres: secrets %q, address %s", p.Secrets, postgresentry.HostPort(p.Endpoint))
	}
	if cs.Token != "consul-token" || cs.TLS == nil {
		t.Errorf("consul: token %q, TLS %v", cs.Token, cs.TLS)
	}
	if et.User != "root" || et.Password != "etcdpw" || et.TLS == nil {
		t.Errorf("etcd: user %q password %q TLS %v", et.User, et.Password, et.TLS)
	}
	if z := e.conns["zookeeper"]; zookeeperentry.Auth(z) != "zkuser:zkpw" || !slices.Contains(z.Secrets, "zkpw") || z.TLS != nil {
		t.Errorf("zookeeper: auth %q, secrets %q, TLS %v: want the digest user, its password a secret, no TLS", zookeeperentry.Auth(z), z.Secrets, z.TLS)
	}
	cfg := e.Config("redis", true)
	env := strings.Join(cfg.WorkerEnv, "\n")
	for k, v := range vars {
		in := strings.Contains(env, k+"="+v)
		if k == "UNRELATED_PASSWORD" && in {
			t.Errorf("WorkerEnv carries %s", k)
		} else if k != "UNRELATED_PASSWORD" && !in {
			t.Errorf("WorkerEnv lacks %s", k)
		}
	}
}

// TestZooKeeperAuthFromEnv: LOCKSUITE_ZOOKEEPER_AUTH must be user:password,
// and the error says so without printing the value; LOCKSUITE_REDIS_NODES's
// passwords are secrets.
func TestZooKeeperAuthFromEnv(t *testing.T) {
	t.Setenv("ZOOKEEPER_ADDRS", "127.0.0.1:2181")
	t.Setenv(ZooKeeperAuthEnv, "justapassword")
	_, err := zookeeperentry.FromEnv("zookeeper", "ZOOKEEPER_ADDRS")()
	if err == nil || !strings.Contains(err.Error(), ZooKeeperAuthEnv+"=user:password") || strings.Contains(err.Error(), "justapassword") {
		t.Errorf("%v: want an error naming %s=user:password, without the value", err, ZooKeeperAuthEnv)
	}
	t.Setenv("LOCKSUITE_REDIS_NODES", "redis://a:pw1@127.0.0.1:1/0,127.0.0.1:2,redis://:pw3@127.0.0.1:3/0")
	t.Setenv(RedisCACertEnv, "/nonexistent/ca.pem") // read for rediss:// URLs only
	r3, _ := serviceOf("redis-3")
	c, err := named(r3)
	if err != nil || !slices.Contains(c.Secrets, "pw1") || !slices.Contains(c.Secrets, "pw3") || c.TLS != nil || !slices.Contains(c.Env, RedisCACertEnv+"=/nonexistent/ca.pem") {
		t.Errorf("%+v, %v: want pw1 and pw3 secret, no TLS, and %s for the workers", c, err, RedisCACertEnv)
	}
	// A named ensemble takes the same settings, and passes them on.
	t.Setenv(ZooKeeperAuthEnv, "zkuser:zkpw")
	t.Setenv("LOCKSUITE_ZOOKEEPER_ENSEMBLE", "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3")
	ens, _ := serviceOf("zookeeper-ensemble")
	if c, err = named(ens); err != nil || zookeeperentry.Auth(c) != "zkuser:zkpw" || !slices.Contains(c.Env, ZooKeeperAuthEnv+"=zkuser:zkpw") {
		t.Errorf("zookeeper-ensemble: %+v, %v: want the digest user, passed on", c, err)
	}
}
