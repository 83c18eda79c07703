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

	redisentry "github.com/locksuite/locksuite/harness/services/redis/entry"
	zookeeperentry "github.com/locksuite/locksuite/harness/services/zookeeper/entry"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/foreign"
	"github.com/locksuite/locksuite/backends/foreign/workers"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/harness/services"
	"github.com/locksuite/locksuite/suite"
)

// languageBackends are the lock libraries of other languages, each run by
// its shipped worker (backends/foreign/workers) in its own runtime, through
// the worker protocol, on its service's server: redis-py, kazoo,
// redlock-js, redis-semaphore and curator. "languages" names them all.
var languageBackends = func() []services.Backend {
	var out []services.Backend
	for _, w := range workers.All {
		on := redisentry.Service
		if w.Service == "zookeeper" {
			on = zookeeperentry.Service
		}
		out = append(out, services.Backend{Name: w.Name, Kind: services.Language, On: on, Worker: w.Name,
			NewLocker: func(c *services.Conn, cl suite.Client) (backends.Locker, error) {
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
func newWorker(ctx context.Context, name, service string, cmd []string, dir string, c *services.Conn, cl suite.Client) (*foreign.Locker, error) {
	if c.TLS != nil {
		return nil, fmt.Errorf("worker %s: the worker protocol passes no TLS settings yet: name a server without TLS", name)
	}
	cfg := foreign.Config{Command: cmd, Dir: dir, Name: name, Client: cl.ID, Key: cl.Key, Lease: cl.Lease,
		Service: service, Addrs: c.HostPorts(), Dial: cl.Dial, Username: c.User, Password: c.Password}
	cfg.URL, cfg.Addrs = workerURL(service, strings.TrimSpace(c.Endpoint), cfg.Addrs)
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
			return endpoint, []string{redisentry.Service.HostPort(endpoint)}
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
func probeWorker(ctx context.Context, b services.Backend, c *services.Conn) (foreign.Library, error) {
	w, _ := workers.Lookup(b.Worker)
	p, err := w.Prepare(ctx)
	var m *workers.Missing
	if errors.As(err, &m) {
		return foreign.Library{}, &servers.Unavailable{Backend: b.Name, Err: errors.New(m.What + " is missing"), Fix: m.Fix}
	}
	if err != nil {
		return foreign.Library{}, &servers.Unavailable{Backend: b.Name, Err: err, Fix: "see the error; ci/setup.sh " + b.Name + " installs what the worker needs"}
	}
	l, err := newWorker(ctx, b.Name, w.Service, p.Command, p.Dir, c, suite.Client{Key: "locksuite-probe", Lease: b.On.Lease, Dial: (&net.Dialer{}).DialContext})
	if err != nil {
		return foreign.Library{}, &servers.Unavailable{Backend: b.Name, Err: err, Fix: "the shipped worker failed its handshake: report it"}
	}
	defer l.Close()
	return l.Library(), nil
}

// WorkerServices are the services a worker of the user's may run on
// (docs/protocol.md's init names them): the adapters' services.
func WorkerServices() []string {
	var out []string
	for _, s := range servicesOf(Names) {
		out = append(out, s.Name)
	}
	return out
}

// Worker returns the NewLocker of a worker of the user's: command, started
// in this process's directory for each client, on service (one of
// WorkerServices), which Start must have made Available; name is how rows
// and errors name it. Each Locker is a *foreign.Locker.
func (e *Env) Worker(name, service string, command []string) (func(ctx context.Context, cl suite.Client) (backends.Locker, error), error) {
	s, ok := serviceOf(service)
	if !ok || !slices.Contains(WorkerServices(), s.Name) {
		return nil, fmt.Errorf("--service %q: a worker runs on one of %s", service, strings.Join(WorkerServices(), ", "))
	}
	if !e.Available(s.Name) {
		if err := e.Unavailable[s.Name]; err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("local: %s is not available: name it to Start", s.Name)
	}
	c := e.conn(s.Name)
	return func(ctx context.Context, cl suite.Client) (backends.Locker, error) {
		return newWorker(ctx, name, s.Name, command, "", c, cl)
	}, nil
}
