// Package memcached starts memcached for the suite: Debian's memcached on
// loopback (Start). Its entry (memcached/entry) is how the suite's
// environment runs the memcached backend on it.
package memcached

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"syscall"
	"time"

	"github.com/locksuite/locksuite/backends/memcached"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/internal/spawn"
)

// Server is a memcached started by Start.
type Server struct {
	servers.BaseMethods
	b *servers.Base
}

func (m *Server) Name() string { return "memcached" }

// Endpoint is host:port.
func (m *Server) Endpoint() string { return m.b.Addr() }

// Start starts Debian's memcached (1.6, for the meta protocol the
// memcached adapter speaks) on a free loopback port, TCP only (-U 0), with
// 64 MB of memory, and waits until it answers the meta no-op. As root it
// runs as the "memcache" user, which Debian's memcached package creates:
// memcached refuses to run as root without -u, and switching user itself
// would clear the parent-death signal that ends it with a killed
// coordinator. memcached keeps nothing on disk: Crash restarts it empty,
// on the same port, and WithDurability asks for a setting it does not
// have. The harness starts it without TLS and without SASL: WithTLS and
// WithAuth are refused.
func Start(ctx context.Context, opts ...servers.Option) (*Server, error) {
	o := servers.Apply(opts)
	if err := o.CheckDurability("memcached"); err != nil {
		return nil, err
	}
	if o.Durability == servers.DurabilityPackaged {
		o.Durability = servers.DurabilityHarness // nothing on disk either way
	}
	if o.TLS || o.Auth {
		return nil, &servers.Unavailable{Backend: "memcached", Err: errors.New("the harness starts memcached without TLS and SASL"),
			Fix: "start it without WithTLS and WithAuth (the memcached adapter speaks neither), or name a server with MEMCACHE_SERVERS"}
	}
	bin, err := servers.LookPath("memcached", "/usr/bin", "/usr/sbin")
	if err != nil {
		return nil, &servers.Unavailable{Backend: "memcached", Err: err, Fix: "install it (apt-get install memcached, or run ci/setup.sh memcached), or name a server with MEMCACHE_SERVERS"}
	}
	port, err := servers.FreePort()
	if err != nil {
		return nil, &servers.Unavailable{Backend: "memcached", Err: err, Fix: "free loopback ports"}
	}
	cred, dir, err := servers.ServiceDir("memcached", "memcached", "memcache", "memcached")
	if err != nil {
		return nil, err
	}
	b := servers.NewBase(dir, fmt.Sprintf("127.0.0.1:%d", port), "", syscall.SIGTERM, 5*time.Second)
	m := &Server{BaseMethods: b, b: b}
	argv := []string{bin, "-l", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "0", "-m", "64"}
	start := func() (*servers.Proc, error) {
		return servers.Launch(spawn.Start, "memcached", dir, cred, nil, argv...)
	}
	if err := b.Run(ctx, "memcached", 10*time.Second, start, func(ctx context.Context) error { return memcached.Ping(ctx, b.Addr(), nil) }); err != nil {
		m.Stop()
		return nil, &servers.Unavailable{Backend: "memcached", Err: err, Fix: "check that " + bin + " runs; see its log above"}
	}
	return m, nil
}
