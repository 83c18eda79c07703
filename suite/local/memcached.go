package local

import (
	"context"
	"strings"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/memcached"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/suite"
)

// memcachedService is Debian's memcached, or the one MEMCACHE_SERVERS (the
// variable Dalli, Rails' memcached client, reads) names: host:port, the
// first of a comma-separated list. Expiry has whole seconds on a clock
// that moves once a second, so a lease lives between its seconds and one
// more (the adapter's TTL and Expiry): the pauses are longer than both.
var memcachedService = &service{
	name: "memcached", title: "memcached", server: "memcached",
	lease: time.Second, pause: 3 * time.Second, pauses: 3, duration: 10 * time.Second,
	vars:       []string{"MEMCACHE_SERVERS"},
	hostPortOf: memcachedAddr,
	start:      startOf(servers.StartMemcached),
	probe: func(ctx context.Context, c *conn) error {
		return memcached.Ping(ctx, memcachedAddr(c.endpoint), nil)
	},
	servers: oneProcess("memcached", noClockMemcached),
	version: func() string { return binVersion([]string{"-V"}, "memcached", "/usr/bin/memcached") },
}

var memcachedBackends = []backend{
	{name: "memcached", kind: adapter, on: memcachedService, whenNamed: true, ownClient: "memcached's meta protocol", newLocker: func(c *conn, cl suite.Client) (backends.Locker, error) {
		return memcached.New(memcached.Config{Addr: memcachedAddr(c.endpoint), Dial: cl.Dial, Key: cl.Key, Lease: cl.Lease})
	}},
}

// noClockMemcached is why memcached's clock is not jumped (wrapped in
// errors.ErrUnsupported).
const noClockMemcached = "memcached times expiry on CLOCK_MONOTONIC (its clock handler), not the wall clock: a wall-clock jump does not move a lock's expiry"

// memcachedAddr is the first server of a MEMCACHE_SERVERS list.
func memcachedAddr(endpoint string) string {
	return strings.TrimSpace(strings.Split(endpoint, ",")[0])
}
