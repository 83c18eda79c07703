package pgconf

import (
	"context"
	"errors"
	"net"
	"testing"
)

// TestPoolerSendsNoCancel: through a pooler, a dial outside Connect (pgx's
// cancel request) is refused before it leaves the client; Connect's dials
// go through, and without pooler every dial does.
func TestPoolerSendsNoCancel(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var dialed int
	dial := func(ctx context.Context, network, address string) (net.Conn, error) {
		dialed++
		return net.Dial(network, ln.Addr().String())
	}
	for _, pooler := range []bool{true, false} {
		dialed = 0
		cc, err := Parse("postgres", "postgres://u@127.0.0.1:1/db", "", dial, pooler)
		if err != nil {
			t.Fatal(err)
		}
		c, err := cc.DialFunc(context.Background(), "tcp", ln.Addr().String())
		if pooler != errors.Is(err, errNoCancel) {
			t.Errorf("pooler %v: a dial outside Connect: %v", pooler, err)
		}
		if c != nil {
			c.Close()
		}
		c, err = cc.DialFunc(context.WithValue(context.Background(), connecting{}, true), "tcp", ln.Addr().String())
		if err != nil {
			t.Errorf("pooler %v: Connect's dial: %v", pooler, err)
		} else {
			c.Close()
		}
		if want := map[bool]int{true: 1, false: 2}[pooler]; dialed != want {
			t.Errorf("pooler %v: %d dials reached the network, want %d", pooler, dialed, want)
		}
	}
}
