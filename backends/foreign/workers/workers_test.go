package workers

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/locksuite/locksuite/backends/foreign"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/internal/docblock"
)

// TestShipped walks the protocol (foreign.Check) with every shipped worker
// on a server of its service; a worker whose runtime or packages this
// machine lacks is skipped, saying what is missing.
func TestShipped(t *testing.T) {
	for _, w := range All {
		t.Run(w.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			p := prepare(t, ctx, w)
			addr := startService(t, ctx, w.Service)
			url := addr
			if w.Service == "redis" {
				url = "redis://" + addr + "/0"
			}
			check(t, ctx, foreign.Config{Command: p.Command, Dir: p.Dir, Name: w.Name,
				Key: "locksuite-check-" + w.Name, Lease: time.Second, Service: w.Service, Addrs: []string{addr}, URL: url})
		})
	}
}

// prepare is w.Prepare, skipping the test when this machine lacks w's
// runtime or packages.
func prepare(t *testing.T, ctx context.Context, w Worker) Prepared {
	t.Helper()
	p, err := w.Prepare(ctx)
	var m *Missing
	if errors.As(err, &m) {
		t.Skip(m)
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// check walks the protocol (foreign.Check) with workers started from cfg,
// each with its client number as Client, and logs the walk.
func check(t *testing.T, ctx context.Context, cfg foreign.Config) {
	t.Helper()
	var out strings.Builder
	err := foreign.Check(ctx, func(ctx context.Context, n int) (*foreign.Locker, error) {
		c := cfg
		c.Client = n
		return foreign.New(ctx, c)
	}, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
}

func startService(t *testing.T, ctx context.Context, service string) string {
	t.Helper()
	var (
		s   servers.Server
		err error
	)
	switch service {
	case "redis":
		s, err = servers.StartRedis(ctx)
	case "zookeeper":
		s, err = servers.StartZooKeeper(ctx)
	}
	var u *servers.Unavailable
	if errors.As(err, &u) {
		t.Skip(u)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s.Endpoint()
}

// TestYourLockWorker runs the whole redis-py worker of docs/your-lock.md,
// with the Python helper beside it, through foreign.Check.
func TestYourLockWorker(t *testing.T) {
	w, _ := Lookup("redis-py")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := prepare(t, ctx, w)
	code := docblock.Find(t, "../../../docs/your-lock.md", "<!-- snippet: worker, run by TestYourLockWorker", "python")
	dir := t.TempDir()
	helper, err := os.ReadFile(filepath.Join(p.Dir, "locksuite_worker.py"))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"my_worker.py": []byte(code), "locksuite_worker.py": helper} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	addr := startService(t, ctx, "redis")
	check(t, ctx, foreign.Config{Command: []string{Python, "-B", "my_worker.py"}, Dir: dir,
		Key: "locksuite-your-lock", Lease: time.Second, Service: "redis", Addrs: []string{addr}, URL: "redis://" + addr + "/0"})
}
