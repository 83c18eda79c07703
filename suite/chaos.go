package suite

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/locksuite/locksuite/harness/checker"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/harness/worker"
)

// Chaos scenario names. Each runs Chaos.Workers worker processes for
// Chaos.Duration; they differ in the fault.
const (
	// ChaosNone: no fault. The baseline of the chaos table.
	ChaosNone = "chaos-none"
	// PauseRandom: the guide's chaos script: every Interval, SIGSTOP a
	// random worker for Pause, then SIGCONT; Pauses times.
	PauseRandom = "pause-random"
	// PauseTargeted: the same, but the victim is the worker holding the
	// lock, stopped after it has read: every pause lands inside a critical
	// section, between its read and its write.
	PauseTargeted = "pause-targeted"
	// StallInSection: every StallEvery-th critical section stops its whole
	// worker process for Pause before its write, renewals included (the
	// guide's blocking sleep on the event loop).
	StallInSection = "stall-in-section"
	// StallGoroutine: the same sections sleep Pause in the holder's
	// goroutine only; background renewal goes on.
	StallGoroutine = "stall-goroutine"
	// LongLease: PauseRandom with the lease set to Chaos.LongLease, longer
	// than the pause: the guide's 2 s lease row.
	LongLease = "long-lease"
)

// ChaosScenarios lists the chaos scenarios.
var ChaosScenarios = []string{ChaosNone, PauseRandom, PauseTargeted, StallInSection, StallGoroutine, LongLease}

func isChaos(s string) bool {
	for _, c := range ChaosScenarios {
		if c == s {
			return true
		}
	}
	return false
}

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
	l, err := cfg.NewLocker(ctx, Client{ID: spec.ID, Key: spec.Key, Dial: directDial, Lease: spec.Lease})
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

// runChaos runs one chaos scenario: workers as processes, the fault as
// scheduled, then the checker over all their sections.
func runChaos(ctx context.Context, cfg Config, runID, scenario string) (report.Row, error) {
	ch := cfg.Chaos
	seed := ch.Seed
	if seed == 0 {
		seed = randomSeed()
	}
	lease := cfg.Lease
	if scenario == LongLease {
		lease = ch.LongLease
		if lease == 0 {
			lease = ch.Pause * 5 / 2
		}
		cfg.Lease = lease
	}
	r := newRun(cfg, runID, scenario)
	defer r.close()
	// One in-process client: to probe for a fence, and to report the TTL.
	s, err := r.setup(ctx, 1)
	if err != nil {
		return report.Row{}, err
	}
	var plan []faults.Pause
	stallEvery, stallMode := 0, ""
	switch scenario {
	case PauseRandom, LongLease:
		plan = faults.Plan(seed, ch.Pauses, ch.Interval, ch.Pause, ch.Workers, false)
	case PauseTargeted:
		plan = faults.Plan(seed, ch.Pauses, ch.Interval, ch.Pause, ch.Workers, true)
	case StallInSection:
		stallEvery, stallMode = ch.StallEvery, worker.StallProcess
	case StallGoroutine:
		stallEvery, stallMode = ch.StallEvery, worker.StallGoroutine
	}
	duration := max(ch.Duration, faults.End(plan)+ch.Interval)

	logDir, err := servers.TempDir("", "locksuite-workers-")
	if err != nil {
		return report.Row{}, err
	}
	defer os.RemoveAll(logDir)
	rec := r.recorder()
	argv := cfg.workerArgv
	if argv == nil {
		argv = workerArgv("")
	}
	var procs []*worker.Proc
	defer func() {
		for _, p := range procs {
			p.End(3 * time.Second)
		}
	}()
	events := make(chan worker.Event, 4096)
	for id := range ch.Workers {
		spec := worker.Spec{
			Target: target(&cfg), ID: id, Key: r.key, Lease: lease,
			Store: r.key, Fenced: cfg.Fenced, Work: cfg.Work, Base: rec.Base(),
			StallEvery: stallEvery, Stall: ch.Pause, StallMode: stallMode,
		}
		p, err := worker.Start(spec, argv, cfg.WorkerEnv, filepath.Join(logDir, fmt.Sprintf("worker-%d.log", id)))
		if err != nil {
			return report.Row{}, err
		}
		procs = append(procs, p)
		go func() {
			// A worker that reports something invalid is an error of the
			// run, not a worker that never finishes.
			if err := p.Events(events); err != nil {
				events <- worker.Event{Kind: "error", Client: p.ID, Err: strings.TrimPrefix(err.Error(), fmt.Sprintf("worker %d: ", p.ID))}
			}
		}()
	}

	// Wait until every worker is ready, then start them together.
	ready := 0
	startBy := time.After(60 * time.Second)
	for ready < len(procs) {
		select {
		case e := <-events:
			if e.Kind == "ready" {
				ready++
			} else if e.Kind == "error" {
				return report.Row{}, fmt.Errorf("worker %d: %s", e.Client, e.Err)
			}
		case <-startBy:
			return report.Row{}, fmt.Errorf("suite: %s: workers not ready after 60s; worker 0's output: %s", cfg.Name, procs[0].Log())
		case <-ctx.Done():
			return report.Row{}, ctx.Err()
		}
		for _, p := range procs {
			select {
			case <-p.Done():
				return report.Row{}, fmt.Errorf("suite: %s: worker %d exited before starting: %s", cfg.Name, p.ID, p.Log())
			default:
			}
		}
	}
	r.started(scenario, duration)
	t0 := rec.Now()
	for _, p := range procs {
		p.Go(t0 + duration)
	}

	// Holders, as the workers report them, for targeted pauses.
	var (
		mu       sync.Mutex
		holding  = map[int]bool{}
		injected []faults.Injected
	)
	holder := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		for id := range holding {
			return id, true
		}
		return 0, false
	}
	pause := func(victim int, d time.Duration, kind string) {
		mu.Lock()
		held := holding[victim]
		injected = append(injected, faults.Injected{At: rec.Now() - t0, For: d, Victim: victim, Held: held})
		mu.Unlock()
		p := procs[victim]
		stopped := rec.Now()
		_ = p.Stop()
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
		_ = p.Cont()
		r.fault(victim, stopped, rec.Now(), kind)
	}
	injCtx, stopInj := context.WithCancel(ctx)
	defer stopInj()
	var injWG sync.WaitGroup
	injWG.Add(1)
	go func() {
		defer injWG.Done()
		for _, pl := range plan {
			wait := pl.At - (rec.Now() - t0)
			select {
			case <-time.After(wait):
			case <-injCtx.Done():
				return
			}
			victim := pl.Victim
			if victim < 0 { // targeted: wait (up to Interval) for a holder
				deadline := time.Now().Add(max(ch.Interval, 100*time.Millisecond))
				for {
					if id, ok := holder(); ok {
						victim = id
						break
					}
					if time.Now().After(deadline) {
						break
					}
					time.Sleep(time.Millisecond)
				}
				if victim < 0 {
					continue
				}
			}
			pause(victim, pl.For, "sigstop")
		}
	}()

	var (
		done     = 0
		rejected uint64
		firstErr error
		limit    = time.After(duration + ch.Pause + 30*time.Second)
	)
	var stallWG sync.WaitGroup
loop:
	for done < len(procs) {
		select {
		case e := <-events:
			switch e.Kind {
			case "section":
				rec.Add(*e.Section)
			case "read":
				mu.Lock()
				holding[e.Client] = true
				mu.Unlock()
			case "sleep":
				r.fault(e.Client, e.T, e.T+ch.Pause, "sleep")
			case "released":
				mu.Lock()
				delete(holding, e.Client)
				mu.Unlock()
			case "stall":
				stallWG.Add(1)
				go func(id int) {
					defer stallWG.Done()
					pause(id, ch.Pause, "stall")
					procs[id].Ack()
				}(e.Client)
			case "done":
				done++
				rejected += e.Rejected
			case "error":
				if firstErr == nil {
					firstErr = fmt.Errorf("worker %d: %s", e.Client, e.Err)
				}
				done++
			}
		case <-limit:
			firstErr = fmt.Errorf("suite: %s: workers still running %v after the run's end", cfg.Name, ch.Pause+30*time.Second)
			break loop
		case <-ctx.Done():
			firstErr = ctx.Err()
			break loop
		}
	}
	stopInj()
	injWG.Wait()
	stallWG.Wait()
	grace := 3 * time.Second
	if firstErr != nil {
		grace = 0 // interrupted or failed: the workers' work is moot
	}
	for _, p := range procs {
		p.End(grace)
	}
	// Sections still in the pipes.
	for {
		select {
		case e := <-events:
			if e.Kind == "section" {
				rec.Add(*e.Section)
			}
			continue
		default:
		}
		break
	}
	elapsed := rec.Now() - t0
	var res checker.Result
	if firstErr != nil {
		res = checker.Result{Verdict: checker.Unknown, Reason: explain(cfg, scenario, firstErr).Error()}
	} else {
		res = finish(ctx, s, rec)
	}
	res.Rejected = int(rejected)
	row := r.row(scenario, res, cfg.Fenced, elapsed)
	row.LeaseMS = lease.Milliseconds()
	row.Seed, row.Workers = seed, ch.Workers
	row.Faults = len(injected)
	if len(plan) > 0 || stallEvery > 0 {
		row.PauseMS = ch.Pause.Milliseconds()
	}
	row.Schedule = faults.Describe(injected)
	var maxWait time.Duration
	for _, sec := range rec.Sections() {
		maxWait = max(maxWait, sec.Start-sec.Asked)
	}
	row.MaxWaitMS = maxWait.Milliseconds()
	if elapsed > 0 {
		row.WritesPerSec = float64(res.Writes) / elapsed.Seconds()
	}
	return r.keep(row), nil
}

// chaosSpecs registers the chaos scenarios (label "chaos"). What each
// asserts:
//   - chaos-none and long-lease: the invariant holds (no fault, or pauses
//     shorter than the lease);
//   - fenced, every scenario: the invariant holds;
//   - unfenced with ExpectLoss: pause-targeted and stall-in-section lose at
//     least one update (each pause outlives the lease inside a section);
//   - pause-random and stall-goroutine unfenced: measured and reported, not
//     asserted: whether a random pause hits a section, and whether a lock
//     renews from another goroutine, decide the outcome.
func chaosSpecs(c *Config, runID string, record func(string, report.Row, error) report.Row) {
	for _, sc := range ChaosScenarios {
		It(chaosText[sc], Label("chaos", sc), func(ctx SpecContext) {
			row, err := runChaos(ctx, *c, runID, sc)
			row = record(sc, row, err)
			GinkgoWriter.Printf("seed %d, faults: %s\n", row.Seed, row.Schedule)
			switch {
			case c.Fenced || sc == ChaosNone || sc == LongLease:
				row.Expected = report.Kept
				publish(*c, row)
				Expect(row.Verdict).To(Equal(report.Kept), "%s (seed %d, faults %s)", row.Reason, row.Seed, row.Schedule)
			case c.ExpectLoss && (sc == PauseTargeted || sc == StallInSection):
				row.Expected = report.Broken
				publish(*c, row)
				Expect(row.Verdict).To(Equal(report.Broken), "ExpectLoss is set, but %d faults lost no update: %d writes, counter %d (seed %d)", row.Faults, row.Writes, row.Counter, row.Seed)
			default:
				publish(*c, row)
				Expect(row.Verdict).NotTo(Equal(report.Unknown), row.Reason)
			}
		}, SpecTimeout(specTimeout))
	}
}

var chaosText = map[string]string{
	ChaosNone:      "keeps the invariant with worker processes and no faults",
	PauseRandom:    "keeps the invariant when random workers are stopped (SIGSTOP) past the lease",
	PauseTargeted:  "keeps the invariant when the holder is stopped (SIGSTOP) past the lease",
	StallInSection: "keeps the invariant when a critical section stalls its whole process past the lease",
	StallGoroutine: "keeps the invariant when the holder's goroutine stalls while its process runs on",
	LongLease:      "keeps the invariant when pauses are shorter than the lease",
}
