package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/locksuite/locksuite/backends/foreign"
	"github.com/locksuite/locksuite/suite"
	"github.com/locksuite/locksuite/suite/local"
)

// checkWorker is `locksuite check-worker --service S COMMAND...`: the
// worker protocol's own conformance (foreign.Check) with two clients of the
// worker, on a server of S the harness starts (or the one its variable
// names), in seconds; it names the first message that is wrong.
func checkWorker(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("locksuite check-worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	service := fs.String("service", "", "the lock `SERVICE` the worker's lock runs on: "+strings.Join(local.WorkerServices(), ", ")+"; started here, or taken from its variable (REDIS_URL, ...)")
	lease := fs.Duration("lease", time.Second, "the lease the workers are given: long enough for one holder's steps when the lock is not renewed")
	name := fs.String("name", "worker", "how the output and errors name the worker")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: locksuite check-worker --service SERVICE [--lease D] [--name N] COMMAND [ARG...]")
		fmt.Fprintln(stderr, "\nChecks a worker of the worker protocol (docs/protocol.md) in a few seconds: the handshake, an acquire and")
		fmt.Fprintln(stderr, "a release, a second client's acquire timing out, a second release, the fence increasing, a stopped holder's")
		fmt.Fprintln(stderr, "lease expiring and its stale release freeing nothing, cleanup and close. One COMMAND argument is run by /bin/sh.")
		fmt.Fprintln(stderr, "The flags go before COMMAND: whatever follows it is the worker's own.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{err.Error()}
	}
	switch {
	case fs.NArg() == 0:
		return &usageError{"check-worker needs the worker's command: locksuite check-worker --service redis python3 my_worker.py"}
	case *service == "":
		return &usageError{"check-worker needs --service: one of " + strings.Join(local.WorkerServices(), ", ")}
	case *lease <= 0:
		return &usageError{fmt.Sprintf("--lease %v: it must be positive", *lease)}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	env, err := local.Start(ctx, []string{*service})
	if err != nil {
		return err
	}
	defer env.Close()
	newLocker, err := env.Worker(*name, *service, workerCommand(fs.Args()))
	if err != nil {
		return &usageError{err.Error()}
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	key := "locksuite-check-worker-" + hex.EncodeToString(b[:])
	err = foreign.Check(ctx, func(ctx context.Context, n int) (*foreign.Locker, error) {
		l, err := newLocker(ctx, suite.Client{ID: n, Key: key, Lease: *lease, Dial: (&net.Dialer{}).DialContext})
		if err != nil {
			return nil, err
		}
		return l.(*foreign.Locker), nil
	}, stdout)
	if err != nil {
		return errFinding
	}
	return nil
}
