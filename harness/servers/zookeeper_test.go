package servers

import (
	"context"
	"fmt"
	"github.com/locksuite/locksuite/internal/servercheck"
	"io"
	"log"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/locksuite/locksuite/harness/faults"
)

// zkServes opens a session on addrs, creates an ephemeral znode and reads
// it back, and closes the session.
func zkServes(addrs []string) error {
	c, _, err := zk.Connect(addrs, 2*time.Second, zk.WithLogger(log.New(io.Discard, "", 0)))
	if err != nil {
		return err
	}
	defer c.Close()
	path := fmt.Sprintf("/locksuite-serves-%d", time.Now().UnixNano())
	if _, err := c.Create(path, []byte("x"), zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	b, _, err := c.Get(path)
	if err != nil || string(b) != "x" {
		return fmt.Errorf("get %s: %q, %v", path, b, err)
	}
	return nil
}

// TestZooKeeperServes starts the standalone server, checks that a client
// can create and read a znode and that the session floor is the harness's
// (a 200 ms session is granted as such, not raised), then stops it: its
// process and directory must be gone. The ensemble's start, leader kill and
// restart are in TestClusters; here a client is served by the ensemble
// after its leader is killed.
func TestZooKeeperServes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real servers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t.Run("standalone", func(t *testing.T) {
		t0 := time.Now()
		s, err := StartZooKeeper(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Stop()
		t.Logf("serving at %s in %v", s.Endpoint(), time.Since(t0).Round(time.Millisecond))
		if err := zkServes([]string{s.Endpoint()}); err != nil {
			t.Fatal(err)
		}
		st, err := FourLetterWord(ctx, s.Endpoint(), "conf")
		if err != nil {
			t.Fatal(err)
		}
		if want := "minSessionTimeout=200"; !strings.Contains(st, want) {
			t.Errorf("conf lacks %q:\n%s", want, st)
		}
		servercheck.StopGone(t, s, s.dir, s.Pid())
	})
	t.Run("ensemble", func(t *testing.T) {
		t0 := time.Now()
		c, err := StartZooKeeperEnsemble(ctx, 3)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Stop()
		t.Logf("healthy at %s in %v", c.Endpoint(), time.Since(t0).Round(time.Millisecond))
		if err := zkServes(c.Addrs()); err != nil {
			t.Fatal(err)
		}
		l, err := c.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Kill(); err != nil {
			t.Fatal(err)
		}
		var others []string
		for _, m := range c.Members() {
			if m != l {
				others = append(others, m.Addr())
			}
		}
		if err := faults.WaitHealthy(ctx, time.Minute, c.Healthy); err != nil {
			t.Fatalf("after killing the leader %s: %v", l.Name(), err)
		}
		if err := zkServes(others); err != nil {
			t.Fatalf("after killing the leader %s: %v", l.Name(), err)
		}
	})
}
