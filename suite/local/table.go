package local

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	consulentry "github.com/locksuite/locksuite/harness/services/consul/entry"
	etcdentry "github.com/locksuite/locksuite/harness/services/etcd/entry"
	kubeentry "github.com/locksuite/locksuite/harness/services/kube/entry"
	memcachedentry "github.com/locksuite/locksuite/harness/services/memcached/entry"
	mysqlentry "github.com/locksuite/locksuite/harness/services/mysql/entry"
	natsentry "github.com/locksuite/locksuite/harness/services/nats/entry"
	postgresentry "github.com/locksuite/locksuite/harness/services/postgres/entry"
	redisentry "github.com/locksuite/locksuite/harness/services/redis/entry"
	zookeeperentry "github.com/locksuite/locksuite/harness/services/zookeeper/entry"

	"github.com/locksuite/locksuite/harness/services"
)

// byService lists each service entry's backends, in report order: within
// each kind (adapters, libraries, clusters), backends are reported, and
// "all" runs them, in the order of this list and then of each entry's.
// Adding a service is its folder (harness/services/<service>) and one line
// here.
var byService = [][]services.Backend{
	consulentry.Backends,
	etcdentry.Backends,
	postgresentry.Backends,
	redisentry.Backends,
	zookeeperentry.Backends,
	mysqlentry.Backends,
	natsentry.Backends,
	memcachedentry.Backends,
	kubeentry.Backends,
	postgresentry.PoolerBackends,
	languageBackends,
}

// table is every backend, built once: lookups by name, and each service
// once, in report order.
var table = newCatalog(byService)

type catalog struct {
	backends []services.Backend // by kind, then in byService's order
	byName   map[string]*services.Backend
	services []*services.Service // in the order of their first backend
	svcs     map[string]*services.Service
}

func newCatalog(files [][]services.Backend) *catalog {
	c := &catalog{byName: map[string]*services.Backend{}, svcs: map[string]*services.Service{}}
	c.backends = slices.Concat(files...)
	slices.SortStableFunc(c.backends, func(a, b services.Backend) int { return cmp.Compare(a.Kind, b.Kind) })
	for i := range c.backends {
		b := &c.backends[i]
		c.byName[b.Name] = b
		if c.svcs[b.On.Name] == nil {
			c.svcs[b.On.Name] = b.On
			c.services = append(c.services, b.On)
		}
	}
	return c
}

// lookup returns the backend named n.
func lookup(n string) (services.Backend, bool) {
	if b := table.byName[n]; b != nil {
		return *b, true
	}
	return services.Backend{}, false
}

// serviceOf returns the service named n, or the one backend n runs on.
func serviceOf(n string) (*services.Service, bool) {
	if s := table.svcs[n]; s != nil {
		return s, true
	}
	if b := table.byName[n]; b != nil {
		return b.On, true
	}
	return nil, false
}

// services lists every service once, in table order.
func allServices() []*services.Service { return table.services }

// namesOf lists the backends of kind k that "all" or "libraries" start.
// Backends is every backend's name, each once: those of Names, Libraries,
// Clusters, WhenNamed, Variants, Poolers and Languages, in that order.
func Backends() []string {
	return slices.Concat(Names, Libraries, Clusters, WhenNamed, Variants, Poolers, Languages)
}

func namesOf(k services.Kind) []string {
	var out []string
	for _, b := range table.backends {
		if b.Kind == k && !b.WhenNamed {
			out = append(out, b.Name)
		}
	}
	return out
}

func namesWhenNamed() []string {
	var out []string
	for _, b := range table.backends {
		if b.WhenNamed {
			out = append(out, b.Name)
		}
	}
	return out
}

// Variables are the environment variables that name a server the user
// runs instead of one the harness starts, one per service, in table order
// (DATABASE_URL stands for libpq's PG* variables too).
func Variables() []string {
	var out []string
	for _, s := range allServices() {
		out = append(out, s.Vars[0])
	}
	return out
}

// Service is what the CLI's help and the docs say about one service that
// backends run on.
type Service struct {
	Name   string // as Start, ConfigFor and Defaults take it: "redis", "etcd-cluster", ...
	Title  string // as prose names it: "Redis", "etcd", ...
	Server string // what the harness starts: "redis-server", "an embedded etcd server", ...
	// Variable names a server the user runs instead (REDIS_URL, ...).
	Variable string
	// Backends are the backends on it, in report order.
	Backends []string
	// Pod is the pod harness/kuberun starts for it under --kubernetes
	// (kuberun.Run.StartPod), "" if it has none.
	Pod string
}

// Pod is the pod harness/kuberun starts for backend n's service under the
// CLI's --kubernetes (kuberun.Run.StartPod's name), and "" when there is
// none: its service has no pod, or n is a library of another language,
// whose worker needs a runtime the locksuite image does not have.
func Pod(n string) string {
	b, ok := lookup(n)
	if !ok || b.Worker != "" {
		return ""
	}
	return b.On.Pod
}

// Services lists every service, in table order: the adapters' services
// first (in the order of Names), then the others.
func Services() []Service {
	var out []Service
	for _, s := range allServices() {
		sv := Service{Name: s.Name, Title: s.Title, Server: s.Server, Variable: s.Vars[0], Pod: s.Pod}
		for _, b := range table.backends {
			if b.On == s {
				sv.Backends = append(sv.Backends, b.Name)
			}
		}
		out = append(out, sv)
	}
	return out
}

func leases() map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, b := range table.backends {
		out[b.Name] = b.On.Lease
	}
	return out
}

// unknown is the error for a name that is neither a backend nor a service.
func unknown(n string) error {
	var all []string
	for _, b := range table.backends {
		all = append(all, b.Name)
	}
	return fmt.Errorf("local: unknown backend %q: choose from %s", n, strings.Join(all, ", "))
}
