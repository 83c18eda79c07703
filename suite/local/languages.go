package local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
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
	cfg.URL, cfg.Addrs = workerURL(service, strings.TrimSpace(c.endpoint), cfg.Addrs)
	return foreign.New(ctx, cfg)
}

// workerURL is the url and addrs of init (docs/protocol.md) for service at
// endpoint, whose servers are hostPorts: a redis:// URL, a postgres:// URL
// or MySQL DSN as given, http:// (etcd, consul) or nats:// URLs, a
// ZooKeeper connect string.
func workerURL(service, endpoint string, hostPorts []string) (string, []string) {
	prefixed := func(scheme string) string {
		var out []string
		for _, a := range hostPorts {
			out = append(out, scheme+a)
		}
		return strings.Join(out, ",")
	}
	switch service {
	case "redis":
		if strings.Contains(endpoint, "://") {
			return endpoint, []string{redisService.hostPort(endpoint)}
		}
		return "redis://" + endpoint + "/0", hostPorts
	case "postgres":
		if u, err := url.Parse(endpoint); err == nil && u.Host != "" {
			return endpoint, []string{u.Host}
		}
	case "mysql":
		if _, rest, ok := strings.Cut(endpoint, "tcp("); ok {
			if hp, _, ok := strings.Cut(rest, ")"); ok {
				return endpoint, []string{hp}
			}
		}
	case "etcd", "consul":
		return prefixed("http://"), hostPorts
	case "nats":
		return prefixed("nats://"), hostPorts
	}
	return strings.Join(hostPorts, ","), hostPorts
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

// WorkerServices are the services a worker of the user's may run on
// (docs/protocol.md's init names them): the adapters' services.
func WorkerServices() []string {
	var out []string
	for _, s := range servicesOf(Names) {
		out = append(out, s.name)
	}
	return out
}

// Worker returns the NewLocker of a worker of the user's: command, started
// in this process's directory for each client, on service (one of
// WorkerServices), which Start must have made Available; name is how rows
// and errors name it. Each Locker is a *foreign.Locker.
func (e *Env) Worker(name, service string, command []string) (func(ctx context.Context, cl suite.Client) (backends.Locker, error), error) {
	s, ok := serviceOf(service)
	if !ok || !slices.Contains(WorkerServices(), s.name) {
		return nil, fmt.Errorf("--service %q: a worker runs on one of %s", service, strings.Join(WorkerServices(), ", "))
	}
	if !e.Available(s.name) {
		if err := e.Unavailable[s.name]; err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("local: %s is not available: name it to Start", s.name)
	}
	c := e.conn(s.name)
	return func(ctx context.Context, cl suite.Client) (backends.Locker, error) {
		return newWorker(ctx, name, s.name, command, "", c, cl)
	}, nil
}
