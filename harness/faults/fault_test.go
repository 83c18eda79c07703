package faults

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLogStrikeAndHeal: a fault struck through a Log is in place until its
// heal, the heal is idempotent, and the span records where, what and when.
func TestLogStrikeAndHeal(t *testing.T) {
	ctx := context.Background()
	p := NewPath()
	defer p.Close()
	c, err := p.Dial(ctx, "tcp", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	clock := time.Now()
	log := NewLog(func() time.Duration { return time.Since(clock) })
	f := &Partition{Path: p, Lane: 0, Name: "A"}
	if err := f.Applies(ctx); err != nil {
		t.Fatalf("Applies on a dialled path: %v", err)
	}
	heal, err := log.Strike(ctx, f, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := ended(c); err != nil {
		t.Fatalf("the cut did not end the connection: %v", err)
	}
	if err := heal(); err != nil {
		t.Fatal(err)
	}
	end := log.Spans()[0].End
	if err := heal(); err != nil || log.Spans()[0].End != end {
		t.Fatalf("a second heal: %v, end %v then %v: it must do nothing", err, end, log.Spans()[0].End)
	}
	c2, err := p.Dial(ctx, "tcp", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if got, err := roundTrip(c2, "ok"); err != nil || got != "ok" {
		t.Fatalf("after the heal: %q, %v", got, err)
	}
	spans := log.Spans()
	if len(spans) != 1 || spans[0].Kind != "cut" || spans[0].Lane != 0 || !spans[0].Held || spans[0].End < spans[0].Start {
		t.Fatalf("spans %+v, want one cut of lane 0, held, ending after it starts", spans)
	}
	if got := log.Schedule(0); !strings.HasPrefix(got, "cut A@") || !strings.HasSuffix(got, "*") {
		t.Fatalf("schedule %q", got)
	}
}

// TestHealAllContinuesAStoppedProcess: whatever the run does, HealAll
// continues a process a Stop left stopped (here the test's own process
// group is not touched: a child sleep is).
func TestHealAllContinuesAStoppedProcess(t *testing.T) {
	proc, err := os.StartProcess("/bin/sleep", []string{"sleep", "30"}, &os.ProcAttr{Sys: newGroup()})
	if err != nil {
		t.Fatal(err)
	}
	defer proc.Kill()
	g := Group(proc.Pid)
	log := NewLog(func() time.Duration { return 0 })
	if _, err := log.Strike(context.Background(), &Stop{Proc: g, Lane: 0, Kind: "sigstop", What: "w0"}, false); err != nil {
		t.Fatal(err)
	}
	if s := procState(t, proc.Pid); s != "T" {
		t.Fatalf("state %q after Stop, want T (stopped)", s)
	}
	if err := log.HealAll(); err != nil {
		t.Fatal(err)
	}
	if s := procState(t, proc.Pid); s == "T" {
		t.Fatalf("still stopped after HealAll")
	}
}

// TestNotApplicable: a fault that does not apply says why, as a skip.
func TestNotApplicable(t *testing.T) {
	err := (&Partition{Path: NewPath(), Name: "A"}).Applies(context.Background())
	if !errors.Is(err, ErrNotApplicable) || err.Error() != NoDial {
		t.Fatalf("Applies on an unused path: %v", err)
	}
	if err := (&ServerStop{}).Applies(context.Background()); !errors.Is(err, ErrNotApplicable) {
		t.Fatalf("ServerStop without a service: %v", err)
	}
}

func newGroup() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// procState is pid's state letter in /proc (T: stopped), once it has
// settled: signals are delivered asynchronously.
func procState(t *testing.T, pid int) string {
	t.Helper()
	var last string
	for range 200 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if f[0] == last {
			return last
		}
		last = f[0]
		time.Sleep(10 * time.Millisecond)
	}
	return last
}
