package foreign

import (
	"context"
	"io"
	"net"
	"sync"
	"time"
)

// forwarder is a local port that carries a worker's connections to one
// server through the client's Dial, so that the faults of the client's
// path (faults.Path: freeze, cut, blackhole, dropped replies) act on a
// foreign client's traffic exactly as on a Go one's.
type forwarder struct {
	ln     net.Listener
	target string
	dial   func(ctx context.Context, network, address string) (net.Conn, error)

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

func newForwarder(target string, dial func(ctx context.Context, network, address string) (net.Conn, error)) (*forwarder, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &forwarder{ln: ln, target: target, dial: dial, conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.accept()
	return f, nil
}

// Addr is the local host:port the worker connects to.
func (f *forwarder) Addr() string { return f.ln.Addr().String() }

func (f *forwarder) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		if !f.track(c) {
			c.Close()
			return
		}
		f.wg.Add(1)
		go f.serve(c)
	}
}

func (f *forwarder) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *forwarder) untrack(c net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.conns, c)
}

// serve pipes c to a new connection to the target, both ways, until either
// side ends; then it closes both, so that a connection the path cut reaches
// the worker as a closed one.
func (f *forwarder) serve(c net.Conn) {
	defer f.wg.Done()
	defer f.untrack(c)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	up, err := f.dial(ctx, "tcp", f.target)
	cancel()
	if err != nil {
		return // the worker sees its connection closed: a refused one
	}
	if !f.track(up) {
		up.Close()
		return
	}
	defer f.untrack(up)
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}

// Close stops accepting, closes every connection and waits for the pipes.
func (f *forwarder) Close() {
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.ln.Close()
	f.wg.Wait()
}
