package run

import (
	"context"
	"errors"
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
	"github.com/locksuite/locksuite/internal/wait"
)

// Workers is a chaos load: Count worker processes (harness/worker) loop
// acquire → read → work → write → release for For, and for as long as the
// run's schedule lasts (Fixture.Schedule). Prepare starts them and
// exposes them to the faults: Fixture.Workers (their processes, to stop)
// and Fixture.Holders (who holds the lock, as they report it).
//
// With StallEvery, every StallEvery-th critical section of each worker
// asks before its write; the run's fault strikes that worker (aimed at it:
// faults.Aimable), lasts Pause, heals, and the worker goes on.
type Workers struct {
	Target    string   // which Config the workers build (worker.Spec.Target)
	Argv, Env []string // how to run this binary as a worker
	Count     int
	For       time.Duration
	// StallEvery: every StallEvery-th section asks for a stall (0: none).
	StallEvery int
	// Pause is how long each stall lasts, and the length of each pause or
	// stall as the row reports it (Row.PauseMS; 0: none).
	Pause time.Duration
	// Starter starts the workers (nil: processes of this machine,
	// worker.Local). A worker with a Node method (worker.Remote) names
	// its node in the row (Row.Nodes).
	Starter worker.Starter

	procs   []worker.Process
	events  chan worker.Event
	holding *holders
}

// holders is who holds the lock as the workers report it (faults.Holders):
// a worker holds it from its read (the event's time, on the recorder's
// clock) until its write is due, its read plus work, and while it waits
// for a stall's heal before its write; its section (written or refused)
// and its release end it. A stop then lets the value read go stale, so a
// targeted pause (faults.StopHolder) strikes a section whose update it
// can lose, and takes back a stop that came after the write was due.
type holders struct {
	now  func() time.Duration
	work time.Duration
	mu   sync.Mutex
	by   map[int]time.Duration // until when each holder holds; -1: until its section
}

// read records client id's read at t; asked, its stall before its write;
// done, the end of its hold (its section or its release).
func (h *holders) read(id int, t time.Duration) { h.set(id, t+h.work) }
func (h *holders) asked(id int)                 { h.set(id, -1) }
func (h *holders) done(id int)                  { h.set(id, 0) }

func (h *holders) set(id int, until time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if until == 0 {
		delete(h.by, id)
	} else {
		h.by[id] = until
	}
}

func (h *holders) Holder() (int, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	for id, until := range h.by {
		if until < 0 || now < until {
			return id, true
		}
	}
	return 0, false
}

func (h *holders) Holds(id int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	until, ok := h.by[id]
	return ok && (until < 0 || h.now() < until)
}

func (h *holders) Now() time.Duration { return h.now() }

// readyTimeout bounds how long the workers may take to start.
const readyTimeout = 60 * time.Second

// Prepare makes one in-process client (to probe for a fence, and to report
// the TTL), opens the counter, and starts the workers: it returns once
// every one is ready to go.
func (w *Workers) Prepare(ctx context.Context, fx *Fixture) error {
	if err := fx.Standard(ctx, 1, false); err != nil {
		return err
	}
	logDir, err := tempdir.New("", "locksuite-workers-")
	if err != nil {
		return err
	}
	fx.closers = append(fx.closers, func() {
		for _, p := range w.procs {
			p.End(0)
		}
		os.RemoveAll(logDir)
	})
	w.events = make(chan worker.Event, 4096)
	w.holding = &holders{now: fx.Rec.Now, work: fx.Work, by: map[int]time.Duration{}}
	starter := w.Starter
	if starter == nil {
		starter = worker.Local{}
	}
	for id := range w.Count {
		spec := worker.Spec{
			Target: w.Target, ID: id, Key: fx.Key, Lease: fx.Lease,
			Store: fx.Key, Fenced: fx.Fenced, Work: fx.Work, Base: fx.Rec.Base(), StallEvery: w.StallEvery,
		}
		p, err := starter.Start(spec, w.Argv, w.Env, filepath.Join(logDir, fmt.Sprintf("worker-%d.log", id)))
		if err != nil {
			return err
		}
		w.procs = append(w.procs, p)
		fx.Workers = append(fx.Workers, p)
		go func() {
			// A worker that reports something invalid is an error of the
			// run, not a worker that never finishes.
			if err := p.Events(w.events); err != nil {
				w.events <- worker.Event{Kind: "error", Client: id, Err: strings.TrimPrefix(err.Error(), fmt.Sprintf("worker %d: ", id))}
			}
		}()
	}
	fx.Holders = w.holding
	return w.ready(ctx)
}

// ready waits until every worker is ready.
func (w *Workers) ready(ctx context.Context) error {
	startBy := time.After(readyTimeout)
	for ready := 0; ready < len(w.procs); {
		select {
		case ev := <-w.events:
			if ev.Kind == "ready" {
				ready++
			} else if ev.Kind == "error" {
				return fmt.Errorf("worker %d: %s", ev.Client, ev.Err)
			}
		case <-startBy:
			return fmt.Errorf("workers not ready after %v; worker 0's output: %s", readyTimeout, w.procs[0].Log())
		case <-ctx.Done():
			return ctx.Err()
		}
		for id, p := range w.procs {
			select {
			case <-p.Done():
				return fmt.Errorf("worker %d exited before starting: %s", id, p.Log())
			default:
			}
		}
	}
	return nil
}

func (w *Workers) Planned(fx *Fixture) time.Duration { return max(w.For, fx.Schedule.End()) }

// Run starts the workers together, at the run's time zero (Fixture.T0, the
// schedule's too), records their sections and answers their stalls under
// f, until every worker is done.
func (w *Workers) Run(ctx context.Context, fx *Fixture, f faults.Fault) (Outcome, error) {
	duration := w.Planned(fx)
	for _, p := range w.procs {
		p.Go(fx.T0 + duration)
	}
	var (
		done     = 0
		rejected uint64
		firstErr error
		limit    = time.After(duration + w.Pause + 30*time.Second)
		stalls   sync.WaitGroup
		asked    = 0 // stalls the workers asked for
		stallErr = make(chan error, 1)
	)
loop: // the recorder: the workers' events
	for done < len(w.procs) {
		select {
		case ev := <-w.events:
			switch ev.Kind {
			case "section": // written (or refused): its read can no longer be lost
				fx.Rec.Add(*ev.Section)
				w.holding.done(ev.Client)
			case "read":
				w.holding.read(ev.Client, ev.T)
			case "released":
				w.holding.done(ev.Client)
			case "stall":
				w.holding.asked(ev.Client)
				asked++
				stalls.Add(1)
				go func(id int) {
					defer stalls.Done()
					if err := w.stall(ctx, fx, f, id); err != nil {
						select {
						case stallErr <- err:
						default:
						}
					}
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
			firstErr = fmt.Errorf("workers still running %v after the run's end", w.Pause+30*time.Second)
			break loop
		case <-ctx.Done():
			firstErr = ctx.Err()
			break loop
		}
	}
	stalls.Wait()
	if firstErr == nil {
		select {
		case firstErr = <-stallErr:
		default:
		}
	}
	w.end(fx, firstErr == nil)
	elapsed := fx.Rec.Now() - fx.T0
	out := Outcome{Elapsed: elapsed, Row: func(r *report.Row) {
		r.Rejected = int(rejected)
		r.LeaseMS = fx.Lease.Milliseconds()
		r.Workers = w.Count
		r.Faults = fx.Log.Injected()
		r.PauseMS = w.Pause.Milliseconds()
		r.Nodes = w.nodes()
		availability(r, fx.Rec, elapsed)
	}}
	if firstErr != nil {
		if fx.Explain != nil {
			firstErr = fx.Explain(firstErr)
		}
		out.Result = &checker.Result{Verdict: checker.Unknown, Reason: firstErr.Error()}
	} else if w.StallEvery > 0 && asked == 0 {
		sections := len(fx.Rec.Sections())
		out.Amend = func(res *checker.Result) {
			if res.Verdict == checker.Kept { // a loss stands: it needed no stall
				res.Verdict = checker.Unknown
				res.Reason = fmt.Sprintf("no stall struck: a worker asks for one every %d sections, and none got that far (%d sections in all, %d workers, %v): lower Chaos.StallEvery or lengthen Chaos.Duration",
					w.StallEvery, sections, w.Count, elapsed.Round(time.Millisecond))
			}
		}
	}
	return out, nil
}

// stall strikes f at worker id, which asked before its write, for Pause,
// then lets it go on. A worker that exited meanwhile is nothing to strike.
func (w *Workers) stall(ctx context.Context, fx *Fixture, f faults.Fault, id int) error {
	defer w.procs[id].Ack()
	if f == nil {
		return nil
	}
	if a, ok := f.(faults.Aimable); ok {
		f = a.Aim(id)
	}
	heal, err := fx.Log.Strike(ctx, f, w.holding.Holds(id))
	if errors.Is(err, faults.ErrNoTarget) || ctx.Err() != nil {
		return nil // the worker is gone (its events say why), or the run is over
	}
	if err != nil {
		return fmt.Errorf("stall of worker %d: %w", id, err)
	}
	_ = wait.For(ctx, w.Pause)
	return heal()
}

// nodes are the nodes the workers ran on, by worker, if they say
// (worker.Remote's Node); nil for processes of this machine.
func (w *Workers) nodes() []string {
	var out []string
	for _, p := range w.procs {
		if n, ok := p.(interface{ Node() string }); ok && n.Node() != "" {
			out = append(out, n.Node())
		}
	}
	if len(out) != len(w.procs) {
		return nil
	}
	return out
}

// end ends the workers (after a grace period for their last sections when
// the run went well) and records the sections still in their pipes.
func (w *Workers) end(fx *Fixture, graceful bool) {
	grace := 3 * time.Second
	if !graceful {
		grace = 0 // interrupted or failed: the workers' work is moot
	}
	for _, p := range w.procs {
		p.End(grace)
	}
	for {
		select {
		case ev := <-w.events:
			if ev.Kind == "section" {
				fx.Rec.Add(*ev.Section)
			}
			continue
		default:
		}
		return
	}
}
