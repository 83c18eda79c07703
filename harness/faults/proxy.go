// Package faults holds the faults the suite injects. Each fault is separate
// from the load that runs under it and from the checker that judges it.
//
// Proxy is a TCP proxy between one client and its lock service. The harness
// puts one in front of each client's lock-service path only: the client
// keeps its own direct path to the store it protects, so a client cut off
// from the lock service can still write. Because every request of the
// client's lock library (renewals and keep-alives included) goes through the
// proxy, stopping its traffic stops its renewals too. Four network faults,
// each undone by Heal (DropReplies, the fourth, is below):
//
//   - Freeze stops forwarding in both directions without losing a byte: data
//     already read is held and delivered after Thaw or Heal, in order, and a
//     connection the server closes meanwhile is closed towards the client
//     only afterwards. To the client and the server a frozen proxy looks
//     exactly like a stalled process or a network that holds packets.
//   - Cut closes every connection and refuses new ones (each is accepted and
//     reset at once) until Heal: a partition the client's kernel reports.
//   - Blackhole keeps every connection open and forwards nothing: what
//     either side sends is read and discarded, and never delivered. New
//     connections are accepted and dialed through, and lose their bytes the
//     same way. A partition nobody reports: each side sees only silence.
package faults

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// mode is what the proxy does with the bytes it reads.
type mode int

const (
	forward     mode = iota
	frozen           // hold until the mode changes
	cut              // connections closed, new ones refused
	blackhole        // read and discard
	dropReplies      // forward the client's bytes, read and discard the server's
)

// Proxy forwards connections from its loopback address to Target.
type Proxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	mode    mode
	changed chan struct{} // closed and replaced whenever mode changes
	links   map[*link]struct{}
	closed  bool
	wg      sync.WaitGroup
	sent    atomic.Int64 // bytes forwarded to the target
}

// Sent is how many bytes the proxy has forwarded from its clients to the
// target so far (not those a fault held or dropped).
func (p *Proxy) Sent() int64 { return p.sent.Load() }

// link is one proxied connection: the client's side and the server's.
type link struct {
	client, server net.Conn // server is nil until dialed
	lost           bool     // the blackhole discarded some of its bytes
}

func (l *link) close() {
	l.client.Close()
	if l.server != nil {
		l.server.Close()
	}
}

// NewProxy listens on a free loopback port and forwards each accepted
// connection to target (host:port).
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faults: proxy listen: %w", err)
	}
	p := &Proxy{target: target, ln: ln, changed: make(chan struct{}), links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// setMode switches the mode and wakes every goroutine waiting on it.
// Callers hold p.mu.
func (p *Proxy) setMode(m mode) {
	if p.mode == m {
		return
	}
	p.mode = m
	close(p.changed)
	p.changed = make(chan struct{})
}

// switchTo closes the open connections for which drop (if not nil) is true,
// then sets the mode to m, all under p.mu: the mode switch of every fault
// and of Heal.
func (p *Proxy) switchTo(m mode, drop func(*link) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if drop != nil {
		for l := range p.links {
			if drop(l) {
				l.close()
			}
		}
	}
	p.setMode(m)
}

// Freeze stops all forwarding, on open and new connections, until Thaw or
// Heal. It replaces a cut or a blackhole.
func (p *Proxy) Freeze() { p.switchTo(frozen, nil) }

// Thaw resumes forwarding after Freeze, first delivering what was held. It
// does nothing when the proxy is not frozen.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode == frozen {
		p.setMode(forward)
	}
}

// Cut closes every open connection, in both directions, and until Heal
// accepts each new connection only to reset it. Bytes held by a freeze are
// dropped with their connections. It replaces a freeze or a blackhole.
func (p *Proxy) Cut() { p.switchTo(cut, func(*link) bool { return true }) }

// Blackhole makes the proxy read and discard everything either side sends,
// on open and new connections, until Heal; connections stay open. It
// replaces a freeze (bytes held by it are discarded too) or a cut.
func (p *Proxy) Blackhole() { p.switchTo(blackhole, nil) }

// DropReplies forwards what clients send and reads and discards what the
// server sends back, on open and new connections, until Heal; connections
// stay open. It replaces a freeze (bytes held by it are delivered to the
// server, or discarded if they are the server's), a cut or a blackhole.
func (p *Proxy) DropReplies() { p.switchTo(dropReplies, nil) }

// Heal undoes every fault: it thaws (delivering what a freeze held), and
// ends a cut, a blackhole or dropped replies. A connection that lost bytes to
// the blackhole or to dropped replies is closed: its stream has a hole and cannot be parsed again,
// as a real one whose retransmissions timed out; connections that lost
// nothing go on.
func (p *Proxy) Heal() { p.switchTo(forward, func(l *link) bool { return l.lost }) }

// gate waits while the proxy is frozen and says what to do with a chunk of
// l going to the client (toClient) or to the server: forward it, drop it
// (blackhole, or a reply while replies are dropped: blackhole is returned,
// and l is marked lost) or end the pipe (cut, or the proxy closed).
func (p *Proxy) gate(l *link, toClient bool) mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if p.closed {
			return cut
		}
		switch p.mode {
		case frozen:
			ch := p.changed
			p.mu.Unlock()
			<-ch
			p.mu.Lock()
			continue
		case blackhole:
			if l != nil {
				l.lost = true
			}
		case dropReplies:
			if !toClient {
				return forward
			}
			if l != nil {
				l.lost = true
			}
			return blackhole
		}
		return p.mode
	}
}

// Close stops listening and closes every connection. It heals first, so no
// goroutine stays blocked.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.changed)
	p.changed = make(chan struct{})
	for l := range p.links {
		l.close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

// track registers l; false (and l closed) if the proxy is closed, or cut
// when refusing is true.
func (p *Proxy) track(l *link, refuseCut bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || refuseCut && p.mode == cut {
		if tc, ok := l.client.(*net.TCPConn); ok && !p.closed {
			tc.SetLinger(0) // reset, as a refused connection
		}
		l.close()
		return false
	}
	p.links[l] = struct{}{}
	return true
}

func (p *Proxy) untrack(l *link) {
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
	l.close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		l := &link{client: c}
		if !p.track(l, true) {
			continue
		}
		p.wg.Add(1)
		go p.serve(l)
	}
}

func (p *Proxy) serve(l *link) {
	defer p.wg.Done()
	defer p.untrack(l)
	if p.gate(nil, false) == cut { // a frozen network does not connect either
		return
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	p.mu.Lock()
	l.server = server
	gone := p.closed || p.mode == cut
	p.mu.Unlock()
	if gone {
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(l, server, l.client, false) }()
	go func() { defer wg.Done(); p.pipe(l, l.client, server, true) }()
	wg.Wait()
}

// chunk is what one Read returned.
type chunk struct {
	b   []byte
	err error
}

// pipe copies src to dst (the client, when toClient): a reader goroutine
// reads chunks, and this one delivers each, holding it at the gate (or
// dropping it in a blackhole, or as a dropped reply) before writing it. When src ends it half-closes dst (after
// the gate), leaving the other direction open; on any other end it closes
// both sides, which ends the other direction's pipe too.
func (p *Proxy) pipe(l *link, dst, src net.Conn, toClient bool) {
	ch := make(chan chunk, 64)
	go func() {
		defer close(ch)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			ch <- chunk{b: buf[:n], err: err}
			if err != nil {
				return
			}
		}
	}()
	abort := func() {
		dst.Close()
		src.Close()
		for range ch { // let the reader end
		}
	}
	for c := range ch {
		if len(c.b) > 0 {
			switch p.gate(l, toClient) {
			case cut:
				abort()
				return
			case forward:
				if _, err := dst.Write(c.b); err != nil {
					abort()
					return
				}
				if !toClient {
					p.sent.Add(int64(len(c.b)))
				}
			}
		}
		if c.err != nil {
			m := p.gate(l, toClient)
			for m == blackhole { // the end is lost too: Heal closes the link
				p.mu.Lock()
				ch, still := p.changed, (p.mode == blackhole || p.mode == dropReplies && toClient) && !p.closed
				p.mu.Unlock()
				if still {
					<-ch
				}
				m = p.gate(l, toClient)
			}
			if m != cut && errors.Is(c.err, io.EOF) {
				if tc, ok := dst.(*net.TCPConn); ok {
					tc.CloseWrite()
					return
				}
			}
			abort()
			return
		}
	}
}
