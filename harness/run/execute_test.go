package run

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/harness/checker"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/report"
)

// fenceLock grants at once with fence; its lease counts releases.
type fenceLock struct {
	fence    uint64
	err      error
	released atomic.Int32
}

func (l *fenceLock) Acquire(context.Context) (backends.Lease, error) {
	if l.err != nil {
		return nil, l.err
	}
	return fenceLease{l}, nil
}
func (l *fenceLock) Close() error { return nil }

type fenceLease struct{ l *fenceLock }

func (g fenceLease) Fence() uint64                 { return g.l.fence }
func (g fenceLease) Release(context.Context) error { g.l.released.Add(1); return nil }

// TestProbeFence: a lock whose grant's fence is 0 gives ErrNoFence, a skip
// (faults.ErrNotApplicable); one with a token gives nil; a lock that
// cannot be acquired gives its error, not ErrNoFence. The probe's lease is
// released.
func TestProbeFence(t *testing.T) {
	ctx := context.Background()
	none := &fenceLock{}
	if err := ProbeFence(ctx, none); !errors.Is(err, ErrNoFence) || !errors.Is(err, faults.ErrNotApplicable) {
		t.Errorf("fence 0: %v, want ErrNoFence, a skip", err)
	}
	if none.released.Load() != 1 {
		t.Errorf("the probe's lease was released %d times, want once", none.released.Load())
	}
	if err := ProbeFence(ctx, &fenceLock{fence: 7}); err != nil {
		t.Errorf("fence 7: %v, want nil", err)
	}
	down := errors.New("connection refused")
	if err := ProbeFence(ctx, &fenceLock{err: down}); !errors.Is(err, down) || errors.Is(err, ErrNoFence) {
		t.Errorf("Acquire failing: %v, want its error", err)
	}
}

// stub is a Load that runs for d, strikes its fault at once if given one,
// and judges by itself (kept).
type stub struct {
	prepare error
	run     error
	d       time.Duration
}

func (s *stub) Prepare(context.Context, *Fixture) error { return s.prepare }
func (s *stub) Planned(*Fixture) time.Duration          { return s.d }
func (s *stub) Run(ctx context.Context, fx *Fixture, f faults.Fault) (Outcome, error) {
	if s.run != nil {
		return Outcome{}, s.run
	}
	if f != nil {
		if _, err := fx.Log.Strike(ctx, f, true); err != nil {
			return Outcome{}, err
		}
	}
	select {
	case <-time.After(s.d):
	case <-ctx.Done():
	}
	return Outcome{Elapsed: s.d, Result: &checker.Result{Verdict: checker.Kept}}, nil
}

// toggle is a fault that records whether it is in place.
type toggle struct {
	name string
	in   atomic.Bool
}

func (f *toggle) Applies(context.Context) error { return nil }
func (f *toggle) Inject(context.Context) (func() error, error) {
	f.in.Store(true)
	return func() error { f.in.Store(false); return nil }, nil
}
func (f *toggle) Span() faults.Span { return faults.Span{Lane: 1, Kind: "toggle", What: f.name} }

// TestExecute: a run's error is an *Error naming its backend and scenario,
// a run that does not apply is not; a schedule is played beside the load,
// each step recorded in the row's schedule with the schedule's seed, and a
// fault the load struck and never healed is healed when the run ends.
func TestExecute(t *testing.T) {
	ctx := context.Background()
	s := Setup{Backend: "redis", Scenario: "x"}
	_, err := Execute(ctx, s, &stub{run: errors.New("boom")}, Nemesis{})
	var re *Error
	if !errors.As(err, &re) || re.Backend != "redis" || re.Scenario != "x" || err.Error() != "suite: redis: x: boom" {
		t.Errorf("a failed run: %v, want *Error \"suite: redis: x: boom\"", err)
	}
	skip := Skip("no such thing")
	if _, err := Execute(ctx, s, &stub{prepare: skip}, Nemesis{}); err != skip {
		t.Errorf("a run that does not apply: %v, want the skip as it is", err)
	}

	a, b := &toggle{name: "a"}, &toggle{name: "b"}
	row, err := Execute(ctx, s, &stub{d: 50 * time.Millisecond}, Nemesis{Schedule: func(*Fixture) (faults.Schedule, error) {
		return faults.Schedule{Seed: 9, Steps: []faults.Step{{At: 0, For: time.Millisecond, Fault: a}, {At: 5 * time.Millisecond, For: time.Millisecond, Fault: b}}}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if row.Seed != 9 || row.Faults != 2 || !strings.HasPrefix(row.Schedule, "a@") || !strings.Contains(row.Schedule, " b@") {
		t.Errorf("row seed %d, %d faults, schedule %q: want seed 9 and steps a then b", row.Seed, row.Faults, row.Schedule)
	}
	if row.Verdict != report.Kept {
		t.Errorf("verdict %s, want the load's own (kept)", row.Verdict)
	}

	left := &toggle{name: "left"}
	if _, err := Execute(ctx, s, &stub{}, Nemesis{Fault: func(*Fixture) faults.Fault { return left }}); err != nil {
		t.Fatal(err)
	}
	if left.in.Load() {
		t.Error("a fault the load struck and never healed is still in place after the run")
	}
}

// TestJudgeBeforeArtifacts: the row that Setup.Judge gives is the one the
// run returns and the one its history and timeline show.
func TestJudgeBeforeArtifacts(t *testing.T) {
	s := Setup{Backend: "redis", Scenario: "x", Key: "k", Artifacts: t.TempDir(), Judge: func(r report.Row) report.Row {
		r.Verdict, r.Reason = report.Unknown, "the machine held worker 1 up"
		return r
	}}
	row, err := Execute(context.Background(), s, &stub{}, Nemesis{})
	if err != nil {
		t.Fatal(err)
	}
	if row.Verdict != report.Unknown || len(row.Artifacts) != 2 {
		t.Fatalf("row %s with artifacts %v, want the judged verdict (unknown) and two artifacts", row.Verdict, row.Artifacts)
	}
	for _, f := range row.Artifacts {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f, ".json") {
			var tl report.Timeline
			if err := json.Unmarshal(b, &tl); err != nil || tl.Row.Verdict != report.Unknown {
				t.Errorf("%s: verdict %s (%v), want the judged one (unknown)", f, tl.Row.Verdict, err)
			}
		} else if !strings.Contains(string(b), "the machine held worker 1 up") {
			t.Errorf("%s does not show the judged row's reason", f)
		}
	}
}
