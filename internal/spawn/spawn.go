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
//
// StartInNetNS starts a child in another network namespace from that same
// thread: a child inherits the namespaces of the thread that forks it.
// Pipes makes the two pipes of a child's extra descriptors or output.
package spawn

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

type request struct {
	cmd   *exec.Cmd
	netns int // a network namespace's file descriptor, or -1: the spawner's own
	err   chan error
}

var (
	once     sync.Once
	requests = make(chan request)
)

// spawner runs on a thread that is never released: it never unlocks and
// never returns.
func spawner() {
	runtime.LockOSThread()
	// home is the thread's own network namespace, to return to after a
	// child started in another one.
	home, homeErr := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	for r := range requests {
		if r.netns < 0 {
			r.err <- r.cmd.Start()
			continue
		}
		if homeErr != nil {
			r.err <- fmt.Errorf("spawn: open this thread's network namespace: %w", homeErr)
			continue
		}
		if err := unix.Setns(r.netns, unix.CLONE_NEWNET); err != nil {
			r.err <- fmt.Errorf("spawn: enter network namespace: %w", err)
			continue
		}
		err := r.cmd.Start()
		if back := unix.Setns(home, unix.CLONE_NEWNET); back != nil {
			// The thread cannot exit (its children's Pdeathsig would fire)
			// and must not start the next child in the wrong namespace.
			panic(fmt.Sprintf("spawn: cannot return the spawning thread to its network namespace: %v", back))
		}
		r.err <- err
	}
}

// Pipes returns the ends of two pipes (os.Pipe) for a child's descriptors:
// r1 reads what w1 writes, r2 what w2 writes. When one cannot be made,
// none is left open.
func Pipes() (r1, w1, r2, w2 *os.File, err error) {
	if r1, w1, err = os.Pipe(); err != nil {
		return nil, nil, nil, nil, err
	}
	if r2, w2, err = os.Pipe(); err != nil {
		r1.Close()
		w1.Close()
		return nil, nil, nil, nil, err
	}
	return r1, w1, r2, w2, nil
}

// Start is cmd.Start from the spawning thread. If cmd.SysProcAttr has no
// Pdeathsig, it gets SIGKILL: the child dies with this process.
func Start(cmd *exec.Cmd) error {
	return start(cmd, -1)
}

// StartInNetNS is Start with the child in the network namespace that the
// open file descriptor netns refers to (/proc/<pid>/ns/net, or a handle
// from unshare). The spawning thread enters that namespace, forks and
// returns to its own before it serves the next request, so Start is not
// affected. The caller keeps netns open until StartInNetNS returns.
func StartInNetNS(cmd *exec.Cmd, netns int) error {
	if netns < 0 {
		return fmt.Errorf("spawn: invalid network namespace descriptor %d", netns)
	}
	return start(cmd, netns)
}

func start(cmd *exec.Cmd, netns int) error {
	once.Do(func() { go spawner() })
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if cmd.SysProcAttr.Pdeathsig == 0 {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	r := request{cmd, netns, make(chan error, 1)}
	requests <- r
	return <-r.err
}
