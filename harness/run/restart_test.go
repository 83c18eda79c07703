package run

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/internal/wait"
)

// memLock is a lock service in memory whose crash forgets what it was
// told to: its lock, its fence counter.
type memLock struct {
	mu     sync.Mutex
	holder int // the holding grant's fence, 0: free
	fence  uint64
	broken bool // grants nothing
}

type memLocker struct {
	s   *memLock
	ttl time.Duration
}

func (l memLocker) TTL() time.Duration    { return l.ttl }
func (l memLocker) Expiry() time.Duration { return l.ttl }
func (l memLocker) Close() error          { return nil }
func (l memLocker) Acquire(ctx context.Context) (backends.Lease, error) {
	for {
		l.s.mu.Lock()
		if l.s.holder == 0 && !l.s.broken {
			l.s.fence++
			l.s.holder = int(l.s.fence)
			g := memGrant{l.s, l.s.fence}
			l.s.mu.Unlock()
			return g, nil
		}
		l.s.mu.Unlock()
		if err := wait.For(ctx, time.Millisecond); err != nil {
			return nil, err
		}
	}
}

type memGrant struct {
	s     *memLock
	fence uint64
}

func (g memGrant) Fence() uint64 { return g.fence }
func (g memGrant) Release(context.Context) error {
	g.s.mu.Lock()
	defer g.s.mu.Unlock()
	if g.s.holder == int(g.fence) {
		g.s.holder = 0
	}
	return nil
}

// memStore is a fencing.Store in memory.
type memStore struct {
	mu       sync.Mutex
	fenced   bool
	v        int64
	fence    uint64
	rejected uint64
}

func (s *memStore) check(fence uint64) error {
	if s.fenced && fence < s.fence {
		s.rejected++
		return fencing.ErrStale
	}
	s.fence = max(s.fence, fence)
	return nil
}
func (s *memStore) Read(_ context.Context, fence uint64) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.v, s.check(fence)
}
func (s *memStore) Write(_ context.Context, v int64, fence uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(fence); err != nil {
		return err
	}
	s.v = v
	return nil
}
func (s *memStore) Value(context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.v, nil
}
func (s *memStore) Fenced() bool                { return s.fenced }
func (s *memStore) Rejected() uint64            { s.mu.Lock(); defer s.mu.Unlock(); return s.rejected }
func (s *memStore) Close(context.Context) error { return nil }

// memCrash crashes a memLock: down for took, then it has forgotten its
// lock (forget) and its fence counter (reset).
type memCrash struct {
	s                     *memLock
	forget, reset, breaks bool
	took                  time.Duration
	report                faults.CrashReport
	syncedAt              uint64 // the fence counter when the load synced the service
}

func (f *memCrash) Applies(context.Context) error { return nil }
func (f *memCrash) Inject(context.Context) (func() error, error) {
	f.report.Killed = time.Now()
	time.Sleep(f.took)
	f.s.mu.Lock()
	if f.forget {
		f.s.holder = 0
	}
	if f.reset {
		f.s.fence = 0
	}
	f.s.broken = f.breaks
	f.s.mu.Unlock()
	f.report.Serving = time.Now()
	return nil, nil
}
func (f *memCrash) Span() faults.Span {
	return faults.Span{Lane: faults.ServiceLane, Kind: "crash", What: "crash mem"}
}
func (f *memCrash) Crashed() (faults.CrashReport, bool) { return f.report, !f.report.Serving.IsZero() }
func (f *memCrash) Sync() error {
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	f.syncedAt = f.s.fence
	return nil
}

// TestRestart: a service that forgets its lock in a crash lets B in while
// A's lease runs, and A's write loses B's update, unfenced; fenced, a
// fence counter that went back has B and every later holder refused
// (stuck), the counter kept; a service that remembers keeps B out for its
// window; one whose lock can no longer be granted has every section after
// A's stuck; a restart that leaves A no lease to write in ends the run
// without a verdict. The reason says what happened.
func TestRestart(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		fenced                bool
		forget, reset, breaks bool
		lease, took           time.Duration
		verdict               report.Verdict
		stuck                 int
		reason, err           string
	}{
		{"forgets, unfenced", false, true, true, false, 2 * time.Second, 0, report.Broken, 0, "after the restart the service no longer held A's lock: B was granted", ""},
		{"forgets, fenced", true, true, true, false, 2 * time.Second, 0, report.Kept, 4, "stuck: 4 of the 4 sections after the restart refused by the fenced store", ""},
		{"forgets the lock, not the fence, fenced", true, true, false, false, 2 * time.Second, 0, report.Kept, 0, "fences: A's 6, B's 7", ""},
		{"remembers", false, false, false, false, 2 * time.Second, 0, report.Kept, 0, "after the restart the service still held A's lock: B waited", ""},
		{"grants nothing after", true, false, false, true, 2 * time.Second, 0, report.Kept, 3, "after the restart no client was granted the lock", ""},
		{"restarts past the lease", false, false, false, false, 100 * time.Millisecond, 150 * time.Millisecond, "", 0, "", "past its lease"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := &memLock{}
			store := &memStore{fenced: tc.fenced}
			s := Setup{Backend: "mem", Scenario: "server-crash", Key: "k", Fenced: tc.fenced, Lease: tc.lease,
				NewLocker: func(_ context.Context, _ int, _ Dialer, lease time.Duration) (backends.Locker, error) {
					return memLocker{srv, lease}, nil
				},
				NewStore: func(context.Context, string, bool) (fencing.Store, error) { return store, nil },
			}
			f := &memCrash{s: srv, forget: tc.forget, reset: tc.reset, breaks: tc.breaks, took: tc.took}
			row, err := Execute(context.Background(), s, &Restart{Before: 4, After: 3, Window: 50 * time.Millisecond},
				Nemesis{Fault: func(*Fixture) faults.Fault { return f }})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("%v, want an error saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if row.Verdict != tc.verdict || row.Stuck != tc.stuck || !strings.Contains(row.Reason, tc.reason) {
				t.Fatalf("%s, stuck %d (%s), want %s, stuck %d, and %q", row.Verdict, row.Stuck, row.Reason, tc.verdict, tc.stuck, tc.reason)
			}
			if !strings.Contains(row.Reason, "the service was down") || !strings.Contains(row.Reason, "A wrote") {
				t.Errorf("the reason does not say what the restart did: %s", row.Reason)
			}
			if want := uint64(4); !tc.fenced && f.syncedAt != want {
				t.Errorf("the service was synced at fence %d, want after the 4 sections before A's (%d)", f.syncedAt, want)
			}
			if row.Writes < 4+1 {
				t.Errorf("%d writes: the sections before the crash and A's are missing", row.Writes)
			}
		})
	}
}
