// Package roles is the table of the roles in which the harness runs its own
// binary again (a cluster member, a Kubernetes node's holder, a pod's
// supervisor), which harness/role's Serve dispatches. Each role is added by
// an init function of the package that starts processes in it, so a binary
// has the roles of the packages it links, and no other.
package roles

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
)

// role is one entry of the table: the variable that asks for it, and what
// serves it.
type role struct {
	env   string
	serve func(value string) int
}

var (
	mu    sync.Mutex
	table []role
	// dispatched: Dispatch was called in this process.
	dispatched atomic.Bool
)

// Add adds, from an init function, the role that the environment variable
// env asks for: serve gets the variable's value and returns the process's
// exit status.
func Add(env string, serve func(value string) int) {
	mu.Lock()
	defer mu.Unlock()
	table = append(table, role{env, serve})
}

// Dispatch serves the first role, in the order added, whose variable is
// set and not empty, and returns its exit status and true; 0 and false
// when no role's variable is set.
func Dispatch() (code int, served bool) {
	dispatched.Store(true)
	mu.Lock()
	t := table
	mu.Unlock()
	for _, r := range t {
		if v := os.Getenv(r.env); v != "" {
			return r.serve(v), true
		}
	}
	return 0, false
}

// Dispatched reports whether Dispatch was called in this process: a
// process that starts its own binary again in a role checks it first,
// since a binary whose main or TestMain does not dispatch would run its
// tests, or its command, again instead.
func Dispatched() bool { return dispatched.Load() }

// Member adds the role of a server's process (what names it in messages):
// its spec is the JSON of an S in the variable env, or in the file the
// variable names after an "@"; serve's result is the exit status (2 for a
// spec that cannot be read).
func Member[S any](env, what string, serve func(S) int) {
	Add(env, func(v string) int {
		b := []byte(v)
		if path, ok := strings.CutPrefix(v, "@"); ok {
			var err error
			if b, err = os.ReadFile(path); err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
				return 2
			}
		}
		var s S
		if err := json.Unmarshal(b, &s); err != nil {
			fmt.Fprintf(os.Stderr, "%s member: bad %s: %v\n", what, env, err)
			return 2
		}
		return serve(s)
	})
}
