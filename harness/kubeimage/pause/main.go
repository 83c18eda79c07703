// Command pause is the pause image of the harness's Kubernetes cluster: the
// process that holds a pod's namespaces. It sleeps until SIGTERM or SIGINT
// and then exits 0. As PID 1 of a pod that shares its PID namespace it also
// reaps the orphans that are reparented to it. It is built statically
// (CGO_ENABLED=0) and is the only file of its image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			return
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
