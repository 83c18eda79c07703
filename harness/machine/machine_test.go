package machine

import (
	"os/exec"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func clock() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}

// start runs argv as a child, ended when the test ends.
func start(t *testing.T, argv ...string) *exec.Cmd {
	t.Helper()
	c := exec.Command(argv[0], argv[1:]...)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	return c
}

// TestStopped: a process stopped (SIGSTOP) for 400 ms is stalled for about
// that long, in one stretch, and not at all in a skipped stretch.
func TestStopped(t *testing.T) {
	c := start(t, "sleep", "30")
	s := Watch(clock, c.Process.Pid)
	time.Sleep(100 * time.Millisecond)
	from := clock()
	c.Process.Signal(syscall.SIGSTOP)
	time.Sleep(400 * time.Millisecond)
	c.Process.Signal(syscall.SIGCONT)
	to := clock()
	time.Sleep(100 * time.Millisecond)
	s.Stop()
	iv := s.Intervals(c.Process.Pid)
	d, at := Largest(iv, nil)
	if d < 300*time.Millisecond || d > to-from+2*Every {
		t.Errorf("largest stall %v, want about 400ms", d)
	}
	if at < from-Every || at > from+2*Every {
		t.Errorf("the stall began %v after the stop, want about 0", at-from)
	}
	if got := Stalled(iv, 0, to+time.Second, func(a, b time.Duration) bool { return b > from && a < to }); got > 10*time.Millisecond {
		t.Errorf("with the stop's stretch skipped: stalled %v, want about 0", got)
	}
}

// TestRunQueue: two processes that always run, pinned to one CPU, each
// wait for it about half of the time: the run-queue wait is measured.
func TestRunQueue(t *testing.T) {
	var set unix.CPUSet
	set.Set(0)
	a := start(t, "sh", "-c", "while :; do :; done")
	b := start(t, "sh", "-c", "while :; do :; done")
	for _, c := range []*exec.Cmd{a, b} {
		if err := unix.SchedSetaffinity(c.Process.Pid, &set); err != nil {
			t.Skip("cannot pin to a CPU:", err)
		}
	}
	s := Watch(clock, a.Process.Pid)
	from := clock()
	time.Sleep(time.Second)
	s.Stop()
	got := Stalled(s.Intervals(a.Process.Pid), from, clock(), nil)
	if got < 300*time.Millisecond {
		t.Errorf("a process sharing one CPU with another busy one waited %v in 1s, want about 500ms", got)
	}
	t.Logf("waited %v of 1s", got)
}

// TestGone: a process that ended stops being sampled; one never seen has
// no intervals.
func TestGone(t *testing.T) {
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	s := Watch(clock, c.Process.Pid)
	time.Sleep(3 * Every)
	s.Stop()
	if iv := s.Intervals(c.Process.Pid); len(iv) != 0 {
		t.Errorf("an ended process has %d intervals", len(iv))
	}
}

// TestPressure: two readings compare to a share between 0 and 1.
func TestPressure(t *testing.T) {
	p0 := ReadPressure()
	time.Sleep(100 * time.Millisecond)
	if v := ReadPressure().Since(p0); v < 0 || v > 1 {
		t.Errorf("pressure %v, want within [0, 1]", v)
	}
	if p0.Kind() == "" {
		t.Error("no kind")
	}
}

// TestSelfLate: the sampling process's own stall is how late its sampler
// woke; a quiet test process is barely stalled.
func TestSelfLate(t *testing.T) {
	s := Watch(clock, self)
	time.Sleep(300 * time.Millisecond)
	s.Stop()
	iv := s.Intervals(self)
	if len(iv) < 5 {
		t.Fatalf("%d intervals in 300ms, want about 12", len(iv))
	}
	t.Logf("largest stall of this process: %v", func() time.Duration { d, _ := Largest(iv, nil); return d }())
}
