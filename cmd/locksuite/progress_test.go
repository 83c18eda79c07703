package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/locksuite/locksuite/harness/report"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitFor polls cond every 10ms for up to 20s: the test waits on what the
// display printed, not on a sleep.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 20s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestProgressLines: when stderr is not a terminal, the display prints
// plain lines with the scenario, its elapsed and planned time, its sections
// and overlaps so far, and the violations of the runs so far, and no
// carriage returns.
func TestProgressLines(t *testing.T) {
	var buf lockedBuffer
	if isTerminal(&buf) {
		t.Fatal("a buffer is not a terminal")
	}
	p := newProgress(&buf, false, 20*time.Millisecond, 3)
	p.update("redis fencing=off", report.Progress{Scenario: "pause-targeted", Planned: 5 * time.Second, Sections: 40, Overlaps: 2})
	waitFor(t, "a first line", func() bool { return strings.Count(buf.String(), "\n") >= 1 })
	p.update("redis fencing=off", report.Progress{Scenario: "pause-targeted", Done: true})
	p.end(report.Row{Backend: "redis", Scenario: "pause-targeted", Verdict: report.Broken, Expected: report.Broken, Lost: 3})
	p.end(report.Row{Backend: "redis", Fencing: true, Scenario: "pause-targeted", Verdict: report.Broken, Expected: report.Kept, Lost: 2})
	p.update("redis fencing=on", report.Progress{Scenario: "chaos-none", Planned: 10 * time.Second, Elapsed: time.Second, Sections: 7})
	waitFor(t, "a line after two results", func() bool { return strings.Contains(buf.String(), "[3/3]") })
	p.close()
	out := buf.String()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if strings.Contains(out, "\r") {
		t.Errorf("carriage returns in non-terminal output: %q", out)
	}
	if !strings.HasPrefix(lines[0], "locksuite: [1/3] redis fencing=off pause-targeted ") || !strings.Contains(lines[0], " of 5s, 40 sections, 2 overlapping;") ||
		!strings.Contains(lines[0], "violations so far: 0 broken runs, 0 lost updates, 0 unexpected") {
		t.Errorf("first line %q", lines[0])
	}
	last := lines[len(lines)-1]
	if !strings.Contains(last, "[3/3] redis fencing=on chaos-none") || !strings.Contains(last, " of 10s, 7 sections, 0 overlapping;") ||
		!strings.Contains(last, "violations so far: 2 broken runs, 5 lost updates, 1 unexpected") {
		t.Errorf("last line %q: want the second scenario, 2 broken runs, 5 lost, 1 unexpected (the fenced one)", last)
	}
}

// openPTY opens a pseudo-terminal pair.
func openPTY(t *testing.T) (master, slave *os.File) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	return m, s
}

// TestProgressTerminal: on a terminal (a pty), the display rewrites one
// line in place (carriage returns, no newline) and clears it at the end.
func TestProgressTerminal(t *testing.T) {
	m, s := openPTY(t)
	defer m.Close()
	if !isTerminal(s) {
		t.Fatal("the pty's slave is not seen as a terminal")
	}
	var buf lockedBuffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		b := make([]byte, 4096)
		for {
			n, err := m.Read(b)
			buf.Write(b[:n])
			if err != nil {
				return
			}
		}
	}()
	p := newProgress(s, true, time.Hour, 2)
	p.update("etcd fencing=on", report.Progress{Scenario: "baseline", Planned: 2 * time.Second})
	waitFor(t, "three updates on the terminal", func() bool { return strings.Count(buf.String(), "\r") >= 3 })
	p.close()
	waitFor(t, "the line cleared", func() bool { return strings.HasSuffix(strings.TrimRight(buf.String(), " "), "\r") })
	s.Close()
	out := buf.String()
	if strings.Contains(out, "\n") {
		t.Errorf("newlines on the terminal: %q", out)
	}
	if !strings.Contains(out, "\rlocksuite: [1/2] etcd fencing=on baseline ") || !strings.Contains(out, " of 2s, 0 sections, 0 overlapping;") {
		t.Errorf("terminal output %q", out)
	}
}
