// Package dialer adapts the suite's dial hook (suite.Client.Dial) to the
// hooks of the client libraries the adapters use.
package dialer

import (
	"context"
	"net"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/locksuite/locksuite/internal/tlsdial"
)

// Func dials a connection, as net.Dialer.DialContext does.
type Func = func(ctx context.Context, network, address string) (net.Conn, error)

// Redis returns a client for o as the Redis adapters make it: a 2 s dial
// timeout, a pool of 2 (one Locker is one process's connection), and, when
// dial is not nil, every connection made by dial with o's TLS, if any,
// layered on top (go-redis's Dialer replaces its own TLS dial).
func Redis(o *goredis.Options, dial Func) *goredis.Client {
	o.DialTimeout, o.PoolSize = 2*time.Second, 2
	if dial != nil {
		o.Dialer = tlsdial.Wrap(dial, o.TLSConfig)
	}
	return goredis.NewClient(o)
}
