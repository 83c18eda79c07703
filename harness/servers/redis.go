package servers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Redis is a redis-server started by StartRedis.
type Redis struct {
	single
	addr    string
	secrets Secrets
	tls     bool
	clock   *FakeClock
}

func (r *Redis) Name() string { return "redis" }

// Endpoint is host:port. It carries no credentials: see Secrets.
func (r *Redis) Endpoint() string { return r.addr }

// Clock is the server's wall clock, which the clock-jump scenario moves; nil
// when libfaketime is not installed (ci/setup.sh installs it).
func (r *Redis) Clock() *FakeClock { return r.clock }

// Secrets are the ACL user and password (WithAuth) and the test CA
// (WithTLS).
func (r *Redis) Secrets() Secrets { return r.secrets }

// URL is a redis:// URL for the server (rediss:// WithTLS) with the ACL
// user and password in it.
func (r *Redis) URL() string {
	scheme, auth := "redis", ""
	if r.tls {
		scheme = "rediss"
	}
	if r.secrets.User != "" {
		auth = r.secrets.User + ":" + r.secrets.Password + "@"
	}
	return scheme + "://" + auth + r.addr + "/0"
}

// StartRedis starts Debian's redis-server on a free loopback port with no
// persistence, and waits until it answers PING. WithAuth turns the default
// user off and adds an ACL user "locksuite" with a random password and all
// commands and keys; WithTLS replaces the plain port by a tls-port (client
// certificates optional). The configuration, with the password, is a file
// in the server's directory, not its command line. When Debian's
// libfaketime is installed, the server runs under it (see FakeClock), at the
// real time until its Clock is moved.
func StartRedis(ctx context.Context, opts ...Option) (*Redis, error) {
	o := apply(opts)
	bin, err := lookPath("redis-server")
	if err != nil {
		return nil, &Unavailable{"redis", err, "install it (apt-get install redis-server, or run ci/setup.sh), or name a server with REDIS_URL"}
	}
	ports, dir, err := portsAndDir(1, "redis")
	if err != nil {
		return nil, &Unavailable{"redis", err, "free loopback ports and a writable temporary directory"}
	}
	port := ports[0]
	r := &Redis{addr: fmt.Sprintf("127.0.0.1:%d", port), tls: o.tls}
	var conf []string
	if o.auth {
		r.secrets.User, r.secrets.Password = "locksuite", randomSecret()
		conf = append(conf, "user default off", "user locksuite on >"+r.secrets.Password+" ~* &* +@all")
	}
	var certs *pki
	if o.tls {
		if certs, err = newPKI(dir, -1, -1); err != nil {
			os.RemoveAll(dir)
			return nil, &Unavailable{"redis", err, "a writable temporary directory"}
		}
		certs.secrets(&r.secrets)
		conf = append(conf, "port 0", "tls-port "+strconv.Itoa(port), "tls-cert-file "+certs.serverCert,
			"tls-key-file "+certs.serverKey, "tls-ca-cert-file "+certs.ca, "tls-auth-clients optional")
	}
	argv := []string{bin}
	if len(conf) > 0 {
		cf := filepath.Join(dir, "redis.conf")
		if err := os.WriteFile(cf, []byte(strings.Join(conf, "\n")+"\n"), 0o600); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		argv = append(argv, cf)
	}
	if !o.tls {
		argv = append(argv, "--port", strconv.Itoa(port))
	}
	argv = append(argv, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--daemonize", "no", "--protected-mode", "yes")
	clock, env, err := newFakeClock(dir, -1, -1)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	r.clock = clock
	p, err := startProcEnv("redis", dir, nil, env, argv...)
	if err != nil {
		os.RemoveAll(dir)
		return nil, &Unavailable{"redis", err, "check that " + bin + " runs"}
	}
	r.single = single{p: p, sig: syscall.SIGTERM, grace: 5 * time.Second}
	copts := &goredis.Options{Addr: r.addr, MaxRetries: -1, Username: r.secrets.User, Password: r.secrets.Password}
	if o.tls {
		if copts.TLSConfig, err = r.secrets.ClientTLS(); err != nil {
			r.Stop()
			return nil, &Unavailable{"redis", err, "see the test CA in " + dir}
		}
	}
	c := goredis.NewClient(copts)
	defer c.Close()
	if err := waitReady(ctx, p, 10*time.Second, func(ctx context.Context) error { return c.Ping(ctx).Err() }); err != nil {
		r.Stop()
		return nil, &Unavailable{"redis", err, "see the log above"}
	}
	return r, nil
}
