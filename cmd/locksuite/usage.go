package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/locksuite/locksuite/suite"
	"github.com/locksuite/locksuite/suite/local"
)

// usage is the text of `locksuite help`. The services, backends and
// variables it names are suite/local's table's (TestHelpNamesTheTable).
func usage() string {
	adapters := servicesOf(local.Names)
	var titles, vars []string
	for _, s := range servicesOf(slices.Concat(local.Names, local.WhenNamed)) {
		titles = append(titles, s.Title)
	}
	for _, s := range adapters {
		vars = append(vars, s.Variable)
	}
	return wrap("locksuite tells whether a distributed lock keeps the data it protects safe when its holder pauses past its lease: it stalls lock holders on purpose against real "+
		and(titles)+" servers and checks that every acknowledged write is in the protected counter exactly once.") + `

Usage:
  locksuite run [flags]     run the suite and print a result table
  locksuite sweep [flags]   lost updates over leases × pause lengths for one backend
  locksuite diff OLD NEW    what changed between two runs' --json rows (exit 1: kept → broken)
  locksuite merge A B ...   the matrix of a run split with --shard, from its shards' --json
  locksuite bench [flags]   latency, throughput, fairness and takeover time of each lock
  locksuite check-worker --service S COMMAND...
                            check a worker of a lock in any language (docs/protocol.md) in seconds
  locksuite help            show this text

` + wrap("Run 'locksuite run --help' or 'locksuite sweep --help' for their flags and defaults. By default, run runs every backend it can start or reach ("+
		strings.Join(local.Names, ", ")+"), every scenario, with fencing off and on; it starts its own servers on free loopback ports unless "+
		or(vars)+" name yours, and keeps the histories, timelines and servers' logs of broken runs in a directory it names. The lock libraries ("+
		strings.Join(local.Libraries, ", ")+"), the clusters ("+strings.Join(local.Clusters, ", ")+") and "+strings.Join(local.WhenNamed, ", ")+" run when named, and so do the lock libraries of other languages ("+strings.Join(local.Languages, ", ")+"; languages).") + `

Examples:
  locksuite run --backends etcd         every scenario on the embedded etcd (under a minute)
  locksuite run --scenarios deterministic-pause --repeat 20 --markdown r.md
  locksuite sweep --backend redis
  locksuite run --worker 'python3 my_worker.py' --service redis   every scenario on your lock's worker

Install: go install github.com/locksuite/locksuite/cmd/locksuite@latest

Exit status: 0 when every fenced configuration kept the counter invariant, every
baseline kept it and every control was caught; 1 when one did not (a finding);
2 for bad usage or when no backend could run.
`
}

// backendsHelp is the help of run's --backends.
func backendsHelp() string {
	var started, whenNamed []string
	for _, s := range servicesOf(local.Names) {
		started = append(started, s.Server)
	}
	for _, s := range servicesOf(local.WhenNamed) {
		whenNamed = append(whenNamed, s.Server+" or the cluster "+s.Variable+" names")
	}

	return "comma-separated backends: " + strings.Join(local.Names, ",") + " (all); lock libraries as they ship, started here when named: " +
		strings.Join(local.Libraries, ",") + " (libraries); each is started here (" + strings.Join(started, "; ") + ") or taken from " +
		strings.Join(local.Variables(), ", ") + "; clusters, started here when named (not by all): " + strings.Join(local.Clusters, ",") +
		"; on " + or(whenNamed) + ", when named: " + strings.Join(local.WhenNamed, ",") +
		"; durability settings of redis-server and nats-server for the crash scenarios (docs/crash.md), when named: " + strings.Join(local.Variants, ",") +
		"; through PgBouncer in front of Postgres, when named: " + strings.Join(local.Poolers, ",") +
		"; lock libraries of other languages through their workers (docs/protocol.md), when named: " + strings.Join(local.Languages, ",") + " (languages)"
}

// storeHelp is the help of run's --store.
func storeHelp() string {
	n := len(local.Stores)
	last := local.Stores[n-1]
	for _, s := range local.Services() {
		if s.Name == last {
			last += ", " + s.Server
		}
	}
	return fmt.Sprintf("counter store: %s (default: %s when it is among the backends' services, else %s)",
		or(local.Stores), or(local.Stores[:n-1]), last)
}

// Defaults per backend, for the help of the flags that override them.
func leaseHelp() string {
	return "lease for every backend (default per backend: " + perBackend(func(c suite.Config) string { return c.Lease.String() }) + ")"
}

func pauseHelp() string {
	return "chaos pause and stall length (default per backend: " + perBackend(func(c suite.Config) string { return c.Chaos.Pause.String() }) + ")"
}

func pausesHelp() string {
	return "process pauses per pause scenario (default per backend: " + perBackend(func(c suite.Config) string { return fmt.Sprint(c.Chaos.Pauses) }) + ")"
}

func chaosDurationHelp() string {
	return "how long chaos workers run (default per backend: " + perBackend(func(c suite.Config) string { return c.Chaos.Duration.String() }) +
		"; at least the pauses' schedule)"
}

// perBackend is a default of every backend of Names and WhenNamed, as
// local.Defaults gives it: "200ms for consul, postgres; 1s for etcd".
func perBackend(value func(suite.Config) string) string {
	var values []string
	by := map[string][]string{}
	for _, n := range slices.Concat(local.Names, local.WhenNamed) {
		c, err := local.Defaults(n)
		if err != nil {
			continue
		}
		v := value(c)
		if by[v] == nil {
			values = append(values, v)
		}
		by[v] = append(by[v], n)
	}
	var out []string
	for _, v := range values {
		out = append(out, v+" for "+strings.Join(by[v], ", "))
	}
	return strings.Join(out, "; ")
}

// servicesOf lists the services the backends names run on, each once, in
// the table's order.
func servicesOf(names []string) []local.Service {
	var out []local.Service
	for _, s := range local.Services() {
		for _, b := range s.Backends {
			if slices.Contains(names, b) {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// and joins "a", "b", "c" as "a, b and c"; or as "a, b or c".
func and(items []string) string { return join(items, " and ") }
func or(items []string) string  { return join(items, " or ") }

func join(items []string, last string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + last + items[len(items)-1]
}

// wrap breaks text into lines of at most 80 columns, at spaces.
func wrap(text string) string {
	var b strings.Builder
	n := 0
	for i, w := range strings.Fields(text) {
		switch {
		case i == 0:
		case n+1+len(w) > 80:
			b.WriteString("\n")
			n = 0
		default:
			b.WriteString(" ")
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}
