package faults

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// echoServer echoes every connection back until the client half-closes.
func echoServer(t *testing.T) string {
	addr, _ := countingEcho(t)
	return addr
}

// countingEcho is echoServer that also counts the bytes it received.
func countingEcho(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var got atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				buf := make([]byte, 32<<10)
				for {
					n, err := c.Read(buf)
					got.Add(int64(n))
					if n > 0 {
						if _, werr := c.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				c.(*net.TCPConn).CloseWrite()
			}()
		}
	}()
	return ln.Addr().String(), &got
}

// roundTrip writes msg on c and reads it back, within a generous bound.
func roundTrip(c net.Conn, msg string) (string, error) {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	buf := make([]byte, len(msg))
	_, err := io.ReadFull(c, buf)
	return string(buf), err
}

// silent reports whether nothing arrives on c for 200 ms while the
// connection stays open (a read timeout, not an end or a reset).
func silent(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	defer c.SetReadDeadline(time.Time{})
	buf := make([]byte, 16)
	n, err := c.Read(buf)
	if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("expected silence on an open connection, got %q, %v", buf[:n], err)
	}
}

// ended reports whether c has been closed or reset by the proxy: a read
// returns an error other than a timeout, within a bound.
func ended(c net.Conn) error {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	buf := make([]byte, 16)
	for {
		n, err := c.Read(buf)
		if err == nil && n > 0 {
			return errors.New("got data " + string(buf[:n]) + " instead of an end")
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return errors.New("connection still open after 10s")
		}
		if err != nil {
			return nil
		}
	}
}

// dialEcho starts an echo server, a proxy in front of it and a connection
// through the proxy, all closed when the test ends.
func dialEcho(t *testing.T) (*Proxy, net.Conn) {
	t.Helper()
	p, err := NewProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return p, c
}

// proxyDialer starts a proxy in front of addr and returns it with a dial
// of a new connection through it, all closed when the test ends.
func proxyDialer(t *testing.T, addr string) (*Proxy, func() net.Conn) {
	t.Helper()
	p, err := NewProxy(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, func() net.Conn {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
}

// TestFreezeLosesNothing pushes 4 MiB through the proxy while it freezes and
// thaws repeatedly, and checks that exactly the same bytes come back, and
// that nothing at all comes through while frozen.
func TestFreezeLosesNothing(t *testing.T) {
	p, c := dialEcho(t)
	want := make([]byte, 4<<20)
	rand.Read(want)
	go func() {
		for off := 0; off < len(want); off += 64 << 10 {
			c.Write(want[off : off+64<<10])
		}
		c.(*net.TCPConn).CloseWrite()
	}()
	stop := make(chan struct{})
	froze := make(chan int)
	go func() {
		n := 0
		defer func() { froze <- n }()
		for {
			select {
			case <-stop:
				p.Thaw()
				return
			case <-time.After(2 * time.Millisecond):
			}
			p.Freeze()
			n++
			time.Sleep(3 * time.Millisecond)
			p.Thaw()
		}
	}()
	got, err := io.ReadAll(c)
	close(stop)
	n := <-froze
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes back, want %d identical bytes", len(got), len(want))
	}
	if n == 0 {
		t.Fatal("the proxy never froze during the transfer")
	}
	t.Logf("%d bytes intact across %d freezes", len(got), n)
}

// TestFrozenForwardsNothing checks that a frozen proxy delivers nothing, and
// delivers everything held once thawed.
func TestFrozenForwardsNothing(t *testing.T) {
	p, c := dialEcho(t)
	p.Freeze()
	c.Write([]byte("ping"))
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	buf := make([]byte, 4)
	if n, err := c.Read(buf); n != 0 || err == nil {
		t.Fatalf("frozen proxy delivered %q (err %v)", buf[:n], err)
	}
	p.Thaw()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("after thaw got %q, %v; want ping", buf, err)
	}
}

// TestCut: a cut closes open connections, refuses new ones, and Heal lets
// new connections through again.
func TestCut(t *testing.T) {
	p, c := dialEcho(t)
	if got, err := roundTrip(c, "before"); err != nil || got != "before" {
		t.Fatalf("before the cut: %q, %v", got, err)
	}
	p.Cut()
	if err := ended(c); err != nil {
		t.Fatalf("open connection after Cut: %v", err)
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err == nil { // accepted and reset at once
		defer c2.Close()
		if got, err := roundTrip(c2, "during"); err == nil {
			t.Fatalf("a connection made during the cut echoed %q", got)
		}
	}
	p.Heal()
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if got, err := roundTrip(c3, "after"); err != nil || got != "after" {
		t.Fatalf("after Heal: %q, %v", got, err)
	}
}

// TestBlackhole: a blackhole keeps connections open and delivers nothing,
// in either direction, ever: the server never receives what was sent into
// it. Heal closes the connections that lost bytes; one that sent nothing
// meanwhile goes on, and new ones work.
func TestBlackhole(t *testing.T) {
	addr, received := countingEcho(t)
	p, dial := proxyDialer(t, addr)
	lossy, idle := dial(), dial()
	for _, c := range []net.Conn{lossy, idle} {
		if got, err := roundTrip(c, "ab"); err != nil || got != "ab" {
			t.Fatalf("before the blackhole: %q, %v", got, err)
		}
	}
	p.Blackhole()
	lossy.Write([]byte("lost"))
	silent(t, lossy)
	late := dial() // connects, and its bytes vanish too
	late.Write([]byte("lost too"))
	silent(t, late)
	p.Heal()
	if err := ended(lossy); err != nil {
		t.Fatalf("a connection that lost bytes, after Heal: %v", err)
	}
	if err := ended(late); err != nil {
		t.Fatalf("a connection made in the blackhole, after Heal: %v", err)
	}
	if got, err := roundTrip(idle, "cd"); err != nil || got != "cd" {
		t.Fatalf("a connection idle through the blackhole, after Heal: %q, %v", got, err)
	}
	if got, err := roundTrip(dial(), "ef"); err != nil || got != "ef" {
		t.Fatalf("a new connection after Heal: %q, %v", got, err)
	}
	if n := received.Load(); n != 8 { // ab, ab, cd, ef
		t.Fatalf("the server received %d bytes, want 8: the blackhole let something through", n)
	}
}

// TestHealAfterFreezeDelivers: Heal, like Thaw, delivers what a freeze held.
func TestHealAfterFreezeDelivers(t *testing.T) {
	p, c := dialEcho(t)
	p.Freeze()
	c.Write([]byte("held"))
	silent(t, c)
	p.Heal()
	buf := make([]byte, 4)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "held" {
		t.Fatalf("after Heal got %q, %v; want held", buf, err)
	}
}

// TestDropReplies: while replies are dropped, what the client sends reaches
// the server (which echoes it) and nothing comes back, on an open
// connection and on one made meanwhile; Heal closes the connections that
// lost replies, and new ones work.
func TestDropReplies(t *testing.T) {
	addr, received := countingEcho(t)
	p, dial := proxyDialer(t, addr)
	open := dial()
	if got, err := roundTrip(open, "ab"); err != nil || got != "ab" {
		t.Fatalf("before: %q, %v", got, err)
	}
	p.DropReplies()
	open.Write([]byte("asked"))
	silent(t, open)
	late := dial()
	late.Write([]byte("asked2"))
	silent(t, late)
	if got := p.Sent(); got != 2+5+6 {
		t.Fatalf("Sent() %d, want 13", got)
	}
	if n := received.Load(); n != 2+5+6 {
		t.Fatalf("the server received %d bytes, want 13: requests must get through while replies are dropped", n)
	}
	p.Heal()
	for _, c := range []net.Conn{open, late} {
		if err := ended(c); err != nil {
			t.Fatalf("a connection that lost replies, after Heal: %v", err)
		}
	}
	if got, err := roundTrip(dial(), "cd"); err != nil || got != "cd" {
		t.Fatalf("a new connection after Heal: %q, %v", got, err)
	}
}

// TestDropRepliesFault: the fault does not apply to a client that dialled
// nothing through its Path; struck, it drops the replies on the Path's
// proxies, and its heal ends that.
func TestDropRepliesFault(t *testing.T) {
	path := NewPath()
	t.Cleanup(func() { path.Close() })
	f := &DropReplies{Path: path, Lane: 0, Name: "A"}
	if err := f.Applies(context.Background()); !errors.Is(err, ErrNotApplicable) {
		t.Fatalf("Applies before any dial: %v, want ErrNotApplicable", err)
	}
	c, err := path.Dial(context.Background(), "tcp", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := f.Applies(context.Background()); err != nil {
		t.Fatalf("Applies after a dial: %v", err)
	}
	heal, err := f.Inject(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("x"))
	silent(t, c)
	if err := heal(); err != nil {
		t.Fatal(err)
	}
	if err := ended(c); err != nil {
		t.Fatalf("a connection that lost replies, after the heal: %v", err)
	}
	if s := f.Span(); s.Kind != "replies dropped" || s.What != "drop replies to A" {
		t.Fatalf("span %+v", s)
	}
}
