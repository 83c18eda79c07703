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

	"github.com/locksuite/locksuite/internal/spawn"
)

// Redis is a redis-server started by StartRedis.
type Redis struct {
	base
	tls   bool
	clock *FakeClock
}

func (r *Redis) Name() string { return "redis" }

// Endpoint is host:port. It carries no credentials: see Secrets.
func (r *Redis) Endpoint() string { return r.addr }

// Clock is the server's wall clock, which the clock-jump scenario moves; nil
// when libfaketime is not installed (ci/setup.sh installs it).
func (r *Redis) Clock() *FakeClock { return r.clock }

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

// StartRedis starts Debian's redis-server on a free loopback port, its data
// directory (for an RDB or AOF) in the server's, and waits until it answers
// PING. Without WithDurability it keeps nothing on disk (no RDB, no AOF);
// DurabilityPackaged is Redis's own default (RDB snapshots: save 3600 1
// 300 100 60 10000; no AOF), DurabilityAppendFsyncEverysec and
// DurabilityAppendFsyncAlways an AOF (appendonly yes, appendfsync
// everysec or always) and no RDB snapshots. Crash restarts it with the
// same configuration, on the same port and data. WithAuth turns the default
// user off and adds an ACL user "locksuite" with a random password and all
// commands and keys; WithTLS replaces the plain port by a tls-port (client
// certificates optional). The configuration, with the password, is a file
// in the server's directory, not its command line. When Debian's
// libfaketime is installed, the server runs under it (see FakeClock), at the
// real time until its Clock is moved.
func StartRedis(ctx context.Context, opts ...Option) (*Redis, error) {
	o := Apply(opts)
	if err := o.CheckDurability("redis", DurabilityAppendFsyncEverysec, DurabilityAppendFsyncAlways); err != nil {
		return nil, err
	}
	bin, err := lookPath("redis-server")
	if err != nil {
		return nil, &Unavailable{"redis", err, "install it (apt-get install redis-server, or run ci/setup.sh), or name a server with REDIS_URL"}
	}
	ports, dir, err := PortsAndDir(1, "redis")
	if err != nil {
		return nil, &Unavailable{"redis", err, "free loopback ports and a writable temporary directory"}
	}
	port := ports[0]
	r := &Redis{base: base{dir: dir, sig: syscall.SIGTERM, grace: 5 * time.Second, addr: fmt.Sprintf("127.0.0.1:%d", port)}, tls: o.TLS}
	if r.data, err = newDataDir(dir, "data", o.Lazy, nil); err != nil {
		os.RemoveAll(dir)
		return nil, &Unavailable{"redis", err, "a writable temporary directory"}
	}
	var conf []string
	if o.Auth {
		r.secrets.User, r.secrets.Password = "locksuite", RandomSecret()
		conf = append(conf, "user default off", "user locksuite on >"+r.secrets.Password+" ~* &* +@all")
	}
	var certs *PKI
	if o.TLS {
		if certs, err = NewPKI(dir, -1, -1); err != nil {
			os.RemoveAll(dir)
			return nil, &Unavailable{"redis", err, "a writable temporary directory"}
		}
		certs.SetSecrets(&r.secrets)
		conf = append(conf, "port 0", "tls-port "+strconv.Itoa(port), "tls-cert-file "+certs.ServerCert,
			"tls-key-file "+certs.ServerKey, "tls-ca-cert-file "+certs.CA, "tls-auth-clients optional")
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
	if !o.TLS {
		argv = append(argv, "--port", strconv.Itoa(port))
	}
	argv = append(argv, "--bind", "127.0.0.1", "--dir", r.data.path, "--daemonize", "no", "--protected-mode", "yes")
	argv = append(argv, redisPersistence(o.Durability)...)
	clock, env, err := NewFakeClock(dir, -1, -1)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	r.clock = clock
	copts := &goredis.Options{Addr: r.addr, MaxRetries: -1, Username: r.secrets.User, Password: r.secrets.Password}
	if o.TLS {
		if copts.TLSConfig, err = r.secrets.ClientTLS(); err != nil {
			os.RemoveAll(dir)
			return nil, &Unavailable{"redis", err, "see the test CA in " + dir}
		}
	}
	ping := func(ctx context.Context) error {
		c := goredis.NewClient(copts)
		defer c.Close()
		return c.Ping(ctx).Err()
	}
	start := func() (*Proc, error) { return Launch(spawn.Start, "redis", dir, nil, env, argv...) }
	if err := r.run(ctx, "redis", 10*time.Second, start, ping); err != nil {
		r.Stop()
		return nil, &Unavailable{"redis", err, FixFUSE(err, "check that "+bin+" runs; see its log above")}
	}
	return r, nil
}

// redisPersistence is redis-server's arguments for a Durability.
func redisPersistence(d Durability) []string {
	switch d {
	case DurabilityPackaged:
		return []string{"--save", "3600 1 300 100 60 10000", "--appendonly", "no"}
	case DurabilityAppendFsyncEverysec:
		return []string{"--save", "", "--appendonly", "yes", "--appendfsync", "everysec"}
	case DurabilityAppendFsyncAlways:
		return []string{"--save", "", "--appendonly", "yes", "--appendfsync", "always"}
	}
	return []string{"--save", "", "--appendonly", "no"}
}
