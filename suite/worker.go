package suite

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/onsi/ginkgo/v2"

	"github.com/locksuite/locksuite/harness/worker"
)

// target names a Config for its worker processes.
func target(c *Config) string { return fmt.Sprintf("%s/fenced=%v", c.Name, c.Fenced) }

// ErrWorker is what an entry point returns in a chaos worker process (see
// harness/worker) once the process has served as the worker: Run's error,
// and Execute's Results.Worker. The process has nothing more to do, and no
// entry point serves again in it. When the worker failed, the error wraps
// the worker's own too (its coordinator sees the failure in the worker's
// events): an error that is ErrWorker itself is a worker that ran to its
// end.
var ErrWorker = errors.New("suite: this process is a chaos worker, and has served")

// served is this process's worker, once served (serveWorker).
var served struct {
	sync.Mutex
	done bool
	err  error
}

// serveWorker serves, in a chaos worker process (harness/worker's EnvVar),
// as the worker of the Config among cfgs that the process was started for,
// once in the process. It returns whether the process is a worker that has
// served, now or in an earlier call, and the worker's error: its spec
// could not be read, its Locker, its Store or its loop failed, or (with
// mustMatch) its Config is not among cfgs. It returns false, nil in a
// process that is no worker, and (without mustMatch: GinkgoTest is called
// once per Config) in a worker for another Config that has not served yet.
func serveWorker(mustMatch bool, cfgs ...*Config) (bool, error) {
	spec, ok, err := worker.FromEnv()
	if !ok {
		return false, nil
	}
	served.Lock()
	defer served.Unlock()
	if served.done {
		return true, served.err
	}
	i := slices.IndexFunc(cfgs, func(c *Config) bool { return target(c) == spec.Target })
	if err == nil && i < 0 && !mustMatch {
		return false, nil
	}
	served.done = true // before the worker runs: one that panics is not served again
	switch {
	case err != nil:
	case i >= 0:
		err = runWorker(spec, cfgs[i])
	default:
		err = fmt.Errorf("locksuite worker: no Config named %q in this run", spec.Target)
	}
	served.err = err
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	return true, err
}

// workerError is an entry point's error once this process has served as a
// worker whose error was err: ErrWorker, wrapping err if not nil.
func workerError(err error) error {
	if err == nil {
		return ErrWorker
	}
	return fmt.Errorf("%w: %w", ErrWorker, err)
}

// runWorker is the worker of spec: cfg's Locker and Store, and
// worker.Serve's loop.
func runWorker(spec worker.Spec, cfg *Config) error {
	ctx := context.Background()
	l, err := cfg.NewLocker(ctx, Client{ID: spec.ID, Key: spec.Key, Dial: directDial, Lease: spec.Lease, Endpoint: cfg.Endpoint})
	if err != nil {
		return fmt.Errorf("worker %d: NewLocker: %w", spec.ID, err)
	}
	defer l.Close()
	s, err := cfg.NewStore(ctx, spec.Store, spec.Fenced)
	if err != nil {
		return fmt.Errorf("worker %d: NewStore: %w", spec.ID, err)
	}
	if err := worker.Serve(spec, l, s); err != nil {
		return fmt.Errorf("worker %d: %w", spec.ID, err)
	}
	return nil
}

// outputFlags are the flags of go test and Ginkgo that make a process
// write a file at its end (a profile, a trace, a report): a worker, which
// ends as its test does, is run without them, so that it writes nothing
// over its coordinator's.
var outputFlags = []string{
	"-test.coverprofile", "-test.cpuprofile", "-test.memprofile", "-test.blockprofile", "-test.mutexprofile", "-test.trace",
	"-ginkgo.junit-report", "-ginkgo.json-report", "-ginkgo.teamcity-report",
}

// workerArgv is how to run this binary again as a worker: the same
// arguments, without go test's -test.paniconexit0 and the outputFlags,
// and with -test.run narrowed to testName when it is known. With dryRun
// (a test binary's workers whose test is not known: GinkgoTest's and
// Run's), unless this process is one of Ginkgo's parallel processes, it
// adds -ginkgo.dry-run: a worker serves while Ginkgo builds its tree
// (GinkgoTest), and its RunSpecs then runs no spec.
func workerArgv(testName string, dryRun bool) []string {
	argv := []string{os.Args[0]}
	skipValue := false
	for _, a := range os.Args[1:] {
		if skipValue {
			skipValue = false
			continue
		}
		name, _, hasValue := strings.Cut(a, "=")
		if slices.Contains(outputFlags, name) {
			skipValue = !hasValue
			continue
		}
		if strings.HasPrefix(a, "-test.paniconexit0") || (testName != "" && strings.HasPrefix(a, "-test.run")) {
			continue
		}
		argv = append(argv, a)
	}
	if testName != "" {
		parts := strings.Split(testName, "/")
		for i, p := range parts {
			parts[i] = "^" + regexp.QuoteMeta(p) + "$"
		}
		argv = append(argv, "-test.run="+strings.Join(parts, "/"))
	}
	if sc, _ := ginkgo.GinkgoConfiguration(); dryRun && sc.ParallelTotal <= 1 {
		argv = append(argv, "-ginkgo.dry-run")
	}
	return argv
}

// testArgv is how to run this test binary again as a worker of an entry
// point that has no t (Run, GinkgoTest): -test.run narrowed to the
// top-level test whose goroutine calls it (callerTest), when there is one,
// and -ginkgo.dry-run (workerArgv); nil in a binary that is not a test's,
// whose workers run it with its own arguments (workerArgv, in table.go).
func testArgv() []string {
	if !testing.Testing() {
		return nil
	}
	return workerArgv(callerTest(), true)
}

// callerTest is the name of the top-level test (TestX) that the calling
// goroutine runs, or one of its subtests, read from the goroutine's stack;
// "" outside a test's goroutine.
func callerTest() string {
	pcs := make([]uintptr, 512)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for prev := ""; ; {
		f, more := frames.Next()
		if f.Function == "testing.tRunner" {
			_, name, _ := strings.Cut(prev[strings.LastIndex(prev, "/")+1:], ".") // TestX.func1
			name, _, _ = strings.Cut(name, ".")
			if !strings.HasPrefix(name, "Test") {
				return ""
			}
			return name
		}
		if !more {
			return ""
		}
		prev = f.Function
	}
}

func randomSeed() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:]) >> 1
}

// directDial dials without a fault path: a worker's Locker.
func directDial(ctx context.Context, network, address string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, network, address)
}
