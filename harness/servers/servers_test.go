package servers

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestStartStop starts each server, checks it is healthy (Start waits for
// that), stops it, and checks that its process and directory are gone.
func TestStartStop(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real servers")
	}
	type started interface {
		Server
		Pid() int
	}
	for _, tc := range []struct {
		name  string
		start func(context.Context) (started, error)
		dir   func(Server) string
	}{
		{"redis", func(ctx context.Context) (started, error) { return StartRedis(ctx) }, func(s Server) string { return s.(*Redis).p.dir }},
		{"postgres", func(ctx context.Context) (started, error) { return StartPostgres(ctx) }, func(s Server) string { return s.(*Postgres).p.dir }},
		{"consul", func(ctx context.Context) (started, error) { return StartConsul(ctx) }, func(s Server) string { return s.(*Consul).p.dir }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			t0 := time.Now()
			s, err := tc.start(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s ready at %s in %v", s.Name(), s.Endpoint(), time.Since(t0).Round(time.Millisecond))
			dir, pid := tc.dir(s), s.Pid()
			if err := s.Stop(); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Kill(pid, 0); err == nil {
				t.Errorf("process %d still exists after Stop", pid)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("directory %s still exists after Stop (%v)", dir, err)
			}
		})
	}
	t.Run("etcd", func(t *testing.T) {
		s, err := StartEtcd(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		dir := s.dir
		s.Stop()
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("directory %s still exists after Stop (%v)", dir, err)
		}
	})
}
