// Package tlsdial layers a TLS client handshake on a dial function: for
// client libraries whose dialer hook replaces their own TLS dial (go-redis),
// used by the adapters (backends/internal/dialer) and by suite.Client.
package tlsdial

import (
	"context"
	"crypto/tls"
	"net"
)

// Func dials a connection, as net.Dialer.DialContext does.
type Func = func(ctx context.Context, network, address string) (net.Conn, error)

// Wrap returns a Func that dials through dial and then makes a TLS client
// connection with cfg (ServerName defaulting to address's host). With a nil
// cfg it returns dial.
func Wrap(dial Func, cfg *tls.Config) Func {
	if cfg == nil {
		return dial
	}
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		c, err := dial(ctx, network, address)
		if err != nil {
			return nil, err
		}
		tc := cfg.Clone()
		if tc.ServerName == "" {
			tc.ServerName, _, _ = net.SplitHostPort(address)
		}
		t := tls.Client(c, tc)
		if err := t.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, err
		}
		return t, nil
	}
}
