package local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/foreign"
	"github.com/locksuite/locksuite/backends/foreign/workers"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/suite"
)

// languageBackends are the lock libraries of other languages, each run by
// its shipped worker (backends/foreign/workers) in its own runtime, through
// the worker protocol, on its service's server: redis-py, kazoo,
// redlock-js, redis-semaphore and curator. "languages" names them all.
var languageBackends = func() []backend {
	var out []backend
	for _, w := range workers.All {
		on := redisService
		if w.Service == "zookeeper" {
			on = zookeeperService
		}
		out = append(out, backend{name: w.Name, kind: language, on: on, worker: w.Name,
			newLocker: func(c *conn, cl suite.Client) (backends.Locker, error) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				defer cancel()
				p, err := w.Prepare(ctx)
				if err != nil {
					return nil, err
				}
				return newWorker(ctx, w.Name, w.Service, p.Command, p.Dir, c, cl)
			}})
	}
	return out
}()

// newWorker starts one client's worker, cmd in dir, for the lock service
// service at c, named name in errors.
func newWorker(ctx context.Context, name, service string, cmd []string, dir string, c *conn, cl suite.Client) (*foreign.Locker, error) {
	if c.tls != nil {
		return nil, fmt.Errorf("worker %s: the worker protocol passes no TLS settings yet: name a server without TLS", name)
	}
	cfg := foreign.Config{Command: cmd, Dir: dir, Name: name, Client: cl.ID, Key: cl.Key, Lease: cl.Lease,
		Service: service, Addrs: c.hostPorts(), Dial: cl.Dial, Username: c.user, Password: c.password}
	switch {
	case service == "redis" && strings.Contains(c.endpoint, "://"):
		cfg.URL = strings.TrimSpace(c.endpoint)
		cfg.Addrs = []string{redisService.hostPort(cfg.URL)}
	case service == "redis":
		cfg.URL = "redis://" + strings.TrimSpace(c.endpoint) + "/0"
	}
	return foreign.New(ctx, cfg)
}

// probeWorker prepares backend b's worker and completes one handshake with
// it on the server at c, for the library it reports; its error says what
// is missing.
func probeWorker(ctx context.Context, b backend, c *conn) (foreign.Library, error) {
	w, _ := workers.Lookup(b.worker)
	p, err := w.Prepare(ctx)
	var m *workers.Missing
	if errors.As(err, &m) {
		return foreign.Library{}, &servers.Unavailable{Backend: b.name, Err: errors.New(m.What + " is missing"), Fix: m.Fix}
	}
	if err != nil {
		return foreign.Library{}, &servers.Unavailable{Backend: b.name, Err: err, Fix: "see the error; ci/setup.sh " + b.name + " installs what the worker needs"}
	}
	l, err := newWorker(ctx, b.name, w.Service, p.Command, p.Dir, c, suite.Client{Key: "locksuite-probe", Lease: b.on.lease, Dial: (&net.Dialer{}).DialContext})
	if err != nil {
		return foreign.Library{}, &servers.Unavailable{Backend: b.name, Err: err, Fix: "the shipped worker failed its handshake: report it"}
	}
	defer l.Close()
	return l.Library(), nil
}
