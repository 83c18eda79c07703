package local

import (
	"slices"
	"strings"
	"testing"
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
	e := &Env{endpoint: map[string]string{}, conns: map[string]*conn{}}
	for _, n := range Names {
		s, _ := serviceOf(n)
		c, err := s.named()
		if err != nil || c == nil {
			t.Fatalf("%s: %v, %v", n, c, err)
		}
		e.conns[n], e.endpoint[n] = c, c.endpoint
	}
	r, p, cs, et := e.conns["redis"], e.conns["postgres"], e.conns["consul"], e.conns["etcd"]
	if r.tls == nil || r.tls.ServerName != "127.0.0.1" || !slices.Contains(r.secrets, "redispw") {
		t.Errorf("redis: TLS %v, secrets %q: want rediss:// TLS for 127.0.0.1 and the URL's password as a secret", r.tls, r.secrets)
	}
	if !slices.Contains(p.secrets, "pgpw") || pgHostPort(p.endpoint) != "127.0.0.1:5433" {
		t.Errorf("postgres: secrets %q, address %s", p.secrets, pgHostPort(p.endpoint))
	}
	if cs.token != "consul-token" || cs.tls == nil {
		t.Errorf("consul: token %q, TLS %v", cs.token, cs.tls)
	}
	if et.user != "root" || et.password != "etcdpw" || et.tls == nil {
		t.Errorf("etcd: user %q password %q TLS %v", et.user, et.password, et.tls)
	}
	if z := e.conns["zookeeper"]; z.zkAuth() != "zkuser:zkpw" || !slices.Contains(z.secrets, "zkpw") || z.tls != nil {
		t.Errorf("zookeeper: auth %q, secrets %q, TLS %v: want the digest user, its password a secret, no TLS", z.zkAuth(), z.secrets, z.tls)
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
	_, err := zookeeperFromEnv("zookeeper", "ZOOKEEPER_ADDRS")()
	if err == nil || !strings.Contains(err.Error(), ZooKeeperAuthEnv+"=user:password") || strings.Contains(err.Error(), "justapassword") {
		t.Errorf("%v: want an error naming %s=user:password, without the value", err, ZooKeeperAuthEnv)
	}
	t.Setenv("LOCKSUITE_REDIS_NODES", "redis://a:pw1@127.0.0.1:1/0,127.0.0.1:2,redis://:pw3@127.0.0.1:3/0")
	t.Setenv(RedisCACertEnv, "/nonexistent/ca.pem") // read for rediss:// URLs only
	r3, _ := serviceOf("redis-3")
	c, err := r3.named()
	if err != nil || !slices.Contains(c.secrets, "pw1") || !slices.Contains(c.secrets, "pw3") || c.tls != nil || !slices.Contains(c.env, RedisCACertEnv+"=/nonexistent/ca.pem") {
		t.Errorf("%+v, %v: want pw1 and pw3 secret, no TLS, and %s for the workers", c, err, RedisCACertEnv)
	}
	// A named ensemble takes the same settings, and passes them on.
	t.Setenv(ZooKeeperAuthEnv, "zkuser:zkpw")
	t.Setenv("LOCKSUITE_ZOOKEEPER_ENSEMBLE", "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3")
	ens, _ := serviceOf("zookeeper-ensemble")
	if c, err = ens.named(); err != nil || c.zkAuth() != "zkuser:zkpw" || !slices.Contains(c.env, ZooKeeperAuthEnv+"=zkuser:zkpw") {
		t.Errorf("zookeeper-ensemble: %+v, %v: want the digest user, passed on", c, err)
	}
}
