package foreign

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
)

// The reaper is a small shell process, one per process that starts workers,
// that outlives it: it is told each worker's process group as it starts
// ("+PGID") and ends ("-PGID"), and when its standard input ends (this
// process exited, or was killed: the kernel closes the pipe either way) it
// continues and kills every group still listed. So a SIGKILL of the suite
// leaves no worker behind, stopped or running, nor any child a worker
// forked. Pdeathsig alone would kill only the worker itself, and a stopped
// orphaned group is only sent SIGHUP.
//
// It leads a process group of its own, so that neither a SIGSTOP of a
// chaos worker's group nor the terminal's SIGINT reaches it.
const reaperScript = `trap '' INT HUP TERM
set --
while read -r op g; do
  case $op in
    +) set -- "$@" "$g" ;;
    -) keep=""; for x in "$@"; do [ "$x" = "$g" ] || keep="$keep $x"; done; set -- $keep ;;
  esac
done
for g in "$@"; do kill -CONT "-$g" 2>/dev/null; kill -KILL "-$g" 2>/dev/null; done
`

var reaper struct {
	once sync.Once
	mu   sync.Mutex
	w    io.WriteCloser // nil when the reaper could not start
	err  error
}

// startReaper starts the reaper once.
func startReaper() {
	reaper.once.Do(func() {
		cmd := exec.Command("/bin/sh", "-c", reaperScript)
		w, err := cmd.StdinPipe()
		if err != nil {
			reaper.err = err
			return
		}
		// Its own group, and no parent-death signal: it must outlive us.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		devnull, _ := os.Open(os.DevNull)
		cmd.Stdout, cmd.Stderr = devnull, devnull
		if err := cmd.Start(); err != nil {
			reaper.err = fmt.Errorf("foreign: start the reaper (/bin/sh): %w", err)
			return
		}
		if devnull != nil {
			devnull.Close()
		}
		go func() { _ = cmd.Wait() }()
		reaper.w = w
	})
}

// reap lists process group g with the reaper.
func reap(g int) { tellReaper('+', g) }

// unreap takes g off the reaper's list.
func unreap(g int) { tellReaper('-', g) }

func tellReaper(op byte, g int) {
	startReaper()
	reaper.mu.Lock()
	defer reaper.mu.Unlock()
	if reaper.w != nil {
		_, _ = fmt.Fprintf(reaper.w, "%c %d\n", op, g)
	}
}
