package zksession

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// TestSilentServerDropped: a server that accepts the connection and never
// answers the connect request (a ZooKeeper that is starting) is dropped
// after Options.handshake, and the client dials again; Open, meanwhile,
// ends with its ctx. No ZooKeeper needed.
func TestSilentServerDropped(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int32
	closed := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() {
				defer c.Close()
				buf := make([]byte, 512)
				for {
					if _, err := c.Read(buf); err != nil {
						closed <- struct{}{} // the client hung up
						return
					}
				}
			}()
		}
	}()
	defer ln.Close()
	o := Options{Servers: []string{ln.Addr().String()}, Timeout: 3 * time.Second, Name: "test"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// go-zookeeper v1.0.4 alone would wait 10 × 2 s for this answer.
	if _, err := Open(ctx, o); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Open: %v, want context.DeadlineExceeded", err)
	}
	// Open closed its client; the connection it had is closed either way.
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the client kept its connection to the silent server 10 s after Open gave up")
	}

	// A client left to itself drops the silent connection and dials again.
	s := &Session{opts: o, waiters: map[chan struct{}]int64{}, hosts: &hosts{}}
	before := accepted.Load()
	c, _, err := zkConnect(s)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case <-closed:
	case <-time.After(4 * o.handshake()):
		t.Fatalf("the client kept its connection to the silent server %v after dialing (handshake bound %v)", 4*o.handshake(), o.handshake())
	}
	deadline := time.Now().Add(4 * o.handshake())
	for accepted.Load() < before+2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := accepted.Load() - before; n < 2 {
		t.Fatalf("%d connection(s) to the silent server, want a second one after the first was dropped", n)
	}
}
