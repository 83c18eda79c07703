package worker

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/locksuite/locksuite/harness/role"
)

// fakeWorkerEnv makes the test binary, run again by a supervisor, a fake
// worker: it reports "ready" with its pid (in Writes), waits for its go,
// then reports "read" every 10 ms until its acks end or "ok" arrives.
const fakeWorkerEnv = "LOCKSUITE_TEST_FAKE_WORKER"

func TestMain(m *testing.M) {
	if code, ok := role.Serve(); ok { // the supervisor of TestSupervisor
		os.Exit(code)
	}
	if os.Getenv(fakeWorkerEnv) == "1" {
		os.Exit(fakeWorker())
	}
	os.Exit(m.Run())
}

func fakeWorker() int {
	out, acks := os.NewFile(3, "events"), bufio.NewReader(os.NewFile(4, "acks"))
	enc := json.NewEncoder(out)
	_ = enc.Encode(Event{Kind: "ready", Writes: os.Getpid()})
	if _, err := acks.ReadString('\n'); err != nil {
		return 1
	}
	done := make(chan struct{})
	go func() { _, _ = acks.ReadString('\n'); close(done) }()
	for {
		select {
		case <-done:
			_ = enc.Encode(Event{Kind: "done"})
			return 0
		case <-time.After(10 * time.Millisecond):
			_ = enc.Encode(Event{Kind: "read"})
		}
	}
}

// procState is process pid's state letter in /proc, or 0 if it is gone.
func procState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	return s[strings.LastIndexByte(s, ')')+2]
}

// TestSupervisor runs a supervisor (this test binary with SupervisorEnv,
// as a worker pod's PID 1) of a fake worker, connected to a Hub over TCP,
// and checks the protocol: the events arrive, Stop returns once the worker
// is stopped (its state in /proc is T) and Cont once it runs, the worker's
// exit ends the Remote, and a Stop after it is ESRCH (faults.Stop's "has
// exited"). A supervisor with an unknown token is turned away.
func TestSupervisor(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hub := NewHub(ln)
	defer hub.Close()
	r, token := hub.Expect(0, func() string { return "its log" })
	start := func(token string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), SupervisorEnv+"="+hub.Addr().String()+" "+token, fakeWorkerEnv+"=1", "NODE_NAME=n7")
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	stranger := start("not-a-token")
	sup := start(token)
	defer sup.Process.Kill()

	events := make(chan Event, 1024)
	decoded := make(chan error, 1)
	go func() { decoded <- r.Events(events) }()
	ready := <-events
	if ready.Kind != "ready" || r.Node() != "n7" {
		t.Fatalf("first event %+v from node %q, want ready from n7", ready, r.Node())
	}
	pid := ready.Writes
	r.Go(time.Hour)
	if ev := <-events; ev.Kind != "read" {
		t.Fatalf("after go: %+v", ev)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if s := procState(pid); s != 'T' {
		t.Errorf("after Stop, the worker's state is %q, want T", s)
	}
	if err := r.Cont(); err != nil {
		t.Fatal(err)
	}
	if s := procState(pid); s == 'T' || s == 0 {
		t.Errorf("after Cont, the worker's state is %q, want running or sleeping", s)
	}
	r.Ack() // the fake worker's cue to finish
	for ev := range events {
		if ev.Kind == "done" {
			break
		}
	}
	<-r.Done()
	if err := <-decoded; err != nil {
		t.Errorf("Events: %v", err)
	}
	if err := r.Stop(); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("Stop after the worker exited: %v, want ESRCH", err)
	}
	r.End(time.Second)
	if err := sup.Wait(); err != nil {
		t.Errorf("supervisor: %v", err)
	}
	if err := stranger.Wait(); err == nil {
		t.Error("the supervisor with an unknown token was served")
	}
}
