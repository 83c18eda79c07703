// Package run is one scenario run, built once for every scenario (etcd's
// robustness layout): the clients and the counter are made, the fault is
// checked against its target, then the load, the fault and the progress
// reports run under one errgroup, the fault is healed whatever happens
// (also when the run fails, is cancelled or panics), then the checkers
// judge the history, and the run's row and artifacts are written.
//
// What varies between scenarios is only the Load (what the clients do and
// when the fault strikes) and the faults.Fault: harness/load drives the
// critical sections, harness/history records them, harness/faults makes
// and records the faults, harness/checker judges, harness/report writes.
package run

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/harness/checker"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/history"
	"github.com/locksuite/locksuite/harness/load"
	"github.com/locksuite/locksuite/harness/nodes"
	"github.com/locksuite/locksuite/harness/report"
)

// Dialer connects to the lock service (suite.Client.Dial).
type Dialer = func(ctx context.Context, network, address string) (net.Conn, error)

// Setup is what a run is told: what to test, and how to make its clients
// and its counter.
type Setup struct {
	Backend  string // the backend's name, for rows and errors
	Scenario string // the scenario's name
	Key      string // the lock's and the counter's name, unique to the run
	Fenced   bool   // whether the counter checks fences
	Lease    time.Duration
	Work     time.Duration // each critical section's time between read and write
	// StallTimeout bounds how long a stalled holder waits for a second
	// client; 0: 3 × the Locker's expiry + 2 s, or 30 s without one.
	StallTimeout time.Duration
	// NewLocker makes client id's Locker, dialling the lock service with
	// dial and asking for lease.
	NewLocker func(ctx context.Context, id int, dial Dialer, lease time.Duration) (backends.Locker, error)
	// NewStore opens the counter name (see suite.Config.NewStore).
	NewStore func(ctx context.Context, name string, fenced bool) (fencing.Store, error)
	// Service is the lock service's processes, or nil.
	Service faults.Service
	// Nodes, if not nil, starts the lock service anew on nodes, for the
	// node scenarios; nil: they are skipped.
	Nodes *NodeService
	// Artifacts, if not empty, is where the run leaves its history and
	// timeline (suite.Config.Artifacts).
	Artifacts string
	// Progress, if not nil, is told how the run goes every second.
	Progress func(report.Progress)
	// Explain, if not nil, rewrites an error that ends a run with an
	// unknown verdict into one that says what went wrong for the user.
	Explain func(error) error
}

// Load is what a scenario's clients do, and when its fault strikes.
type Load interface {
	// Prepare makes the run's clients and opens its counter (Env.Clients,
	// Env.Probe, Env.OpenStore), before the fault is checked.
	Prepare(ctx context.Context, e *Env) error
	// Planned is how long the load expects to run, for progress reports.
	Planned(e *Env) time.Duration
	// Run runs the clients, strikes f (nil: no fault) through e.Log and
	// heals it; it returns what the checks need. It returns when the load
	// is over or ctx is done.
	Run(ctx context.Context, e *Env, f faults.Fault) (Outcome, error)
}

// Outcome is what a Load reports besides the history.
type Outcome struct {
	// Elapsed is how long the load ran.
	Elapsed time.Duration
	// Result, if not nil, is the verdict already (a load that judges
	// without the counter, or that failed mid-run): the checkers do not
	// run.
	Result *checker.Result
	// Amend, if not nil, amends the checkers' result (notes in the
	// reason).
	Amend func(*checker.Result)
	// Row, if not nil, adds the load's own figures to the row.
	Row func(*report.Row)
}

// Skip returns an error wrapping faults.ErrNotApplicable: the run does not
// apply to this lock, and is skipped with reason.
func Skip(reason string) error { return faults.NotApplicable(reason) }

// Env is one run in progress: its clients, its counter, its records.
type Env struct {
	Setup
	Lockers []backends.Locker
	Paths   []*faults.Path // each client's fault path; nil for a client that dials directly
	Store   fencing.Store
	Rec     *history.Recorder
	Log     *faults.Log
	T0      time.Duration // Rec time when the load started

	// The node scenarios' network, their service on it, the member index
	// of its leader when the run was prepared, and each client's node.
	Net         *nodes.Network
	Placed      *Placed
	Leader      int
	ClientNodes []int

	lease   backends.Lease // client 0's current lease, for SessionKill
	stores  []fencing.Store
	closers []func() // run last to first by close, after the clients
}

// directDial dials without a fault path.
func directDial(ctx context.Context, network, address string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, network, address)
}

// Clients makes n Lockers; with proxied, each dials through a
// faults.Path of its own.
func (e *Env) Clients(ctx context.Context, n int, proxied bool) error {
	for id := range n {
		dial := directDial
		var p *faults.Path
		if proxied {
			p = faults.NewPath()
			dial = p.Dial
		}
		e.Paths = append(e.Paths, p)
		l, err := e.NewLocker(ctx, id, dial, e.Lease)
		if err != nil {
			return fmt.Errorf("suite: %s: NewLocker for client %d: %w", e.Backend, id, err)
		}
		e.Lockers = append(e.Lockers, l)
	}
	return nil
}

// OpenStore opens the run's counter.
func (e *Env) OpenStore(ctx context.Context, fenced bool) error {
	s, err := e.NewStore(ctx, e.Key, fenced)
	if err != nil {
		return fmt.Errorf("suite: %s: NewStore: %w", e.Backend, err)
	}
	e.stores = append(e.stores, s)
	e.Store = s
	return nil
}

// probeTimeout bounds the first Acquire of a free lock.
const probeTimeout = 10 * time.Second

// noFence is why a fenced run skips a Locker that gives no token.
const noFence = "the backend gives no fencing token (Lease.Fence() is 0)"

// Probe lets client i acquire and release the free lock once, so that it
// has connected (and its fault path knows whether it is used), and skips a
// fenced run whose Locker gives no token.
func (e *Env) Probe(ctx context.Context, i int) error {
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	lease, err := load.Acquire(pctx, e.Lockers[i])
	if err != nil {
		return fmt.Errorf("suite: %s: the first Acquire of a free lock: %w", e.Backend, err)
	}
	fence := lease.Fence()
	if err := lease.Release(ctx); err != nil {
		return fmt.Errorf("suite: %s: releasing the first lease: %w", e.Backend, err)
	}
	if e.Fenced && fence == 0 {
		return Skip(noFence)
	}
	return nil
}

// Standard is the usual preparation: n clients (proxied or not), client 0
// probed when its path or its fence matters, the counter opened.
func (e *Env) Standard(ctx context.Context, n int, proxied bool) error {
	if err := e.Clients(ctx, n, proxied); err != nil {
		return err
	}
	if proxied || e.Fenced {
		if err := e.Probe(ctx, 0); err != nil {
			return err
		}
	}
	return e.OpenStore(ctx, e.Fenced)
}

// Expiry is how long client 0's stalled lease takes to run out, by what
// its Locker declares (backends.TTLOf), else Lease.
func (e *Env) Expiry() time.Duration {
	if len(e.Lockers) > 0 {
		if _, x, ok := backends.TTLOf(e.Lockers[0]); ok {
			return x
		}
	}
	return e.Lease
}

// TTL is client 0's declared TTL, else Lease.
func (e *Env) TTL() time.Duration {
	if len(e.Lockers) > 0 {
		if t, _, ok := backends.TTLOf(e.Lockers[0]); ok {
			return t
		}
	}
	return e.Lease
}

// StallBound is how long a stalled holder waits for a second client:
// Setup.StallTimeout, else 3 × client 0's expiry + 2 s, or 30 s when its
// Locker declares none.
func (e *Env) StallBound() time.Duration {
	if e.StallTimeout > 0 {
		return e.StallTimeout
	}
	if _, x, ok := backends.TTLOf(e.Lockers[0]); ok {
		return 3*x + 2*time.Second
	}
	return 30 * time.Second
}

// takeover is B's Acquire while its holder stalls (a fault struck; heal
// undoes it): bounded by StallBound, asked and granted at the recorder's
// times asked and start. The fault is healed once Acquire returns.
func (e *Env) takeover(ctx context.Context, b backends.Locker, heal func() error) (lb backends.Lease, asked, start time.Duration, err error) {
	bctx, cancel := context.WithTimeout(ctx, e.StallBound())
	asked = e.Rec.Now()
	lb, err = load.Acquire(bctx, b)
	start = e.Rec.Now()
	cancel()
	_ = heal()
	return lb, asked, start, err
}

// Lease0 is client 0's lease while it holds one (set by the holder
// loads), for a fault that needs it (faults.SessionKill).
func (e *Env) Lease0() backends.Lease { return e.lease }

// Now is the run's clock (the recorder's).
func (e *Env) Now() time.Duration { return e.Rec.Now() }

// Execute runs one scenario: l's clients with the fault that fault makes
// for them (fault nil: none), then the checkers. A run that does not apply
// (the fault's Applies, a missing fence) returns an error wrapping
// faults.ErrNotApplicable.
func Execute(ctx context.Context, s Setup, l Load, fault func(*Env) faults.Fault) (row report.Row, err error) {
	e := &Env{Setup: s}
	defer e.close()
	if err := l.Prepare(ctx, e); err != nil {
		return report.Row{}, err
	}
	e.Rec = history.NewRecorder() // time zero: the load's start
	e.Log = faults.NewLog(e.Rec.Now)
	restore := func() error { return nil }
	var f faults.Fault
	if fault != nil {
		f = fault(e)
		if err := f.Applies(ctx); err != nil {
			return report.Row{}, err
		}
		// Heal whatever struck, and put the target back, whatever happens.
		defer e.Log.HealAll()
		if r, ok := f.(faults.Restorer); ok {
			restore = sync.OnceValue(func() error { return r.Restore(context.WithoutCancel(ctx)) })
			defer restore()
		}
	}
	e.T0 = e.Rec.Now()

	var out Outcome
	done := make(chan struct{})
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) { // the load, which strikes the fault
		defer close(done)
		defer func() {
			if p := recover(); p != nil {
				err = &load.PanicError{Value: p, Stack: debug.Stack()}
			}
		}()
		out, err = l.Run(gctx, e, f)
		return err
	})
	g.Go(func() error { // the fault: healed once the load is over
		select {
		case <-done:
		case <-gctx.Done():
		}
		return e.Log.HealAll()
	})
	g.Go(func() error { // the progress reports
		e.progress(done, l.Planned(e))
		return nil
	})
	if err := g.Wait(); err != nil {
		return report.Row{}, err
	}
	if err := restore(); err != nil {
		return report.Row{}, fmt.Errorf("suite: %s: %w", e.Backend, err)
	}
	var res checker.Result
	if out.Result != nil {
		res = *out.Result
	} else {
		res = judge(ctx, e.Store, e.Rec)
	}
	if out.Amend != nil {
		out.Amend(&res)
	}
	row = e.row(res, out.Elapsed)
	if out.Row != nil {
		out.Row(&row)
	}
	return e.keep(row), nil
}

// judge reads the final counter and judges the history with both checkers
// (checker.Judge): the counter check, and linearizability.
func judge(ctx context.Context, s fencing.Store, rec *history.Recorder) checker.Result {
	counter, err := s.Value(ctx)
	if err != nil {
		return checker.Result{Verdict: checker.Unknown, Reason: fmt.Sprintf("reading the final counter: %v", err)}
	}
	res := checker.Judge(rec.Sections(), counter, checker.DefaultLinearizeTimeout)
	res.Rejected = int(s.Rejected())
	return res
}

// row fills the result's identity and figures, and the faults as they
// happened.
func (e *Env) row(res checker.Result, d time.Duration) report.Row {
	r := report.Row{
		Backend: e.Backend, Fencing: e.Fenced, Scenario: e.Scenario,
		Writes: res.Writes, Counter: res.Counter, Lost: res.Lost, Overlaps: res.Overlaps, Rejected: res.Rejected,
		Verdict: report.Verdict(res.Verdict.String()), Reason: res.Reason, Linearizable: string(res.Linearizable),
		LeaseMS: e.TTL().Milliseconds(), DurationMS: d.Milliseconds(),
	}
	if n := e.Log.Injected(); n > 0 {
		r.Faults = n
		r.Schedule = e.Log.Schedule(e.T0)
	}
	return r
}

// close releases the run's clients, paths and counter.
func (e *Env) close() {
	for _, p := range e.Paths {
		if p != nil {
			p.Heal()
		}
	}
	// What the lock left on the server (fence counters, keys, sequences):
	// the first client cleans for all, once the others are closed.
	for i := len(e.Lockers) - 1; i >= 0; i-- {
		if c, ok := e.Lockers[i].(backends.Cleaner); ok && i == 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = c.Cleanup(ctx)
			cancel()
		}
		_ = e.Lockers[i].Close()
	}
	for _, p := range e.Paths {
		if p != nil {
			_ = p.Close()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range e.stores {
		_ = s.Close(ctx)
	}
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
}

// progress reports to Setup.Progress now, every second, and once more
// (Progress.Done) when done is closed.
func (e *Env) progress(done <-chan struct{}, planned time.Duration) {
	if e.Progress == nil {
		return
	}
	t0 := time.Now()
	once := func(last bool) {
		p := report.Progress{Run: e.Key, Scenario: e.Scenario, Elapsed: time.Since(t0), Planned: planned, Done: last}
		secs := e.Rec.Sections()
		in := map[int]bool{}
		for _, o := range checker.Overlaps(secs) {
			in[o.A], in[o.B] = true, true
		}
		p.Sections, p.Overlaps = len(secs), len(in)
		for _, s := range secs {
			if s.Outcome == history.Rejected {
				p.Rejected++
			}
		}
		e.Progress(p)
	}
	once(false)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			once(false)
		case <-done:
			once(true)
			return
		}
	}
}

// keep writes the run's history (a report.Timeline as JSON) and its HTML
// timeline into Setup.Artifacts, if set, and names them in the row.
func (e *Env) keep(row report.Row) report.Row {
	dir := e.Artifacts
	if dir == "" {
		return row
	}
	t := report.Timeline{Row: row, Key: e.Key, Sections: e.Rec.Sections(), Faults: []report.Fault{}}
	for _, s := range e.Log.Spans() {
		t.Faults = append(t.Faults, report.Fault{Client: s.Lane, Start: s.Start, End: s.End, Kind: s.Kind})
	}
	base := filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_").Replace(e.Key))
	for _, f := range []struct {
		ext   string
		write func(io.Writer) error
	}{{".json", t.WriteJSON}, {".html", func(w io.Writer) error { return report.WriteHTML(w, t) }}} {
		if err := writeFile(base+f.ext, f.write); err != nil {
			fmt.Fprintf(os.Stderr, "locksuite: keeping the run's %s: %v\n", f.ext, err)
			continue
		}
		row.Artifacts = append(row.Artifacts, base+f.ext)
	}
	return row
}

func writeFile(path string, write func(io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// errorsIsAny reports whether err is one of targets.
func errorsIsAny(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}
