package servers

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"syscall"
	"time"

	"github.com/locksuite/locksuite/backends/memcached"
	"github.com/locksuite/locksuite/internal/spawn"
)

// Memcached is a memcached started by StartMemcached.
type Memcached struct{ base }

func (m *Memcached) Name() string { return "memcached" }

// Endpoint is host:port.
func (m *Memcached) Endpoint() string { return m.addr }

// StartMemcached starts Debian's memcached (1.6, for the meta protocol the
// memcached adapter speaks) on a free loopback port, TCP only (-U 0), with
// 64 MB of memory, and waits until it answers the meta no-op. As root it
// runs as the "memcache" user, which Debian's memcached package creates:
// memcached refuses to run as root without -u, and switching user itself
// would clear the parent-death signal that ends it with a killed
// coordinator. memcached keeps nothing on disk: Crash restarts it empty,
// on the same port, and WithDurability asks for a setting it does not
// have. The harness starts it without TLS and without SASL: WithTLS and
// WithAuth are refused.
func StartMemcached(ctx context.Context, opts ...Option) (*Memcached, error) {
	o := Apply(opts)
	if err := o.CheckDurability("memcached"); err != nil {
		return nil, err
	}
	if o.Durability == DurabilityPackaged {
		o.Durability = DurabilityHarness // nothing on disk either way
	}
	if o.TLS || o.Auth {
		return nil, &Unavailable{"memcached", errors.New("the harness starts memcached without TLS and SASL"),
			"start it without WithTLS and WithAuth (the memcached adapter speaks neither), or name a server with MEMCACHE_SERVERS"}
	}
	bin, err := lookPath("memcached", "/usr/bin", "/usr/sbin")
	if err != nil {
		return nil, &Unavailable{"memcached", err, "install it (apt-get install memcached, or run ci/setup.sh memcached), or name a server with MEMCACHE_SERVERS"}
	}
	ports, err := freePorts(1)
	if err != nil {
		return nil, &Unavailable{"memcached", err, "free loopback ports"}
	}
	cred, dir, err := serviceDir("memcached", "memcached", "memcache", "memcached")
	if err != nil {
		return nil, err
	}
	m := &Memcached{base: base{dir: dir, sig: syscall.SIGTERM, grace: 5 * time.Second, addr: fmt.Sprintf("127.0.0.1:%d", ports[0])}}
	argv := []string{bin, "-l", "127.0.0.1", "-p", strconv.Itoa(ports[0]), "-U", "0", "-m", "64"}
	start := func() (*Proc, error) { return Launch(spawn.Start, "memcached", dir, cred, nil, argv...) }
	if err := m.run(ctx, "memcached", 10*time.Second, start, func(ctx context.Context) error { return memcached.Ping(ctx, m.addr, nil) }); err != nil {
		m.Stop()
		return nil, &Unavailable{"memcached", err, "check that " + bin + " runs; see its log above"}
	}
	return m, nil
}
