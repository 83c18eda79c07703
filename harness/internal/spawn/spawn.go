// Package spawn starts the harness's child processes (servers, workers) so
// that their parent-death signal means what it says.
//
// Linux delivers a child's Pdeathsig when the *thread* that forked it exits,
// not the process: a child started from a goroutine whose OS thread the Go
// runtime later retires (a goroutine that exits while locked to its thread
// takes the thread with it) is killed while the coordinator runs on. That is
// how a redis-server once refused connections mid-run. Start forks every
// child from one goroutine locked to its own OS thread for the life of the
// process, so the signal fires only when the process itself dies.
package spawn

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

type request struct {
	cmd *exec.Cmd
	err chan error
}

var (
	once     sync.Once
	requests = make(chan request)
)

// spawner runs on a thread that is never released: it never unlocks and
// never returns.
func spawner() {
	runtime.LockOSThread()
	for r := range requests {
		r.err <- r.cmd.Start()
	}
}

// Start is cmd.Start from the spawning thread. If cmd.SysProcAttr has no
// Pdeathsig, it gets SIGKILL: the child dies with this process.
func Start(cmd *exec.Cmd) error {
	once.Do(func() { go spawner() })
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if cmd.SysProcAttr.Pdeathsig == 0 {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	r := request{cmd, make(chan error, 1)}
	requests <- r
	return <-r.err
}
