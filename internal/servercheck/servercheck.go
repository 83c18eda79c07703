// Package servercheck is what the tests of harness/servers, of the
// service packages (harness/services/...) and of other packages share that
// needs none of harness/servers' types: starting a server (or this test
// binary) for a test, a listener that accepts and serves nothing, and
// checking that Stop left nothing. (harness/servers/servertest has what
// needs those types; the package's own tests cannot import that.)
package servercheck

import (
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/locksuite/locksuite/internal/tempdir"
)

// TimedStart starts a server with start (within a minute), fails the test
// if it does not start, and logs how long it took.
func TimedStart[S interface {
	Name() string
	Endpoint() string
}](t *testing.T, start func(context.Context) (S, error)) S {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t0 := time.Now()
	s, err := start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s ready at %s in %v", s.Name(), s.Endpoint(), time.Since(t0).Round(time.Millisecond))
	return s
}

// MustStart starts a server for t with start; it stops when t ends.
func MustStart[S interface{ Stop() error }](t *testing.T, start func() (S, error)) S {
	t.Helper()
	s, err := start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop() })
	return s
}

// StopGone stops s and checks that the processes pids (0: none) and the
// directory dir are gone.
func StopGone(t *testing.T, s interface{ Stop() error }, dir string, pids ...int) {
	t.Helper()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if pid != 0 && syscall.Kill(pid, 0) == nil {
			t.Errorf("process %d still exists after Stop", pid)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("directory %s still exists after Stop (%v)", dir, err)
	}
	if mps := tempdir.Mounts(dir); len(mps) > 0 {
		t.Errorf("%q still mounted after Stop", mps)
	}
}

// Using runs f with the client c that was opened with err, and closes it
// with close.
func Using[C any](c C, err error, close func(C), f func(C) error) error {
	if err != nil {
		return err
	}
	defer close(c)
	return f(c)
}

// StartSelf starts this test binary again with args and env=1 in its
// environment, its stderr this process's, and returns it and its stdout.
// The caller reads what it needs, then kills it and waits for it.
func StartSelf(t *testing.T, env string, args ...string) (*exec.Cmd, io.ReadCloser) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), env+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, out
}

// AcceptAndClose accepts the connections of l and closes each at once, in
// a goroutine, until l is closed: an address that is open and serves
// nothing.
func AcceptAndClose(l net.Listener) {
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}
