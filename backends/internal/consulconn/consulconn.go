// Package consulconn is the Consul API client the Consul adapters (consul,
// consullock) make for themselves.
package consulconn

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/locksuite/locksuite/internal/redact"
)

// Config is what a Consul adapter's Config says about its client.
type Config struct {
	// Address is host:port or an http(s):// URL of an agent; empty: what
	// api.DefaultConfig reads (CONSUL_HTTP_ADDR, ...).
	Address string
	// Addresses, if not empty, replace Address: see New.
	Addresses []string
	// Token is an ACL token; empty: CONSUL_HTTP_TOKEN, if set.
	Token string
	// TLS, if not nil, makes the client speak HTTPS with a copy of it.
	TLS *tls.Config
	// Dial, if not nil, makes every connection.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
}

// New returns package pkg's client for cfg, over api.DefaultConfig (which
// reads the CONSUL_* variables), with a transport of its own (one Locker is
// one process's connections). With Addresses, requests go to one of them,
// and after a request fails (the server died, a connection broke) the next
// ones go to the next address. closeIdle closes the transport's idle
// connections: a Locker's Close calls it, so that the connections it kept
// alive for reuse (up to 4 for 30 s) do not outlive it; the agent counts
// them against its limit per client address (limits.http_max_conns_per_client,
// 200 by default).
func New(pkg string, cfg Config) (c *api.Client, closeIdle func(), err error) {
	ac := api.DefaultConfig()
	if cfg.Address != "" {
		ac.Address = cfg.Address
	}
	if cfg.Token != "" {
		ac.Token = cfg.Token
	}
	ac.Transport = &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: 30 * time.Second, DialContext: cfg.Dial}
	if cfg.TLS != nil {
		ac.Transport.TLSClientConfig = cfg.TLS.Clone()
		// This transport speaks HTTP/1.1: never offer h2 in ALPN.
		ac.Transport.TLSClientConfig.NextProtos = nil
		ac.Scheme = "https"
	}
	if len(cfg.Addresses) > 0 {
		ac.Address = cfg.Addresses[0]
		ac.HttpClient = &http.Client{Transport: &rotating{t: ac.Transport, addrs: cfg.Addresses}}
	}
	c, err = api.NewClient(ac)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: client for %q: %w", pkg, redact.URL(ac.Address), redact.Error(err, ac.Token))
	}
	return c, ac.Transport.CloseIdleConnections, nil
}

// rotating sends each request to the current address, and moves on to the
// next address after a request fails.
type rotating struct {
	t     *http.Transport
	addrs []string
	cur   atomic.Uint64
}

func (r *rotating) RoundTrip(req *http.Request) (*http.Response, error) {
	i := r.cur.Load()
	out := req.Clone(req.Context())
	out.URL.Host = r.addrs[i%uint64(len(r.addrs))]
	out.Host = out.URL.Host
	resp, err := r.t.RoundTrip(out)
	if err != nil {
		r.cur.CompareAndSwap(i, i+1)
	}
	return resp, err
}
