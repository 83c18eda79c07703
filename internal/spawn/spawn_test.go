package spawn

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// startFromDyingThread starts `sleep 30` from a goroutine that locks its
// OS thread and exits, so that the runtime retires the thread, and reports
// whether the child was still running a second later.
func startFromDyingThread(t *testing.T, start func(*exec.Cmd) error) (alive bool) {
	t.Helper()
	started := make(chan *exec.Cmd)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		cmd := exec.Command("sleep", "30")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := start(cmd); err != nil {
			t.Error(err)
			started <- nil
			return
		}
		started <- cmd
	}()
	cmd := <-started
	if cmd == nil {
		t.FailNow()
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
	}()
	select {
	case <-exited:
		return false
	case <-time.After(time.Second):
		return true
	}
}

// TestChildOutlivesItsStartersThread: a child started through Start keeps
// running when the thread of the goroutine that asked for it is gone; one
// started directly from that goroutine is killed (the flake this package
// fixes), which shows the test can fail.
func TestChildOutlivesItsStartersThread(t *testing.T) {
	if !startFromDyingThread(t, Start) {
		t.Error("a child started with spawn.Start died with the thread of the goroutine that asked for it")
	}
	if startFromDyingThread(t, (*exec.Cmd).Start) {
		t.Log("control: the directly started child survived its thread's exit (the kernel or runtime kept the thread); the fix is untested here")
	} else {
		t.Log("control: a child started directly from the exiting thread was killed by its Pdeathsig")
	}
}
