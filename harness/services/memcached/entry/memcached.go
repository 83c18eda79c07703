package entry

import (
	"context"
	"strings"
	"time"

	memcachedserver "github.com/locksuite/locksuite/harness/services/memcached"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/memcached"
	"github.com/locksuite/locksuite/harness/services"
	"github.com/locksuite/locksuite/suite"
)

// memcachedService is Debian's memcached, or the one MEMCACHE_SERVERS (the
// variable Dalli, Rails' memcached client, reads) names: host:port, the
// first of a comma-separated list. Expiry has whole seconds on a clock
// that moves once a second, so a lease lives between its seconds and one
// more (the adapter's TTL and Expiry): the pauses are longer than both.
var memcachedService = &services.Service{
	Name: "memcached", Title: "memcached", Server: "memcached",
	Lease: time.Second, Pause: 3 * time.Second, Pauses: 3, Duration: 10 * time.Second,
	Vars:       []string{"MEMCACHE_SERVERS"},
	HostPortOf: memcachedAddr,
	Start:      services.StartOf(memcachedserver.Start),
	Probe: func(ctx context.Context, c *services.Conn) error {
		return memcached.Ping(ctx, memcachedAddr(c.Endpoint), nil)
	},
	Servers: services.OneProcess("memcached", noClockMemcached),
	Version: func() string { return services.BinVersion([]string{"-V"}, "memcached", "/usr/bin/memcached") },
}

var Backends = []services.Backend{
	{Name: "memcached", Kind: services.Adapter, On: memcachedService, WhenNamed: true, OwnClient: "memcached's meta protocol", NewLocker: func(c *services.Conn, cl suite.Client) (backends.Locker, error) {
		return memcached.New(memcached.Config{Addr: memcachedAddr(c.Endpoint), Dial: cl.Dial, Key: cl.Key, Lease: cl.Lease})
	}},
}

// noClockMemcached is why memcached's clock is not jumped (wrapped in
// errors.ErrUnsupported).
const noClockMemcached = "memcached times expiry on CLOCK_MONOTONIC (its clock handler), not the wall clock: a wall-clock jump does not move a lock's expiry"

// memcachedAddr is the first server of a MEMCACHE_SERVERS list.
func memcachedAddr(endpoint string) string {
	return strings.TrimSpace(strings.Split(endpoint, ",")[0])
}
