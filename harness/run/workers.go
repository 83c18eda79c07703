package run

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/locksuite/locksuite/harness/checker"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/worker"
	"github.com/locksuite/locksuite/internal/tempdir"
)

// Workers is a chaos load: Count worker processes (harness/worker) loop
// acquire → read → work → write → release for For, while their processes
// are stopped: Pauses process pauses of Pause each, Interval apart, on a
// random worker or (Targeted) on the one holding the lock, drawn from Seed
// (faults.Plan); and, with StallEvery, every StallEvery-th critical
// section of each worker stalls for Pause before its write, its whole
// process stopped (worker.StallProcess) or its goroutine asleep
// (worker.StallGoroutine). Every process pause is a faults.Stop.
//
// Its fault argument is unused: the faults are the workers' own pauses.
type Workers struct {
	Target     string   // which Config the workers build (worker.Spec.Target)
	Argv, Env  []string // how to run this binary as a worker
	Count      int
	For        time.Duration
	Pause      time.Duration
	Interval   time.Duration
	Pauses     int
	Targeted   bool
	StallEvery int
	StallMode  string
	Seed       uint64
}

func (w *Workers) plan() []faults.Pause {
	if w.Pauses == 0 {
		return nil
	}
	return faults.Plan(w.Seed, w.Pauses, w.Interval, w.Pause, w.Count, w.Targeted)
}

// One in-process client: to probe for a fence, and to report the TTL.
func (w *Workers) Prepare(ctx context.Context, e *Env) error { return e.Standard(ctx, 1, false) }

func (w *Workers) Planned(*Env) time.Duration { return max(w.For, faults.End(w.plan())+w.Interval) }

func (w *Workers) Run(ctx context.Context, e *Env, _ faults.Fault) (Outcome, error) {
	plan := w.plan()
	duration := w.Planned(e)
	logDir, err := tempdir.New("", "locksuite-workers-")
	if err != nil {
		return Outcome{}, err
	}
	defer os.RemoveAll(logDir)
	rec := e.Rec
	var procs []*worker.Proc
	defer func() {
		for _, p := range procs {
			p.End(3 * time.Second)
		}
	}()
	events := make(chan worker.Event, 4096)
	for id := range w.Count {
		spec := worker.Spec{
			Target: w.Target, ID: id, Key: e.Key, Lease: e.Lease,
			Store: e.Key, Fenced: e.Fenced, Work: e.Work, Base: rec.Base(),
			StallEvery: w.StallEvery, Stall: w.Pause, StallMode: w.StallMode,
		}
		p, err := worker.Start(spec, w.Argv, w.Env, filepath.Join(logDir, fmt.Sprintf("worker-%d.log", id)))
		if err != nil {
			return Outcome{}, err
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
		case ev := <-events:
			if ev.Kind == "ready" {
				ready++
			} else if ev.Kind == "error" {
				return Outcome{}, fmt.Errorf("worker %d: %s", ev.Client, ev.Err)
			}
		case <-startBy:
			return Outcome{}, fmt.Errorf("suite: %s: workers not ready after 60s; worker 0's output: %s", e.Backend, procs[0].Log())
		case <-ctx.Done():
			return Outcome{}, ctx.Err()
		}
		for _, p := range procs {
			select {
			case <-p.Done():
				return Outcome{}, fmt.Errorf("suite: %s: worker %d exited before starting: %s", e.Backend, p.ID, p.Log())
			default:
			}
		}
	}
	t0 := rec.Now()
	e.T0 = t0
	for _, p := range procs {
		p.Go(t0 + duration)
	}

	// Holders, as the workers report them, for targeted pauses.
	var (
		mu      sync.Mutex
		holding = map[int]bool{}
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
		mu.Unlock()
		heal, err := e.Log.Strike(ctx, &faults.Stop{Proc: procs[victim], Lane: victim, Kind: kind, What: fmt.Sprintf("w%d", victim)}, held)
		if err != nil {
			return // the worker is gone: its events say why
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
		_ = heal()
	}
	injCtx, stopInj := context.WithCancel(ctx)
	defer stopInj()
	var injWG sync.WaitGroup
	injWG.Add(1)
	go func() { // the fault schedule
		defer injWG.Done()
		for _, pl := range plan {
			select {
			case <-time.After(pl.At - (rec.Now() - t0)):
			case <-injCtx.Done():
				return
			}
			victim := pl.Victim
			if victim < 0 { // targeted: wait (up to Interval) for a holder
				deadline := time.Now().Add(max(w.Interval, 100*time.Millisecond))
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
		limit    = time.After(duration + w.Pause + 30*time.Second)
	)
	var stallWG sync.WaitGroup
loop: // the recorder: the workers' events
	for done < len(procs) {
		select {
		case ev := <-events:
			switch ev.Kind {
			case "section":
				rec.Add(*ev.Section)
			case "read":
				mu.Lock()
				holding[ev.Client] = true
				mu.Unlock()
			case "sleep":
				e.Log.Observe(faults.Span{Lane: ev.Client, Kind: "sleep", Start: ev.T, End: ev.T + w.Pause})
			case "released":
				mu.Lock()
				delete(holding, ev.Client)
				mu.Unlock()
			case "stall":
				stallWG.Add(1)
				go func(id int) {
					defer stallWG.Done()
					pause(id, w.Pause, "stall")
					procs[id].Ack()
				}(ev.Client)
			case "done":
				done++
				rejected += ev.Rejected
			case "error":
				if firstErr == nil {
					firstErr = fmt.Errorf("worker %d: %s", ev.Client, ev.Err)
				}
				done++
			}
		case <-limit:
			firstErr = fmt.Errorf("suite: %s: workers still running %v after the run's end", e.Backend, w.Pause+30*time.Second)
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
		case ev := <-events:
			if ev.Kind == "section" {
				rec.Add(*ev.Section)
			}
			continue
		default:
		}
		break
	}
	elapsed := rec.Now() - t0
	out := Outcome{Elapsed: elapsed, Row: func(r *report.Row) {
		r.Rejected = int(rejected)
		r.LeaseMS = e.Lease.Milliseconds()
		r.Seed, r.Workers = w.Seed, w.Count
		r.Faults = e.Log.Injected()
		if len(plan) > 0 || w.StallEvery > 0 {
			r.PauseMS = w.Pause.Milliseconds()
		}
		availability(r, rec, elapsed)
	}}
	if firstErr != nil {
		if e.Explain != nil {
			firstErr = e.Explain(firstErr)
		}
		out.Result = &checker.Result{Verdict: checker.Unknown, Reason: firstErr.Error()}
	}
	return out, nil
}
