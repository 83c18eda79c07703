package suite

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/locksuite/locksuite/harness/worker"
)

// failT is a GinkgoTestingT that records Fail.
type failT struct{ failed bool }

func (f *failT) Fail() { f.failed = true }

// TestExecuteInWorker: in a chaos worker process, Execute serves (here: a
// worker whose Config is not among cfgs, which fails) and returns, with
// Results.Worker and the reason, having failed t; it neither runs the
// suite nor exits the process. Run, after it, serves nothing again and
// says so with ErrWorker.
func TestExecuteInWorker(t *testing.T) {
	t.Setenv(worker.EnvVar, `{"target":"other/fenced=false"}`)
	t.Cleanup(func() { served.done, served.err = false, nil })
	ft := &failT{}
	cfg := NewConfig()
	cfg.Name = "mine"
	res := Execute(ft, Options{}, cfg)
	if !res.Worker || res.Passed || !ft.failed || len(res.Rows) != 0 ||
		len(res.Unregistered) != 1 || !strings.Contains(res.Unregistered[0], `no Config named "other/fenced=false"`) {
		t.Fatalf("Execute in a worker = %+v, failed %v; want Worker, not Passed, failed, the reason", res, ft.failed)
	}
	if _, err := Run(t.Context(), cfg, Baseline); !errors.Is(err, ErrWorker) || !strings.Contains(err.Error(), "no Config named") {
		t.Errorf("Run after the worker served: %v, want ErrWorker with the worker's error", err)
	}
}

// TestCallerTest: the test whose goroutine calls, a subtest's too, which
// narrows a worker's -test.run; none outside a test's goroutine.
func TestCallerTest(t *testing.T) {
	if got := callerTest(); got != "TestCallerTest" {
		t.Errorf("callerTest() = %q", got)
	}
	t.Run("sub", func(t *testing.T) {
		if got := callerTest(); got != "TestCallerTest" {
			t.Errorf("in a subtest: callerTest() = %q", got)
		}
	})
	got := make(chan string)
	go func() { got <- callerTest() }()
	if g := <-got; g != "" {
		t.Errorf("in another goroutine: callerTest() = %q, want none", g)
	}
}

// TestWorkerArgvOutputs: a worker writes no profile or report over its
// coordinator's: their flags are left out, with their values.
func TestWorkerArgvOutputs(t *testing.T) {
	saved := os.Args
	defer func() { os.Args = saved }()
	os.Args = []string{"bin", "-test.v", "-test.cpuprofile", "cpu.out", "-test.coverprofile=c.out", "-ginkgo.junit-report=j.xml", "-test.run=X", "-test.paniconexit0"}
	got := workerArgv("TestY", false)
	want := []string{"bin", "-test.v", "-test.run=^TestY$"}
	if !slices.Equal(got, want) {
		t.Errorf("workerArgv = %q, want %q", got, want)
	}
}
