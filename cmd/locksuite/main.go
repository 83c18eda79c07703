// Command locksuite runs the conformance suite against the lock backends it
// can start or reach, with fencing off and on, and prints one row per result.
//
//	locksuite run [--backends etcd,redis,...] [--scenarios ...] [--fencing off,on] [--json FILE]
//
// It is a thin layer over suite.Execute and suite/local: the specs, the
// servers and the verdicts are the same as in `go test ./suite/`.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/locksuite/locksuite/harness/role"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
)

func main() {
	// A process this binary was run again in a role of serves it
	// (harness/role): a cluster member, a Kubernetes node, the PID 1 of a
	// worker's pod (locksuite run --kubernetes), which supervises the
	// worker, this binary again, or of a lock service's pod, which
	// supervises the server (and the init container of Redis's pod, which
	// copies this binary into it).
	if code, ok := role.Serve(); ok {
		os.Exit(code)
	}
	// go-redis logs every Sentinel failover it follows on stderr, which
	// carries the CLI's own messages; the rows report the failover.
	goredis.SetLogger(&logging.VoidLogger{})
	os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr))
}

// usageError is bad input: exit status 2.
type usageError struct{ msg string }

func (u *usageError) Error() string { return u.msg }

func cli(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return 2
	}
	switch args[0] {
	case "run", "sweep", "diff", "merge", "bench", "check-worker":
		var err error
		switch args[0] {
		case "run":
			err = run(args[1:], stdout, stderr)
		case "sweep":
			err = sweep(args[1:], stdout, stderr)
		case "merge":
			err = merge(args[1:], stdout, stderr)
		case "bench":
			err = benchCmd(args[1:], stdout, stderr)
		case "check-worker":
			err = checkWorker(args[1:], stdout, stderr)
		default:
			err = diffCmd(args[1:], stdout, stderr)
		}
		var ue *usageError
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.As(err, &ue):
			fmt.Fprintln(stderr, "locksuite:", err)
			return 2
		case errors.Is(err, errFinding):
			return 1
		default:
			fmt.Fprintln(stderr, "locksuite:", err)
			return 2
		}
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage())
		return 0
	default:
		fmt.Fprintf(stderr, "locksuite: unknown command %q: use 'locksuite run' (see 'locksuite help')\n", args[0])
		return 2
	}
}
