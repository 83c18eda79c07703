package servers

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Redis is a redis-server started by StartRedis.
type Redis struct {
	p    *proc
	addr string
	once sync.Once
}

func (r *Redis) Name() string     { return "redis" }
func (r *Redis) Endpoint() string { return r.addr }
func (r *Redis) Pid() int         { return r.p.Pid() }

// StartRedis starts Debian's redis-server on a free loopback port with no
// persistence, and waits until it answers PING.
func StartRedis(ctx context.Context) (*Redis, error) {
	bin, err := lookPath("redis-server")
	if err != nil {
		return nil, &Unavailable{"redis", err, "install it (apt-get install redis-server, or run ci/setup.sh), or name a server with REDIS_URL"}
	}
	port, err := FreePort()
	if err != nil {
		return nil, &Unavailable{"redis", err, "free a loopback port"}
	}
	dir, err := os.MkdirTemp("", "locksuite-redis-")
	if err != nil {
		return nil, err
	}
	p, err := startProc("redis", dir, nil, bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--daemonize", "no", "--protected-mode", "yes")
	if err != nil {
		os.RemoveAll(dir)
		return nil, &Unavailable{"redis", err, "check that " + bin + " runs"}
	}
	r := &Redis{p: p, addr: fmt.Sprintf("127.0.0.1:%d", port)}
	c := goredis.NewClient(&goredis.Options{Addr: r.addr, MaxRetries: -1})
	defer c.Close()
	if err := waitReady(ctx, p, 10*time.Second, func(ctx context.Context) error { return c.Ping(ctx).Err() }); err != nil {
		r.Stop()
		return nil, &Unavailable{"redis", err, "see the log above"}
	}
	return r, nil
}

func (r *Redis) Stop() error {
	r.once.Do(func() {
		r.p.stop(syscall.SIGTERM, 5*time.Second)
		os.RemoveAll(r.p.dir)
	})
	return nil
}
