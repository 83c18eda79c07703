package local

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/jackc/pgx/v5/pgconn"
	goredis "github.com/redis/go-redis/v9"

	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/internal/redact"
)

// RedisCACertEnv names a PEM file of the CA that signed a rediss:// server's
// certificate. Redis has no variable of its own for it; without it, the
// system's roots are used.
const RedisCACertEnv = "LOCKSUITE_REDIS_CACERT"

// conn is how to reach one backend: its endpoint, and the credentials and
// TLS settings the environment gave for it.
type conn struct {
	// endpoint: host:port (redis without a URL, consul, etcd), a URL
	// (redis, etcd), a DSN (postgres; " " for the PG* variables).
	endpoint string
	tls      *tls.Config // redis, etcd, consul; nil = plain
	user     string      // etcd
	password string      // etcd
	token    string      // consul
	// env is the variables (name=value) the user set for this backend, to
	// pass to worker processes.
	env []string
	// secrets are the values that must never be printed.
	secrets []string
}

// envVars lists, per backend, the variables read from the environment.
var envVars = map[string][]string{
	"redis":    {"REDIS_URL", RedisCACertEnv},
	"postgres": {"DATABASE_URL", "PGHOST", "PGHOSTADDR", "PGPORT", "PGUSER", "PGPASSWORD", "PGPASSFILE", "PGDATABASE", "PGSSLMODE", "PGSSLROOTCERT", "PGSSLCERT", "PGSSLKEY", "PGSSLSNI", "PGSERVICE", "PGSERVICEFILE", "PGCONNECT_TIMEOUT", "PGTARGETSESSIONATTRS"},
	"consul":   {"CONSUL_HTTP_ADDR", "CONSUL_HTTP_TOKEN", "CONSUL_HTTP_TOKEN_FILE", "CONSUL_HTTP_SSL", "CONSUL_HTTP_SSL_VERIFY", "CONSUL_CACERT", "CONSUL_CAPATH", "CONSUL_CLIENT_CERT", "CONSUL_CLIENT_KEY", "CONSUL_TLS_SERVER_NAME"},
	"etcd":     {"ETCDCTL_ENDPOINTS", "ETCDCTL_CACERT", "ETCDCTL_CERT", "ETCDCTL_KEY", "ETCDCTL_USER", "ETCDCTL_PASSWORD", "ETCDCTL_INSECURE_SKIP_TLS_VERIFY"},
}

// fromEnv returns the connection the environment names for n, or nil.
func fromEnv(n string) (*conn, error) {
	c := &conn{}
	for _, v := range envVars[n] {
		if val, ok := os.LookupEnv(v); ok {
			c.env = append(c.env, v+"="+val)
		}
	}
	switch n {
	case "redis":
		c.endpoint = os.Getenv("REDIS_URL")
		if c.endpoint == "" {
			return nil, nil
		}
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
	case "postgres":
		if u := os.Getenv("DATABASE_URL"); u != "" {
			c.endpoint = u
		} else if os.Getenv("PGHOST") != "" {
			c.endpoint = " " // libpq's variables: pgx reads them from an empty DSN
		} else {
			return nil, nil
		}
		c.secrets = append(c.secrets, os.Getenv("PGPASSWORD"))
		if pc, err := pgconn.ParseConfig(strings.TrimSpace(c.endpoint)); err == nil {
			c.secrets = append(c.secrets, pc.Password)
		} else {
			return nil, &servers.Unavailable{Backend: n, Err: err, Fix: "check DATABASE_URL (postgres://user:password@host:port/db?sslmode=...) and the PG* variables"}
		}
	case "consul":
		c.endpoint = os.Getenv("CONSUL_HTTP_ADDR")
		if c.endpoint == "" {
			return nil, nil
		}
		ac := consulapi.DefaultConfig() // reads every CONSUL_* variable above
		c.token = ac.Token
		c.secrets = append(c.secrets, c.token)
		if strings.HasPrefix(c.endpoint, "https://") || ac.Scheme == "https" {
			if ac.TLSConfig.Address == "" {
				ac.TLSConfig.Address = hostOnly(hostPort("consul", c.endpoint))
			}
			t, err := consulapi.SetupTLSConfig(&ac.TLSConfig)
			if err != nil {
				return nil, &servers.Unavailable{Backend: n, Err: err, Fix: "check CONSUL_CACERT, CONSUL_CLIENT_CERT and CONSUL_CLIENT_KEY"}
			}
			c.tls = t
		}
	case "etcd":
		c.endpoint = os.Getenv("ETCDCTL_ENDPOINTS")
		if c.endpoint == "" {
			return nil, nil
		}
		c.user, c.password, _ = strings.Cut(os.Getenv("ETCDCTL_USER"), ":")
		if p := os.Getenv("ETCDCTL_PASSWORD"); p != "" {
			c.password = p
		}
		c.secrets = append(c.secrets, c.password)
		ca, cert, key := os.Getenv("ETCDCTL_CACERT"), os.Getenv("ETCDCTL_CERT"), os.Getenv("ETCDCTL_KEY")
		if strings.Contains(c.endpoint, "https://") || ca != "" || cert != "" {
			t := &tls.Config{MinVersion: tls.VersionTLS12}
			t.InsecureSkipVerify = os.Getenv("ETCDCTL_INSECURE_SKIP_TLS_VERIFY") == "true"
			fix := "check ETCDCTL_CACERT, ETCDCTL_CERT and ETCDCTL_KEY (PEM files)"
			if ca != "" {
				pool, err := loadCA(ca)
				if err != nil {
					return nil, &servers.Unavailable{Backend: n, Err: fmt.Errorf("ETCDCTL_CACERT: %w", err), Fix: fix}
				}
				t.RootCAs = pool
			}
			if cert != "" || key != "" {
				kp, err := tls.LoadX509KeyPair(cert, key)
				if err != nil {
					return nil, &servers.Unavailable{Backend: n, Err: fmt.Errorf("ETCDCTL_CERT, ETCDCTL_KEY: %w", err), Fix: fix}
				}
				t.Certificates = []tls.Certificate{kp}
			}
			c.tls = t
		}
	}
	return c, nil
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

// unavailable explains why a named server could not be reached: the
// problem (authentication failed, server requires TLS, certificate not
// trusted, ...) and which variable fixes it. Secrets are masked.
func unavailable(n string, c *conn, err error) error {
	msg := err.Error()
	problem, fix := "", ""
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(msg, s) {
				return true
			}
		}
		return false
	}
	if c.tls != nil && n != "postgres" {
		// A TLS failure can hide behind a timeout (gRPC retries until its
		// deadline): shake hands once more, alone, to see it.
		var op *net.OpError
		if terr := tlsProblem(hostPort(n, c.endpoint), c.tls); terr != nil && !(errors.As(terr, &op) && op.Op == "dial") {
			err = fmt.Errorf("%w; TLS handshake: %v", err, terr)
			msg = err.Error()
		}
	}
	var pe *pgconn.PgError
	untrusted := has("x509:", "certificate signed by unknown authority", "certificate is not valid", "certificate is valid for")
	switch n {
	case "redis":
		switch {
		case has("WRONGPASS"):
			problem, fix = "authentication failed: wrong user name or password", "put the right ACL user and password in REDIS_URL: redis://user:password@host:port/0 (rediss:// for TLS)"
		case has("NOAUTH", "NOPERM"):
			problem, fix = "authentication failed: the server requires a password", "put the ACL user and password in REDIS_URL: redis://user:password@host:port/0 (rediss:// for TLS)"
		case untrusted:
			problem, fix = "the server's TLS certificate is not trusted", "set "+RedisCACertEnv+" to a PEM file of the CA that signed it"
		case c.tls == nil && speaksTLS(hostPort(n, c.endpoint)):
			problem, fix = "server requires TLS", "use a rediss:// URL in REDIS_URL (and "+RedisCACertEnv+" for a private CA)"
		case c.tls != nil && has("first record does not look like a TLS handshake"):
			problem, fix = "the server does not speak TLS", "use a redis:// URL in REDIS_URL"
		default:
			fix = "check REDIS_URL (redis://[user:password@]host:port/db, rediss:// for TLS), or unset it to let the harness start redis-server"
		}
	case "postgres":
		switch {
		case errors.As(err, &pe) && pe.Code == "28P01":
			problem, fix = "authentication failed: wrong password", "set the password in PGPASSWORD or in DATABASE_URL (postgres://user:password@host:port/db)"
		case errors.As(err, &pe) && pe.Code == "28000" && strings.Contains(pe.Message, "no encryption"):
			problem, fix = "server requires TLS (pg_hba.conf refuses plain connections)", "set PGSSLMODE=require (or verify-full with PGSSLROOTCERT), or sslmode= in DATABASE_URL"
		case errors.As(err, &pe) && pe.Code == "28000":
			problem, fix = "authentication failed: pg_hba.conf has no entry for this user and host", "check PGUSER and the server's pg_hba.conf"
		case untrusted:
			problem, fix = "the server's TLS certificate is not trusted", "set PGSSLROOTCERT (or sslrootcert= in DATABASE_URL) to a PEM file of its CA"
		case has("server refused TLS connection"):
			problem, fix = "the server does not offer TLS", "set PGSSLMODE=prefer or disable, or sslmode= in DATABASE_URL"
		default:
			fix = "check DATABASE_URL or the PG* variables, or unset them to let the harness make a throwaway cluster"
		}
	case "consul":
		switch {
		case has("403") && has("ACL not found"):
			problem, fix = "authentication failed: the agent does not know the token", "set CONSUL_HTTP_TOKEN to a valid ACL token (key:write on the suite's prefix, session:write)"
		case has("403", "Permission denied"):
			problem, fix = "authentication failed: no token, or one without permission", "set CONSUL_HTTP_TOKEN to an ACL token with key:write on the suite's prefix and session:write"
		case untrusted:
			problem, fix = "the agent's TLS certificate is not trusted", "set CONSUL_CACERT to a PEM file of the CA that signed it"
		case has("HTTP request to an HTTPS server") || c.tls == nil && speaksTLS(hostPort(n, c.endpoint)):
			problem, fix = "server requires TLS", "set CONSUL_HTTP_SSL=true (or use an https:// CONSUL_HTTP_ADDR) and CONSUL_CACERT"
		case c.tls != nil && has("server gave HTTP response to HTTPS client"):
			problem, fix = "the agent does not speak TLS", "unset CONSUL_HTTP_SSL and use an http:// CONSUL_HTTP_ADDR"
		default:
			fix = "check CONSUL_HTTP_ADDR (host:port of an agent), or unset it to let the harness start one"
		}
	case "etcd":
		switch {
		case has("authentication failed"):
			problem, fix = "authentication failed: wrong user name or password", "set ETCDCTL_USER=user:password (or ETCDCTL_PASSWORD)"
		case has("user name is empty", "user name not found", "permission denied", "invalid auth token"):
			problem, fix = "authentication failed: the server requires a user", "set ETCDCTL_USER=user:password (or ETCDCTL_PASSWORD)"
		case has("certificate required", "bad certificate"):
			problem, fix = "the server requires a client certificate", "set ETCDCTL_CERT and ETCDCTL_KEY to a client certificate and key (PEM) its CA signed"
		case untrusted:
			problem, fix = "the server's TLS certificate is not trusted", "set ETCDCTL_CACERT to a PEM file of the CA that signed it"
		case c.tls == nil && speaksTLS(hostPort(n, c.endpoint)):
			problem, fix = "server requires TLS", "use https:// endpoints in ETCDCTL_ENDPOINTS and set ETCDCTL_CACERT (and ETCDCTL_CERT, ETCDCTL_KEY if it asks for a client certificate)"
		default:
			fix = "check ETCDCTL_ENDPOINTS (host:port,...), or unset it to use the embedded server"
		}
	}
	if problem == "" {
		// A server that accepts the connection but fails the probe in no
		// way recognized above is most likely another kind of server.
		addr := hostPort(n, c.endpoint)
		if tc, derr := net.DialTimeout("tcp", addr, time.Second); derr == nil {
			tc.Close()
			problem = fmt.Sprintf("%s accepts connections but does not answer as %s (is it another kind of server?)", addr, n)
		}
	}
	if problem != "" {
		err = fmt.Errorf("%s (%w)", problem, err)
	}
	return &servers.Unavailable{Backend: n, Err: redact.Error(err, c.secrets...), Fix: fix}
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
