package foreign

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/internal/servercheck"
)

// These tests check the protocol's client: the suite's side of
// docs/protocol.md. The workers are /bin/sh scripts that print fixed
// lines, the smallest programs that speak (or break) the protocol; the
// lock libraries' own workers are tested on real servers elsewhere.

// replyLine is a script line that answers request id with the JSON object
// body (without braces).
func replyLine(id int, body string) string {
	return fmt.Sprintf(`read l; echo '{"in_reply_to":%d,%s}'; `, id, body)
}

const initOK = `"type":"init_ok","library":"toy","version":"1","runtime":"sh","capabilities":["fence","ttl"],"ttl_ms":100,"expiry_ms":150`

func shConfig(script string) Config {
	return Config{Command: []string{"/bin/sh", "-c", script}, Name: "toy", Key: "locksuite-test", Lease: 100 * time.Millisecond,
		Service: "redis", Addrs: []string{"127.0.0.1:1"}, URL: "redis://127.0.0.1:1/0"}
}

func TestProtocolHappyPath(t *testing.T) {
	script := replyLine(1, initOK) +
		replyLine(2, `"type":"acquire_ok","lease":"a","fence":5`) +
		replyLine(3, `"type":"release_ok","held":true`) +
		replyLine(4, `"type":"close_ok"`) + "read l"
	ctx := context.Background()
	l, err := New(ctx, shConfig(script))
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Library().String(); got != "toy 1 (sh)" {
		t.Errorf("Library = %q", got)
	}
	if l.TTL() != 100*time.Millisecond || l.Expiry() != 150*time.Millisecond {
		t.Errorf("TTL, Expiry = %v, %v; want 100ms, 150ms", l.TTL(), l.Expiry())
	}
	ls, err := l.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ls.Fence() != 5 {
		t.Errorf("Fence = %d, want 5", ls.Fence())
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := l.Acquire(ctx); !errors.Is(err, backends.ErrClosed) {
		t.Fatalf("Acquire after Close = %v, want backends.ErrClosed", err)
	}
}

// TestBadWorkers: every kind of bad worker fails New with an error that
// names the problem, within seconds, and leaves no process of its group.
func TestBadWorkers(t *testing.T) {
	cases := []struct {
		name, script string
		want         string
	}{
		{"exits at start", `echo 'cannot import redis' >&2; exit 3`, "cannot import redis"},
		{"not JSON", `read l; echo 'hello'; sleep 30`, `not a JSON object`},
		{"unknown id", replyLine(7, initOK) + "sleep 30", "answered id 7, which the suite did not ask"},
		{"other version", replyLine(1, `"type":"error","code":"unsupported","definite":true,"text":"protocol 2 only"`) + "sleep 30", "unsupported (definite): protocol 2 only"},
		{"wrong reply type", replyLine(1, `"type":"acquire_ok"`) + "sleep 30", `answered init with "acquire_ok", not "init_ok"`},
		{"unknown capability", replyLine(1, `"type":"init_ok","library":"x","capabilities":["teleport"]`) + "sleep 30", `capability "teleport"`},
		{"hangs", `read l; sleep 30`, "did not answer init (id 1) within"},
		{"forks children", `sleep 30 & sleep 30 & read l; echo '{not json'; sleep 30`, "not a JSON object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			start := time.Now()
			cfg := shConfig(c.script)
			var group int
			l, err := newWith(ctx, cfg, func(p *proc) { group = p.group })
			if err == nil {
				l.Close()
				t.Fatal("New succeeded")
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), `"toy" (client 0)`) {
				t.Errorf("error %q does not name the worker and %q", err, c.want)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v", d)
			}
			if group == 0 {
				t.Fatal("no process group")
			}
			if left := groupLeft(group, 2*time.Second); left != "" {
				t.Errorf("process group %d still has processes: %s", group, left)
			}
		})
	}
}

func TestCommandNotFound(t *testing.T) {
	cfg := shConfig("")
	cfg.Command = []string{"no-such-worker-program"}
	_, err := New(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), `command "no-such-worker-program" not found`) {
		t.Fatalf("err = %v", err)
	}
}

// driverEnv makes this test binary a driver that starts a worker which
// forks a child, prints the worker's process group and waits to be killed.
const driverEnv = "LOCKSUITE_FOREIGN_TEST_DRIVER"

func TestMain(m *testing.M) {
	if os.Getenv(driverEnv) != "" {
		cfg := shConfig(`sleep 60 & ` + replyLine(1, initOK) + "sleep 60")
		var group int
		if _, err := newWith(context.Background(), cfg, func(p *proc) { group = p.group }); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(group)
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestDriverKilled: a SIGKILL or a SIGINT of the process that started a worker (and
// stopped it) leaves no process of the worker's group: the reaper ends it.
func TestDriverKilled(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) { driverKilled(t, sig) })
	}
}

// driverKilled: a driver whose worker's group is stopped dies of sig (a
// SIGINT ends a Go program that does not handle it, no deferred call
// run); the worker's group is gone within 5 s.
func driverKilled(t *testing.T, sig syscall.Signal) {
	cmd, out := servercheck.StartSelf(t, driverEnv, "-test.run", "^$")
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		t.Fatalf("driver: %v", err)
	}
	group, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		cmd.Process.Kill()
		t.Fatalf("driver said %q", line)
	}
	_ = syscall.Kill(-group, syscall.SIGSTOP) // a stopped worker, as a pause leaves it
	_ = cmd.Process.Signal(sig)
	_ = cmd.Wait()
	if left := groupLeft(group, 5*time.Second); left != "" {
		_ = syscall.Kill(-group, syscall.SIGKILL)
		t.Fatalf("process group %d still there 5 s after its driver's %v: %s", group, sig, left)
	}
}

// groupLeft waits up to timeout for process group g to have no process
// but zombies (which PID 1 reaps in its own time), and returns what is
// left ("pid state ..."), or "".
func groupLeft(g int, timeout time.Duration) string {
	deadline := time.Now().Add(timeout)
	for {
		var left []string
		dirs, _ := os.ReadDir("/proc")
		for _, d := range dirs {
			pid, err := strconv.Atoi(d.Name())
			if err != nil {
				continue
			}
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if err != nil {
				continue
			}
			s := string(b)
			i := strings.LastIndexByte(s, ')')
			if i < 0 {
				continue
			}
			f := strings.Fields(s[i+1:]) // state ppid pgrp ...
			if len(f) > 2 && f[2] == strconv.Itoa(g) && f[0] != "Z" {
				left = append(left, fmt.Sprintf("%d %s", pid, f[0]))
			}
		}
		if len(left) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return strings.Join(left, ", ")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
