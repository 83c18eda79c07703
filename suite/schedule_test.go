package suite

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/traffic"
)

// gate is a job that records when it runs and ends when released.
type gate struct {
	name    string
	release chan struct{}
	log     *runLog
}

type runLog struct {
	mu      sync.Mutex
	running map[string]bool
	max     int                 // most jobs at once
	beside  map[string][]string // what ran beside each job, as it started
	order   []string            // the order jobs started
}

func newRunLog() *runLog { return &runLog{running: map[string]bool{}, beside: map[string][]string{}} }

func (l *runLog) job(name string) (*gate, func(context.Context) (report.Row, error)) {
	g := &gate{name: name, release: make(chan struct{}), log: l}
	return g, func(ctx context.Context) (report.Row, error) {
		l.mu.Lock()
		for n := range l.running {
			l.beside[name] = append(l.beside[name], n)
			l.beside[n] = append(l.beside[n], name)
		}
		l.running[name] = true
		l.order = append(l.order, name)
		l.max = max(l.max, len(l.running))
		l.mu.Unlock()
		defer func() {
			l.mu.Lock()
			delete(l.running, name)
			l.mu.Unlock()
		}()
		select {
		case <-g.release:
			return report.Row{Scenario: name, Verdict: report.Kept}, nil
		case <-ctx.Done():
			return report.Row{}, ctx.Err()
		}
	}
}

type jobSpec struct {
	name     string
	class    class
	estimate time.Duration
}

// add queues a gated job on s for each spec.
func (l *runLog) add(s *scheduler, specs ...jobSpec) (gates []*gate, jobs []*job) {
	for _, j := range specs {
		g, run := l.job(j.name)
		gates = append(gates, g)
		jobs = append(jobs, s.add(run, j.class, j.estimate, []string{j.name}, nil))
	}
	return gates, jobs
}

// TestScheduler: at most parallel jobs at once; an exclusive job alone,
// and first; the others longest first; a spec that waits for a job not
// started moves it ahead; a cancelled wait cancels its job; a panic is an
// error of the job; a job Ginkgo would not run, or whose result a spec
// already took, runs in the spec.
func TestScheduler(t *testing.T) {
	l := newRunLog()
	s := newScheduler(2, types.SuiteConfig{})
	defer s.stop()
	gates, jobs := l.add(s, jobSpec{"short", waits, time.Second}, jobSpec{"long", waits, 10 * time.Second}, jobSpec{"stall", exclusive, time.Second},
		jobSpec{"middle", waits, 5 * time.Second}, jobSpec{"last", waits, time.Millisecond})
	// The spec of "last" waits first: it moves ahead of the others that are
	// not exclusive, behind the exclusive one.
	last := make(chan error, 1)
	go func() { _, err := s.await(context.Background(), jobs[4]); last <- err }()
	started := func(n int) func() bool {
		return func() bool { l.mu.Lock(); defer l.mu.Unlock(); return len(l.order) >= n }
	}
	waitUntil(t, started(1))
	close(gates[2].release) // stall, alone; then last and long
	waitUntil(t, started(3))
	close(gates[4].release) // last; then middle
	if err := <-last; err != nil {
		t.Errorf("last: %v", err)
	}
	waitUntil(t, started(4))
	close(gates[1].release) // long; then short
	waitUntil(t, started(5))
	close(gates[3].release)
	close(gates[0].release)
	for _, i := range []int{0, 1, 2, 3} {
		if _, err := s.await(context.Background(), jobs[i]); err != nil {
			t.Errorf("%s: %v", gates[i].name, err)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// last and long start together, once stall is over.
	if len(l.order) != 5 || l.order[0] != "stall" || !slices.Equal(sorted(l.order[1:3]), []string{"last", "long"}) || l.order[3] != "middle" || l.order[4] != "short" {
		t.Errorf("started in the order %v, want stall, then last and long, middle, short", l.order)
	}
	if l.max > 2 {
		t.Errorf("%d jobs ran at once, parallel is 2", l.max)
	}
	if len(l.beside["stall"]) != 0 {
		t.Errorf("the exclusive job ran beside %v", l.beside["stall"])
	}
}

// TestSchedulerBusy: busy jobs run at most busySlots at once; a job that
// waits starts in a free slot ahead of a busy one held back.
func TestSchedulerBusy(t *testing.T) {
	l := newRunLog()
	s := newScheduler(3, types.SuiteConfig{})
	s.busySlots = 1
	defer s.stop()
	gates, jobs := l.add(s, jobSpec{"chaos1", busy, 10 * time.Second}, jobSpec{"chaos2", busy, 9 * time.Second}, jobSpec{"lease", waits, time.Second})
	errs := make(chan error, len(jobs))
	for _, j := range jobs {
		go func() { _, err := s.await(context.Background(), j); errs <- err }()
	}
	started := func(n int) func() bool {
		return func() bool { l.mu.Lock(); defer l.mu.Unlock(); return len(l.order) >= n }
	}
	waitUntil(t, started(2))
	time.Sleep(50 * time.Millisecond) // a third start, if the bound failed
	l.mu.Lock()
	first := sorted(l.order)
	l.mu.Unlock()
	// The awaits promote their jobs in an order of their own: whichever
	// busy job started, its end lets the other start.
	busyFirst, busyNext := 0, 1
	if slices.Contains(first, "chaos2") {
		busyFirst, busyNext = 1, 0
	}
	close(gates[busyFirst].release)
	waitUntil(t, started(3))
	close(gates[busyNext].release)
	close(gates[2].release)
	for range jobs {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(first) != 2 || !slices.Contains(first, "lease") || !slices.Contains(first, gates[busyFirst].name) || len(l.order) != 3 || l.order[2] != gates[busyNext].name {
		t.Errorf("started %v first, then %v; want a busy job and lease, then the other busy job", first, l.order[len(first):])
	}
	if slices.Contains(l.beside["chaos1"], "chaos2") {
		t.Errorf("the two busy jobs ran at once, busySlots is 1")
	}
}

// TestSchedulerCancelAndPanic: a wait cancelled by its spec cancels its
// job and returns the context's error; a job that panics returns a
// traffic.PanicError; a second wait for the same job (Ginkgo's repeat)
// runs it anew, in the spec.
func TestSchedulerCancelAndPanic(t *testing.T) {
	l := newRunLog()
	s := newScheduler(2, types.SuiteConfig{})
	defer s.stop()
	_, hang := l.job("hang")
	hung := s.add(hang, waits, time.Second, nil, nil)
	boom := s.add(func(context.Context) (report.Row, error) { panic("boom") }, waits, time.Second, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := s.await(ctx, hung); done <- err }()
	waitUntil(t, func() bool { l.mu.Lock(); defer l.mu.Unlock(); return l.running["hang"] })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled wait: %v", err)
	}
	var pe *traffic.PanicError
	if _, err := s.await(context.Background(), boom); !errors.As(err, &pe) {
		t.Errorf("panicking job: %v, want a traffic.PanicError", err)
	}
	if _, err := s.await(context.Background(), boom); !errors.As(err, &pe) {
		t.Errorf("a second wait: %v, want the job run again in the spec", err)
	}
}

// TestWillRun: the scheduler runs ahead only the specs Ginkgo will run, by
// its label filter and focus and skip strings.
func TestWillRun(t *testing.T) {
	for _, tc := range []struct {
		sc     types.SuiteConfig
		labels []string
		want   bool
	}{
		{types.SuiteConfig{}, []string{"redis"}, true},
		{types.SuiteConfig{LabelFilter: "etcd"}, []string{"redis", "baseline"}, false},
		{types.SuiteConfig{LabelFilter: "redis && !chaos"}, []string{"redis", "baseline"}, true},
		{types.SuiteConfig{FocusStrings: []string{"etcd lock"}}, []string{"redis"}, false},
		{types.SuiteConfig{FocusStrings: []string{"redis lock"}}, []string{"redis"}, true},
		{types.SuiteConfig{SkipStrings: []string{"^locksuite redis"}}, []string{"redis"}, false},
	} {
		if got := willRun(tc.sc, []string{"redis lock, unfenced", "keeps the counter"}, tc.labels); got != tc.want {
			t.Errorf("%+v, labels %v: %v, want %v", tc.sc, tc.labels, got, tc.want)
		}
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting")
		}
	}
}

func sorted(a []string) []string {
	b := append([]string(nil), a...)
	slices.Sort(b)
	return b
}
