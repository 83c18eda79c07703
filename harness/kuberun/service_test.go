package kuberun

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/role"
)

// TestMain serves the roles this test binary is run again in (a cluster
// member, a Kubernetes node: harness/role) before any test.
func TestMain(m *testing.M) { os.Exit(role.Main(m)) }

// TestServiceSupervisor runs a service supervisor's server (sleep, as the
// lock server) and its control connection on this machine, without a
// cluster: a command without the token is refused; stop and cont take
// effect (/proc shows it); dial says whether a connection from the pod
// goes through; crash kills the process and starts another; kill ends it
// and is not reported as a death; a process that dies on its own is.
func TestServiceSupervisor(t *testing.T) {
	sv := &server{argv: []string{"sleep", "1000"}, out: io.Discard, died: make(chan error, 1)}
	if err := sv.start(); err != nil {
		t.Skipf("no sleep here: %v", err)
	}
	defer sv.kill()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const token = "t0ken"
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go sv.serve(c, token, t.Logf)
		}
	}()
	ctx := context.Background()
	addr := ln.Addr().String()
	pid := func() faults.Group {
		sv.mu.Lock()
		defer sv.mu.Unlock()
		return faults.Group(sv.pid)
	}

	if err := command(ctx, addr, "wrong", "kill"); err == nil || !strings.Contains(err.Error(), "wrong token") {
		t.Errorf("a command with another token: %v, want it refused", err)
	}
	if err := command(ctx, addr, token, "stop"); err != nil {
		t.Fatal(err)
	}
	if err := pid().Await(true, 0); err != nil {
		t.Errorf("after stop: %v", err)
	}
	if err := command(ctx, addr, token, "cont"); err != nil {
		t.Fatal(err)
	}
	if err := pid().Await(false, 0); err != nil {
		t.Errorf("after cont: %v", err)
	}

	// The pod's probe: a connection that goes through, one that does not.
	if err := command(ctx, addr, token, "dial "+addr); err != nil {
		t.Errorf("dial the supervisor's own port: %v", err)
	}
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	if err := command(ctx, addr, token, "dial "+closed.Addr().String()); err == nil || !strings.Contains(err.Error(), "from the pod") {
		t.Errorf("dial a closed port: %v, want the refusal", err)
	}

	first := pid()
	if err := command(ctx, addr, token, "crash"); err != nil {
		t.Fatal(err)
	}
	if second := pid(); second == first {
		t.Errorf("pid %d after the crash: not started again", second)
	} else if err := second.Await(false, 0); err != nil {
		t.Errorf("the new process: %v", err)
	}
	if err := syscall.Kill(int(first), 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the crashed process %d: %v, want it gone", first, err)
	}

	// A death nobody asked for is reported; one asked for is not.
	if err := pid().Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sv.died:
	case <-time.After(10 * time.Second):
		t.Fatal("a server killed from outside: not reported as dead")
	}
	if err := command(ctx, addr, token, "crash"); err != nil {
		t.Fatal(err)
	}
	if err := command(ctx, addr, token, "kill"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-sv.died:
		t.Errorf("a kill the driver asked for reported as a death: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestSuperviseServiceEnds checks superviseService's status: 1 when the
// server exits on its own, 0 when the supervisor is told to end (and the
// server is gone then).
func TestSuperviseServiceEnds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	spec := serviceSpec{Control: port, Token: "x"}
	if st := superviseService(context.Background(), spec, []string{"true"}, io.Discard); st != 1 {
		t.Errorf("a server that exits at once: status %d, want 1", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if st := superviseService(ctx, spec, []string{"sleep", "1000"}, io.Discard); st != 0 {
		t.Errorf("a supervisor told to end: status %d, want 0", st)
	}
}
