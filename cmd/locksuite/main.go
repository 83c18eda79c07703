// Command locksuite runs the conformance suite against the lock backends it
// can start or reach, with fencing off and on, and prints one row per result.
//
//	locksuite run [--backends etcd,redis,...] [--scenarios ...] [--fencing off,on] [--json FILE]
//
// It is a thin layer over suite.GinkgoTest and suite/local: the specs, the
// servers and the verdicts are the same as in `go test ./suite/`.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
)

const usage = `locksuite tells whether a distributed lock keeps the data it protects safe
when its holder pauses past its lease: it stalls lock holders on purpose against
real Redis, etcd, Consul and Postgres servers and checks that every acknowledged
write is in the protected counter exactly once.

Usage:
  locksuite run [flags]     run the suite and print a result table
  locksuite sweep [flags]   lost updates over leases × pause lengths for one backend
  locksuite diff OLD NEW    what changed between two runs' --json rows (exit 1: kept → broken)
  locksuite merge A B ...   the matrix of a run split with --shard, from its shards' --json
  locksuite help            show this text

Run 'locksuite run --help' or 'locksuite sweep --help' for their flags and
defaults. By default, run runs every backend it can start or reach (consul,
etcd, postgres, redis), every scenario, with fencing off and on; it starts its
own servers on free loopback ports unless REDIS_URL, DATABASE_URL/PG*,
ETCDCTL_ENDPOINTS or CONSUL_HTTP_ADDR name yours, and keeps the histories,
timelines and servers' logs of broken runs in a directory it names.

Examples:
  locksuite run --backends etcd         every scenario on the embedded etcd (about 2 minutes)
  locksuite run --scenarios deterministic-pause --repeat 20 --markdown r.md
  locksuite sweep --backend redis

Install: go install github.com/locksuite/locksuite/cmd/locksuite@latest

Exit status: 0 when every fenced configuration kept the counter invariant, every
baseline kept it and every control was caught; 1 when one did not (a finding);
2 for bad usage or when no backend could run.
`

func main() {
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
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "run", "sweep", "diff", "merge":
		var err error
		switch args[0] {
		case "run":
			err = run(args[1:], stdout, stderr)
		case "sweep":
			err = sweep(args[1:], stdout, stderr)
		case "merge":
			err = merge(args[1:], stdout, stderr)
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
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "locksuite: unknown command %q: use 'locksuite run' (see 'locksuite help')\n", args[0])
		return 2
	}
}
