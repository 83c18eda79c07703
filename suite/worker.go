package suite

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"

	"github.com/locksuite/locksuite/harness/worker"
)

// target names a Config for its worker processes.
func target(c *Config) string { return fmt.Sprintf("%s/fenced=%v", c.Name, c.Fenced) }

// serveIfWorker runs this process as a chaos worker if it is one for cfg,
// and exits. It returns if the process is not a worker for cfg.
func serveIfWorker(cfg *Config) {
	spec, ok, err := worker.FromEnv()
	if !ok {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	if spec.Target != target(cfg) {
		return
	}
	ctx := context.Background()
	l, err := cfg.NewLocker(ctx, Client{ID: spec.ID, Key: spec.Key, Dial: directDial, Lease: spec.Lease, Endpoint: cfg.Endpoint})
	if err != nil {
		fmt.Fprintf(os.Stderr, "worker %d: NewLocker: %v\n", spec.ID, err)
		os.Exit(3)
	}
	s, err := cfg.NewStore(ctx, spec.Store, spec.Fenced)
	if err != nil {
		fmt.Fprintf(os.Stderr, "worker %d: NewStore: %v\n", spec.ID, err)
		os.Exit(3)
	}
	err = worker.Serve(spec, l, s)
	l.Close()
	if err != nil {
		fmt.Fprintf(os.Stderr, "worker %d: %v\n", spec.ID, err)
		os.Exit(3)
	}
	os.Exit(0)
}

// workerArgv is how to run this binary again as a worker: the same
// arguments, without go test's -test.paniconexit0 (a worker ends with
// os.Exit), and with -test.run narrowed to testName when it is known.
func workerArgv(testName string) []string {
	argv := []string{os.Args[0]}
	for _, a := range os.Args[1:] {
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
	return argv
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
