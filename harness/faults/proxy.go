// Package faults holds the faults the suite injects. Each fault is separate
// from the load that runs under it and from the checker that judges it.
//
// Proxy is a TCP proxy between one client and its lock service. Freeze stops
// forwarding in both directions without losing a byte: data already read is
// held and delivered after Thaw, in order, and a connection the server closes
// meanwhile is closed towards the client only after Thaw. To the client and
// the server a frozen proxy looks exactly like a stalled process or network:
// nothing arrives, so the client's renewals stop too.
package faults

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// Proxy forwards connections from its loopback address to Target.
type Proxy struct {
	target string
	ln     net.Listener

	mu     sync.Mutex
	thawed chan struct{} // closed while forwarding; replaced by Freeze
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// NewProxy listens on a free loopback port and forwards each accepted
// connection to target (host:port).
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faults: proxy listen: %w", err)
	}
	p := &Proxy{target: target, ln: ln, thawed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.thawed)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Freeze stops all forwarding, on open and new connections, until Thaw.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
		p.thawed = make(chan struct{})
	default: // already frozen
	}
}

// Thaw resumes forwarding, first delivering what was held.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
	default:
		close(p.thawed)
	}
}

// Frozen reports whether the proxy is frozen.
func (p *Proxy) Frozen() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
		return false
	default:
		return true
	}
}

// gate blocks while the proxy is frozen; false once it is closed.
func (p *Proxy) gate() bool {
	p.mu.Lock()
	ch, closed := p.thawed, p.closed
	p.mu.Unlock()
	if closed {
		return false
	}
	<-ch
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.closed
}

// Close stops listening and closes every connection. It thaws first, so no
// goroutine stays blocked.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	select {
	case <-p.thawed:
	default:
		close(p.thawed)
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	if !p.gate() { // a frozen network does not connect either
		return
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(server, client) }()
	go func() { defer wg.Done(); p.pipe(client, server) }()
	wg.Wait()
}

// pipe copies src to dst, holding each chunk at the gate before writing it,
// and half-closes dst (after the gate) when src ends.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.gate() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !p.gate() {
				return
			}
			if errors.Is(err, io.EOF) {
				if tc, ok := dst.(*net.TCPConn); ok {
					tc.CloseWrite()
					return
				}
			}
			dst.Close()
			return
		}
	}
}
