package nodes

import (
	"context"
	"net"
	"os/exec"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// TestRedisAcrossNodes is the wiring a cluster scenario uses, with a real
// server: redis-server runs on n0 (Node.Start) bound to n0's address, a
// go-redis client lives on n1 (Node.Dial as its dialer). Isolating n0 cuts
// the client off (a PING times out) and heal brings it back.
func TestRedisAcrossNodes(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not installed (apt-get install redis-server, or ci/setup.sh)")
	}
	nw := newNetwork(t, 2)
	n0, n1 := nw.Nodes()[0], nw.Nodes()[1]
	dir := t.TempDir()
	srv := exec.Command(bin, "--bind", n0.Addr().String(), "--port", "6379", "--save", "", "--appendonly", "no", "--dir", dir,
		// Redis refuses clients off loopback without a password otherwise;
		// these are the harness's own isolated addresses.
		"--protected-mode", "no")
	srv.Stdout, srv.Stderr = testWriter{t}, testWriter{t}
	if err := n0.Start(srv); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	c := goredis.NewClient(&goredis.Options{
		Addr: net.JoinHostPort(n0.Addr().String(), "6379"), Dialer: n1.Dial,
		MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second, PoolSize: 1,
	})
	defer c.Close()
	ping := func(within time.Duration) error {
		ctx, cancel := context.WithTimeout(t.Context(), within)
		defer cancel()
		return c.Ping(ctx).Err()
	}
	// The server needs a moment to listen.
	deadline := time.Now().Add(10 * time.Second)
	for ping(time.Second) != nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if err := ping(reachWait); err != nil {
		t.Fatalf("PING n1 -> redis on n0: %v", err)
	}
	heal, err := nw.Inject(t.Context(), Isolate(All(2), 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := ping(cutWait); err == nil {
		t.Error("PING crossed the isolation of n0")
	}
	if err := heal(); err != nil {
		t.Fatal(err)
	}
	if err := ping(reachWait); err != nil {
		t.Errorf("PING after heal: %v", err)
	}
}

// testWriter logs what a server prints.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }
