// Package role dispatches the roles in which locksuite runs its own binary
// again. The harness re-runs the current binary (a user's go test binary,
// or the locksuite CLI) rather than a separately built program, so that a
// helper process needs no build step, no Go toolchain and no source tree,
// and runs exactly the code its parent was built with (harness/services/etcd's
// cluster.go says more). Such a process must become its role before it
// reaches the tests or the command, so a binary that starts them calls
// Serve first:
//
//	func TestMain(m *testing.M) { os.Exit(role.Main(m)) }
//
//	func main() {
//		if code, ok := role.Serve(); ok {
//			os.Exit(code)
//		}
//		...
//	}
//
// The roles, each asked for by an environment variable that the parent
// sets, and each known to a binary that links the package starting it:
//
//   - an etcd or NATS cluster member, or a crashable single server
//     (harness/services/etcd, harness/services/nats);
//   - the holder of a Kubernetes node (harness/services/kube/kubecluster);
//   - a chaos worker's supervisor, the PID 1 of its pod (harness/worker,
//     locksuite run --kubernetes);
//   - a lock service's supervisor, the PID 1 of its pod, and its init
//     container's copy of the binary (harness/kuberun).
//
// A process that starts one of the first two refuses to, with an error
// naming this package, when Serve was not called in it: without the call,
// the helper would run the tests again. The chaos worker (harness/worker's
// LOCKSUITE_WORKER) is not among the roles: it needs the Config it tests,
// which only the suite's entry points have, so suite.Test, Execute, Run and
// GinkgoTest serve it and return (see package suite); Serve returns false
// in it. No function here or in the harness exits the process: Serve
// returns the status, and the caller exits with it.
package role

import "github.com/locksuite/locksuite/internal/roles"

// Serve runs this process in the role its environment asks for, until the
// role ends, and returns the role's exit status and true; it returns 0 and
// false at once in a process that has no role (the tests, the command, a
// chaos worker). Call it first in main and in TestMain, before flags are
// parsed or anything is started. A role's process also gets the exit
// status 2 for a variable it cannot read.
func Serve() (code int, served bool) { return roles.Dispatch() }

// Main is a TestMain's body: the exit status of the role Serve served, or
// else of m.Run().
//
//	func TestMain(m *testing.M) { os.Exit(role.Main(m)) }
func Main(m interface{ Run() int }) int {
	if code, ok := Serve(); ok {
		return code
	}
	return m.Run()
}
