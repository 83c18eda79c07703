package faults

import (
	"context"
	"net"
	"sync"
)

// Path is one client's way to its lock service: every TCP connection the
// client makes through Dial goes through a Proxy of the Path's own, one per
// address dialled, made on first use. A fault applied to the Path (Freeze,
// Cut, Blackhole, DropReplies) applies to every proxy it has and to every
// proxy it makes later, until Heal; so a client that talks to several servers (a cluster's
// members, the primary that Sentinels name, Redlock's independent servers)
// stalls or is cut off as a whole, wherever it connects.
//
// Dial is the hook a lock client takes as its dialer (go-redis
// Options.Dialer, pgx's DialFunc, gRPC's WithContextDialer, an
// http.Transport's DialContext). Dials says whether the client used it: a
// client that dialled nothing through the Path cannot be faulted by it.
//
// A Path is safe for concurrent use. Close closes every proxy and its
// connections; a Path cannot be used after Close.
type Path struct {
	mu      sync.Mutex
	proxies map[string]*Proxy // by the address dialled
	mode    mode              // applied to the proxies made from now on
	dials   int
	closed  bool
}

// NewPath returns a Path with no proxies, forwarding.
func NewPath() *Path { return &Path{proxies: map[string]*Proxy{}} }

// Dial connects to address through the Path's proxy for it. Networks other
// than TCP ("unix") are dialled directly and cannot be faulted.
func (p *Path) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	var d net.Dialer
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return d.DialContext(ctx, network, address)
	}
	px, err := p.proxy(address)
	if err != nil {
		return nil, err
	}
	return d.DialContext(ctx, "tcp", px.Addr())
}

// proxy returns the Path's proxy for address, making it in the Path's
// current mode if it is new.
func (p *Path) proxy(address string) (*Proxy, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, net.ErrClosed
	}
	p.dials++
	if px := p.proxies[address]; px != nil {
		return px, nil
	}
	px, err := NewProxy(address)
	if err != nil {
		return nil, err
	}
	switch p.mode {
	case frozen:
		px.Freeze()
	case cut:
		px.Cut()
	case blackhole:
		px.Blackhole()
	case dropReplies:
		px.DropReplies()
	}
	p.proxies[address] = px
	return px, nil
}

// Sent is how many bytes the client's connections have sent to the lock
// service through the Path so far (Proxy.Sent, over its proxies).
func (p *Path) Sent() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var n int64
	for _, px := range p.proxies {
		n += px.Sent()
	}
	return n
}

// Dials is how many connections the client made through Dial so far.
func (p *Path) Dials() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dials
}

// each sets the Path's mode and applies f to every proxy it has.
func (p *Path) each(m mode, f func(*Proxy)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = m
	for _, px := range p.proxies {
		f(px)
	}
}

// Freeze stops all of the client's traffic without losing a byte, as
// Proxy.Freeze does, until Thaw or Heal.
func (p *Path) Freeze() { p.each(frozen, (*Proxy).Freeze) }

// Thaw undoes Freeze, delivering what was held.
func (p *Path) Thaw() { p.each(forward, (*Proxy).Thaw) }

// Cut closes the client's connections and refuses new ones until Heal, as
// Proxy.Cut does.
func (p *Path) Cut() { p.each(cut, (*Proxy).Cut) }

// Blackhole silently drops all of the client's traffic until Heal, as
// Proxy.Blackhole does.
func (p *Path) Blackhole() { p.each(blackhole, (*Proxy).Blackhole) }

// DropReplies lets the client's requests through and drops the server's
// replies, as Proxy.DropReplies does, until Heal.
func (p *Path) DropReplies() { p.each(dropReplies, (*Proxy).DropReplies) }

// Heal undoes every fault, as Proxy.Heal does.
func (p *Path) Heal() { p.each(forward, (*Proxy).Heal) }

// Close heals and closes every proxy of the Path.
func (p *Path) Close() error {
	p.mu.Lock()
	p.closed = true
	proxies := p.proxies
	p.proxies = map[string]*Proxy{}
	p.mu.Unlock()
	var first error
	for _, px := range proxies {
		px.Heal()
		if err := px.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
