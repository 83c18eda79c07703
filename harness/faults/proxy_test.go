package faults

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"testing"
	"time"
)

// echoServer echoes every connection back until the client half-closes.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.(*net.TCPConn).CloseWrite() }()
		}
	}()
	return ln.Addr().String()
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
