package local

import (
	"net/url"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"

	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/locksuite/locksuite/backends/mysql"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"k8s.io/client-go/rest"

	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/internal/redact"
)

// RedisCACertEnv names a PEM file of the CA that signed a rediss:// server's
// certificate. Redis has no variable of its own for it; without it, the
// system's roots are used.
const RedisCACertEnv = "LOCKSUITE_REDIS_CACERT"

// The suite's own variables for the security settings of a ZooKeeper server
// the user names (ZOOKEEPER_ADDRS, LOCKSUITE_ZOOKEEPER_ENSEMBLE): ZooKeeper
// has no client variables of its own.
const (
	// ZooKeeperAuthEnv is "user:password" for the digest scheme: the
	// sessions authenticate with it, and the lock's znodes get an ACL for
	// that user only (zookeeper.Config.Auth).
	ZooKeeperAuthEnv = "LOCKSUITE_ZOOKEEPER_AUTH"
	// ZooKeeperCACertEnv names a PEM file of the CA that signed the
	// servers' certificates: with it, the clients speak TLS (the servers'
	// secureClientPort) and trust that CA only.
	ZooKeeperCACertEnv = "LOCKSUITE_ZOOKEEPER_CACERT"
	// ZooKeeperCertEnv and ZooKeeperKeyEnv name a client certificate and
	// its key (PEM), for a server whose ssl.clientAuth is need
	// (ZooKeeper's default); either one also turns TLS on.
	ZooKeeperCertEnv = "LOCKSUITE_ZOOKEEPER_CERT"
	ZooKeeperKeyEnv  = "LOCKSUITE_ZOOKEEPER_KEY"
)

// conn is how to reach one backend: its endpoint, and the credentials and
// TLS settings the environment gave for it.
type conn struct {
	// endpoint: host:port (redis without a URL, consul, etcd), a URL
	// (redis, etcd), a DSN (postgres; " " for the PG* variables).
	endpoint string
	tls      *tls.Config // redis, etcd, consul; nil = plain
	user     string      // etcd, zookeeper
	password string      // etcd, zookeeper
	token    string      // consul
	// rest and namespace: the Kubernetes API's client configuration and
	// the namespace of the suite's Leases (kube).
	rest      *rest.Config
	namespace string
	// env is the variables (name=value) the user set for this backend, to
	// pass to worker processes.
	env []string
	// secrets are the values that must never be printed.
	secrets []string
}

// redisFromEnv reads REDIS_URL and LOCKSUITE_REDIS_CACERT.
func redisFromEnv() (*conn, error) {
	c := &conn{endpoint: os.Getenv("REDIS_URL")}
	if c.endpoint == "" {
		return nil, nil
	}
	const n = "redis"
	o, err := goredis.ParseURL(c.endpoint)
	if err != nil {
		return nil, &servers.Unavailable{Backend: n, Err: redact.Error(fmt.Errorf("REDIS_URL %s: %w", redact.URL(c.endpoint), err)),
			Fix: "set REDIS_URL to redis://[user:password@]host:port/db, or rediss:// for TLS"}
	}
	c.secrets = append(c.secrets, o.Password)
	c.tls = o.TLSConfig
	if f := os.Getenv(RedisCACertEnv); f != "" {
		pool, err := loadCA(f)
		if err != nil {
			return nil, &servers.Unavailable{Backend: n, Err: fmt.Errorf("%s: %w", RedisCACertEnv, err), Fix: "set " + RedisCACertEnv + " to a PEM file of the server's CA"}
		}
		if c.tls == nil {
			return nil, &servers.Unavailable{Backend: n, Err: fmt.Errorf("%s is set but REDIS_URL is not rediss://", RedisCACertEnv),
				Fix: "use a rediss:// URL for TLS, or unset " + RedisCACertEnv}
		}
		c.tls.RootCAs = pool
	}
	return c, nil
}

// zookeeperFromEnv returns the fromEnv of a ZooKeeper service named by
// variable v (ZOOKEEPER_ADDRS, LOCKSUITE_ZOOKEEPER_ENSEMBLE): the servers,
// and the LOCKSUITE_ZOOKEEPER_* security settings.
func zookeeperFromEnv(name, v string) func() (*conn, error) {
	return func() (*conn, error) {
		c := &conn{endpoint: os.Getenv(v)}
		if c.endpoint == "" {
			return nil, nil
		}
		if a := os.Getenv(ZooKeeperAuthEnv); a != "" {
			var ok bool
			c.user, c.password, ok = strings.Cut(a, ":")
			c.secrets = append(c.secrets, c.password, a)
			if !ok || c.user == "" {
				return nil, &servers.Unavailable{Backend: name, Err: fmt.Errorf("%s is not user:password", ZooKeeperAuthEnv),
					Fix: "set " + ZooKeeperAuthEnv + "=user:password (the digest scheme's user)"}
			}
		}
		ca, cert, key := os.Getenv(ZooKeeperCACertEnv), os.Getenv(ZooKeeperCertEnv), os.Getenv(ZooKeeperKeyEnv)
		if ca == "" && cert == "" && key == "" {
			return c, nil
		}
		c.tls = &tls.Config{MinVersion: tls.VersionTLS12}
		if ca != "" {
			pool, err := loadCA(ca)
			if err != nil {
				return nil, &servers.Unavailable{Backend: name, Err: fmt.Errorf("%s: %w", ZooKeeperCACertEnv, err), Fix: "set " + ZooKeeperCACertEnv + " to a PEM file of the servers' CA"}
			}
			c.tls.RootCAs = pool
		}
		if cert != "" || key != "" {
			kp, err := tls.LoadX509KeyPair(cert, key)
			if err != nil {
				return nil, &servers.Unavailable{Backend: name, Err: fmt.Errorf("%s, %s: %w", ZooKeeperCertEnv, ZooKeeperKeyEnv, err),
					Fix: "set " + ZooKeeperCertEnv + " and " + ZooKeeperKeyEnv + " to a client certificate and its key (PEM)"}
			}
			c.tls.Certificates = []tls.Certificate{kp}
		}
		return c, nil
	}
}

// zkAuth is the digest scheme's "user:password", or "" without a user.
func (c *conn) zkAuth() string {
	if c.user == "" {
		return ""
	}
	return c.user + ":" + c.password
}

// redisNodesFromEnv reads LOCKSUITE_REDIS_NODES, and LOCKSUITE_REDIS_CACERT
// for its rediss:// URLs.
func redisNodesFromEnv() (*conn, error) {
	c := &conn{endpoint: os.Getenv("LOCKSUITE_REDIS_NODES")}
	if c.endpoint == "" {
		return nil, nil
	}
	for _, a := range c.addrs() {
		if o, err := goredis.ParseURL(a); err == nil {
			c.secrets = append(c.secrets, o.Password)
		}
	}
	if f := os.Getenv(RedisCACertEnv); f != "" && strings.Contains(c.endpoint, "rediss://") {
		pool, err := loadCA(f)
		if err != nil {
			return nil, &servers.Unavailable{Backend: "redis-3", Err: fmt.Errorf("%s: %w", RedisCACertEnv, err), Fix: "set " + RedisCACertEnv + " to a PEM file of the servers' CA"}
		}
		c.tls = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return c, nil
}

// mysqlFromEnv reads MYSQL_URL: a go-sql-driver DSN or a mysql:// URL.
func mysqlFromEnv() (*conn, error) {
	v := os.Getenv("MYSQL_URL")
	if v == "" {
		return nil, nil
	}
	dsn, err := mysql.DSN(v)
	var cfg *gomysql.Config
	if err == nil {
		cfg, err = gomysql.ParseDSN(dsn)
	}
	if err != nil {
		return nil, &servers.Unavailable{Backend: "mysql", Err: redact.Error(fmt.Errorf("MYSQL_URL %s: %w", redact.URL(v), err)),
			Fix: "set MYSQL_URL to user:password@tcp(host:port)/db or mysql://user:password@host:port/db"}
	}
	return &conn{endpoint: v, secrets: []string{cfg.Passwd}}, nil
}

// natsFromEnv returns the fromEnv of a NATS service named by variable ev
// (NATS_URL, LOCKSUITE_NATS_CLUSTER): nats://[user:password@]host:port,
// comma-separated for several servers.
func natsFromEnv(ev string) func() (*conn, error) {
	return func() (*conn, error) {
		v := os.Getenv(ev)
		if v == "" {
			return nil, nil
		}
		c := &conn{endpoint: v}
		for _, a := range strings.Split(v, ",") {
			if u, err := url.Parse(strings.TrimSpace(a)); err == nil && u.User != nil {
				p, _ := u.User.Password()
				c.secrets = append(c.secrets, p, u.User.Username())
			}
		}
		return c, nil
	}
}

// postgresFromEnv reads DATABASE_URL, or libpq's PG* variables.
func postgresFromEnv() (*conn, error) {
	c := &conn{}
	if u := os.Getenv("DATABASE_URL"); u != "" {
		c.endpoint = u
	} else if os.Getenv("PGHOST") != "" {
		c.endpoint = " " // libpq's variables: pgx reads them from an empty DSN
	} else {
		return nil, nil
	}
	c.secrets = append(c.secrets, os.Getenv("PGPASSWORD"))
	pc, err := pgconn.ParseConfig(strings.TrimSpace(c.endpoint))
	if err != nil {
		return nil, &servers.Unavailable{Backend: "postgres", Err: err, Fix: "check DATABASE_URL (postgres://user:password@host:port/db?sslmode=...) and the PG* variables"}
	}
	c.secrets = append(c.secrets, pc.Password)
	return c, nil
}

// consulFromEnv returns the fromEnv of a Consul service named by variable
// v (CONSUL_HTTP_ADDR, LOCKSUITE_CONSUL_CLUSTER): its address(es), and the
// token and TLS settings of the CONSUL_* variables that consul/api reads.
func consulFromEnv(name, v string) func() (*conn, error) {
	return func() (*conn, error) {
		c := &conn{endpoint: os.Getenv(v)}
		if c.endpoint == "" {
			return nil, nil
		}
		ac := consulapi.DefaultConfig() // reads every CONSUL_* variable
		c.token = ac.Token
		c.secrets = append(c.secrets, c.token)
		if strings.HasPrefix(strings.TrimSpace(c.endpoint), "https://") || ac.Scheme == "https" {
			if ac.TLSConfig.Address == "" {
				ac.TLSConfig.Address = hostOnly(stripScheme(strings.Split(c.endpoint, ",")[0]))
			}
			t, err := consulapi.SetupTLSConfig(&ac.TLSConfig)
			if err != nil {
				return nil, &servers.Unavailable{Backend: name, Err: err, Fix: "check CONSUL_CACERT, CONSUL_CLIENT_CERT and CONSUL_CLIENT_KEY"}
			}
			c.tls = t
		}
		return c, nil
	}
}

// etcdFromEnv returns the fromEnv of an etcd service named by variable v
// (ETCDCTL_ENDPOINTS, LOCKSUITE_ETCD_CLUSTER): its endpoints, and the user
// and TLS settings of the ETCDCTL_* variables that etcdctl reads.
func etcdFromEnv(name, v string) func() (*conn, error) {
	return func() (*conn, error) {
		c := &conn{endpoint: os.Getenv(v)}
		if c.endpoint == "" {
			return nil, nil
		}
		c.user, c.password, _ = strings.Cut(os.Getenv("ETCDCTL_USER"), ":")
		if p := os.Getenv("ETCDCTL_PASSWORD"); p != "" {
			c.password = p
		}
		c.secrets = append(c.secrets, c.password)
		ca, cert, key := os.Getenv("ETCDCTL_CACERT"), os.Getenv("ETCDCTL_CERT"), os.Getenv("ETCDCTL_KEY")
		if !strings.Contains(c.endpoint, "https://") && ca == "" && cert == "" {
			return c, nil
		}
		t := &tls.Config{MinVersion: tls.VersionTLS12}
		t.InsecureSkipVerify = os.Getenv("ETCDCTL_INSECURE_SKIP_TLS_VERIFY") == "true"
		fix := "check ETCDCTL_CACERT, ETCDCTL_CERT and ETCDCTL_KEY (PEM files)"
		if ca != "" {
			pool, err := loadCA(ca)
			if err != nil {
				return nil, &servers.Unavailable{Backend: name, Err: fmt.Errorf("ETCDCTL_CACERT: %w", err), Fix: fix}
			}
			t.RootCAs = pool
		}
		if cert != "" || key != "" {
			kp, err := tls.LoadX509KeyPair(cert, key)
			if err != nil {
				return nil, &servers.Unavailable{Backend: name, Err: fmt.Errorf("ETCDCTL_CERT, ETCDCTL_KEY: %w", err), Fix: fix}
			}
			t.Certificates = []tls.Certificate{kp}
		}
		c.tls = t
		return c, nil
	}
}

// probeRedis: PING, over TLS and with the URL's credentials if any.
func probeRedis(ctx context.Context, c *conn) error {
	o := &goredis.Options{Addr: c.endpoint}
	if strings.Contains(c.endpoint, "://") {
		var err error
		if o, err = goredis.ParseURL(c.endpoint); err != nil {
			return err
		}
	}
	if c.tls != nil {
		o.TLSConfig = c.tls
	}
	o.DialTimeout, o.MaxRetries = 3*time.Second, -1
	rc := goredis.NewClient(o)
	defer rc.Close()
	return rc.Ping(ctx).Err()
}

// probePostgres: a connection, and a ping on it.
func probePostgres(ctx context.Context, c *conn) error {
	p, err := pgxpool.New(ctx, strings.TrimSpace(c.endpoint))
	if err != nil {
		return err
	}
	defer p.Close()
	return p.Ping(ctx)
}

// probeConsul: the leader (public), then a key read (needs the token).
func probeConsul(ctx context.Context, c *conn) error {
	cc, err := consulClient(c)
	if err != nil {
		return err
	}
	if _, err = cc.Status().LeaderWithQueryOptions((&consulapi.QueryOptions{}).WithContext(ctx)); err != nil {
		return err
	}
	_, _, err = cc.KV().Get("locksuite/probe", (&consulapi.QueryOptions{}).WithContext(ctx))
	return err
}

// probeEtcd: the first endpoint's status (public), then a read (needs the
// user).
func probeEtcd(ctx context.Context, c *conn) error {
	if len(c.addrs()) == 0 {
		return errors.New("no endpoint")
	}
	ec, err := c.etcdClient()
	if err != nil {
		return err
	}
	defer ec.Close()
	if _, err = ec.Status(ctx, c.addrs()[0]); err != nil {
		return err
	}
	_, err = ec.Get(ctx, "locksuite/probe")
	return err
}

// urlHost is the host:port of a redis:// URL, or the endpoint itself.
func urlHost(ep string) string {
	ep = strings.TrimSpace(ep)
	if strings.Contains(ep, "://") {
		if u, err := url.Parse(ep); err == nil {
			return u.Host
		}
	}
	return ep
}

// stripScheme is ep without http:// or https://.
func stripScheme(ep string) string {
	ep = strings.TrimSpace(ep)
	return strings.TrimPrefix(strings.TrimPrefix(ep, "http://"), "https://")
}

// pgHostPort is the host:port of a URL, a key=value DSN or libpq's
// variables: pgx knows where.
func pgHostPort(ep string) string {
	if pc, err := pgconn.ParseConfig(strings.TrimSpace(ep)); err == nil {
		return net.JoinHostPort(pc.Host, strconv.Itoa(int(pc.Port)))
	}
	return ep
}

// hostPort is the host:port of the first server of s at ep.
func (s *service) hostPort(ep string) string {
	if s.hostPortOf != nil {
		return s.hostPortOf(ep)
	}
	return strings.TrimSpace(ep)
}

func loadCA(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", file)
	}
	return pool, nil
}

func hostOnly(hp string) string {
	if h, _, err := net.SplitHostPort(hp); err == nil {
		return h
	}
	return hp
}

// withServerName returns a copy of t that verifies the certificate of
// host (a client dialing a fault proxy would otherwise check the proxy's
// address), or nil for nil.
func withServerName(t *tls.Config, host string) *tls.Config {
	if t == nil {
		return nil
	}
	t = t.Clone()
	if t.ServerName == "" {
		t.ServerName = host
	}
	return t
}

// symptoms is what a failed probe shows: its error, its text, and the
// connection it used.
type symptoms struct {
	err  error
	msg  string
	c    *conn
	addr string // the server's host:port
}

// has reports whether the error's text contains any of subs.
func (s symptoms) has(subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s.msg, sub) {
			return true
		}
	}
	return false
}

// untrusted reports a certificate the client does not trust.
func (s symptoms) untrusted() bool {
	return s.has("x509:", "certificate signed by unknown authority", "certificate is not valid", "certificate is valid for")
}

// plainToTLS reports a plain client refused by a server that wants TLS.
func (s symptoms) plainToTLS() bool { return s.c.tls == nil && speaksTLS(s.addr) }

// unavailable explains why a named server of service sv could not be
// reached: the problem (authentication failed, server requires TLS,
// certificate not trusted, ...) and which variable fixes it. Secrets are
// masked.
func unavailable(sv *service, c *conn, err error) error {
	addr := sv.hostPort(c.endpoint)
	if c.tls != nil && !sv.startTLS {
		// A TLS failure can hide behind a timeout (gRPC retries until its
		// deadline): shake hands once more, alone, to see it.
		var op *net.OpError
		if terr := tlsProblem(addr, c.tls); terr != nil && !(errors.As(terr, &op) && op.Op == "dial") {
			err = fmt.Errorf("%w; TLS handshake: %v", err, terr)
		}
	}
	problem, fix := "", ""
	if sv.diagnose != nil {
		problem, fix = sv.diagnose(symptoms{err: err, msg: err.Error(), c: c, addr: addr})
	}
	if problem == "" {
		// A server that accepts the connection but fails the probe in no
		// way recognized above is most likely another kind of server.
		if tc, derr := net.DialTimeout("tcp", addr, time.Second); derr == nil {
			tc.Close()
			problem = fmt.Sprintf("%s accepts connections but does not answer as %s (is it another kind of server?)", addr, sv.name)
		}
	}
	if problem != "" {
		err = fmt.Errorf("%s (%w)", problem, err)
	}
	return &servers.Unavailable{Backend: sv.name, Err: redact.Error(err, c.secrets...), Fix: fix}
}

func diagnoseRedis(s symptoms) (problem, fix string) {
	switch {
	case s.has("WRONGPASS"):
		return "authentication failed: wrong user name or password", "put the right ACL user and password in REDIS_URL: redis://user:password@host:port/0 (rediss:// for TLS)"
	case s.has("NOAUTH", "NOPERM"):
		return "authentication failed: the server requires a password", "put the ACL user and password in REDIS_URL: redis://user:password@host:port/0 (rediss:// for TLS)"
	case s.untrusted():
		return "the server's TLS certificate is not trusted", "set " + RedisCACertEnv + " to a PEM file of the CA that signed it"
	case s.plainToTLS():
		return "server requires TLS", "use a rediss:// URL in REDIS_URL (and " + RedisCACertEnv + " for a private CA)"
	case s.c.tls != nil && s.has("first record does not look like a TLS handshake"):
		return "the server does not speak TLS", "use a redis:// URL in REDIS_URL"
	}
	return "", "check REDIS_URL (redis://[user:password@]host:port/db, rediss:// for TLS), or unset it to let the harness start redis-server"
}

func diagnosePostgres(s symptoms) (problem, fix string) {
	var pe *pgconn.PgError
	isPg := errors.As(s.err, &pe)
	switch {
	case isPg && pe.Code == "28P01":
		return "authentication failed: wrong password", "set the password in PGPASSWORD or in DATABASE_URL (postgres://user:password@host:port/db)"
	case isPg && pe.Code == "28000" && strings.Contains(pe.Message, "no encryption"):
		return "server requires TLS (pg_hba.conf refuses plain connections)", "set PGSSLMODE=require (or verify-full with PGSSLROOTCERT), or sslmode= in DATABASE_URL"
	case isPg && pe.Code == "28000":
		return "authentication failed: pg_hba.conf has no entry for this user and host", "check PGUSER and the server's pg_hba.conf"
	case s.untrusted():
		return "the server's TLS certificate is not trusted", "set PGSSLROOTCERT (or sslrootcert= in DATABASE_URL) to a PEM file of its CA"
	case s.has("server refused TLS connection"):
		return "the server does not offer TLS", "set PGSSLMODE=prefer or disable, or sslmode= in DATABASE_URL"
	}
	return "", "check DATABASE_URL or the PG* variables, or unset them to let the harness make a throwaway cluster"
}

func diagnoseConsul(s symptoms) (problem, fix string) {
	switch {
	case s.has("403") && s.has("ACL not found"):
		return "authentication failed: the agent does not know the token", "set CONSUL_HTTP_TOKEN to a valid ACL token (key:write on the suite's prefix, session:write)"
	case s.has("403", "Permission denied"):
		return "authentication failed: no token, or one without permission", "set CONSUL_HTTP_TOKEN to an ACL token with key:write on the suite's prefix and session:write"
	case s.untrusted():
		return "the agent's TLS certificate is not trusted", "set CONSUL_CACERT to a PEM file of the CA that signed it"
	case s.has("HTTP request to an HTTPS server") || s.plainToTLS():
		return "server requires TLS", "set CONSUL_HTTP_SSL=true (or use an https:// CONSUL_HTTP_ADDR) and CONSUL_CACERT"
	case s.c.tls != nil && s.has("server gave HTTP response to HTTPS client"):
		return "the agent does not speak TLS", "unset CONSUL_HTTP_SSL and use an http:// CONSUL_HTTP_ADDR"
	}
	return "", "check CONSUL_HTTP_ADDR (host:port of an agent), or unset it to let the harness start one"
}

func diagnoseEtcd(s symptoms) (problem, fix string) {
	switch {
	case s.has("authentication failed"):
		return "authentication failed: wrong user name or password", "set ETCDCTL_USER=user:password (or ETCDCTL_PASSWORD)"
	case s.has("user name is empty", "user name not found", "permission denied", "invalid auth token"):
		return "authentication failed: the server requires a user", "set ETCDCTL_USER=user:password (or ETCDCTL_PASSWORD)"
	case s.has("certificate required", "bad certificate"):
		return "the server requires a client certificate", "set ETCDCTL_CERT and ETCDCTL_KEY to a client certificate and key (PEM) its CA signed"
	case s.untrusted():
		return "the server's TLS certificate is not trusted", "set ETCDCTL_CACERT to a PEM file of the CA that signed it"
	case s.plainToTLS():
		return "server requires TLS", "use https:// endpoints in ETCDCTL_ENDPOINTS and set ETCDCTL_CACERT (and ETCDCTL_CERT, ETCDCTL_KEY if it asks for a client certificate)"
	}
	return "", "check ETCDCTL_ENDPOINTS (host:port,...), or unset it to use the embedded server"
}

// tlsProblem returns the error a TLS client with configuration t meets at
// addr within two seconds (the handshake, or the alert a server sends
// after it, as TLS 1.3 servers do for a missing client certificate), or nil.
func tlsProblem(addr string, t *tls.Config) error {
	t = withServerName(t, hostOnly(addr))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	d := tls.Dialer{Config: t}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, err = c.Read(make([]byte, 1))
	var ne net.Error
	if err == nil || errors.As(err, &ne) && ne.Timeout() {
		return nil
	}
	return err
}

// speaksTLS reports whether the server at addr completes a TLS handshake
// (certificates not checked) within two seconds: a plain client was
// refused because the server wants TLS.
func speaksTLS(addr string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true}}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func diagnoseMySQL(s symptoms) (problem, fix string) {
	switch {
	case s.has("Error 1045", "Access denied"):
		return "authentication failed: wrong user name or password", "put the right user and password in MYSQL_URL: user:password@tcp(host:port)/db or mysql://user:password@host:port/db"
	case s.has("Error 3159", "insecure transport"):
		return "server requires TLS", "add tls=true to MYSQL_URL (tls=skip-verify for a private CA)"
	case s.untrusted():
		return "the server's TLS certificate is not trusted", "use tls=skip-verify in MYSQL_URL, or give the server a certificate the system trusts"
	}
	return "", "check MYSQL_URL (user:password@tcp(host:port)/db or mysql://user:password@host:port/db), or unset it to let the harness start a MariaDB server"
}

func diagnoseNATS(s symptoms) (problem, fix string) {
	switch {
	case s.has("Authorization Violation", "authorization violation", "Authentication Expired"):
		return "authentication failed: wrong or missing user name, password or token", "put the right credentials in NATS_URL: nats://user:password@host:port"
	case s.has("JetStream:"):
		return "the server runs without JetStream", "start nats-server with -js (JetStream), or unset NATS_URL to let the harness embed one"
	case s.has("TLS required", "tls: first record", "secure connection"):
		return "server requires TLS", "use a tls:// URL in NATS_URL"
	case s.untrusted():
		return "the server's TLS certificate is not trusted", "give the server a certificate the system trusts"
	}
	return "", "check NATS_URL (nats://[user:password@]host:port, comma-separated), or unset it to let the harness embed a server"
}

func diagnoseZooKeeper(s symptoms) (problem, fix string) {
	switch {
	case s.has("-124"): // SESSIONCLOSEDREQUIRESASLAUTH: enforce.auth.enabled
		return "authentication failed: the server requires digest authentication", "set " + ZooKeeperAuthEnv + "=user:password"
	case s.has("not authenticated"): // NOAUTH on /locksuite
		return "authentication failed: the suite's znodes (/locksuite) belong to another digest user or password",
			"set " + ZooKeeperAuthEnv + " to the user:password that made them (the digest scheme takes any password: only the znodes' ACLs tell a wrong one)"
	case s.has("certificate required", "bad certificate"):
		return "the server requires a client certificate", "set " + ZooKeeperCertEnv + " and " + ZooKeeperKeyEnv + " to a client certificate and key (PEM) its CA signed"
	case s.untrusted():
		return "the server's TLS certificate is not trusted", "set " + ZooKeeperCACertEnv + " to a PEM file of the CA that signed it"
	case s.plainToTLS():
		return "server requires TLS", "set " + ZooKeeperCACertEnv + " to a PEM file of the servers' CA (TLS to their secureClientPort)"
	case s.c.tls != nil && s.has("EOF", "first record does not look like a TLS handshake", "connection reset") && !speaksTLS(s.addr):
		return "the server does not speak TLS", "unset " + ZooKeeperCACertEnv + ", " + ZooKeeperCertEnv + " and " + ZooKeeperKeyEnv + ", or name the servers' secureClientPort in ZOOKEEPER_ADDRS"
	}
	return "", "check ZOOKEEPER_ADDRS (host:port of each server, comma-separated, no chroot), or unset it to let the harness start one"
}

// mysqlHostPort is the address in a MYSQL_URL DSN or URL.
func mysqlHostPort(ep string) string {
	dsn, err := mysql.DSN(strings.TrimSpace(ep))
	if err != nil {
		return ""
	}
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return ""
	}
	return cfg.Addr
}

// natsHostPort is the first server's host:port in NATS_URL.
func natsHostPort(ep string) string {
	u, err := url.Parse(strings.TrimSpace(strings.Split(ep, ",")[0]))
	if err != nil || u.Host == "" {
		return stripScheme(strings.Split(ep, ",")[0])
	}
	if u.Port() == "" {
		return net.JoinHostPort(u.Hostname(), "4222")
	}
	return u.Host
}
