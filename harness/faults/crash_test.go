package faults

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// crashable is a Service of one or more members that a test crashes.
type crashable struct {
	members []Member
	cannot  error // CanCrash's answer
	fails   error // Crash's error
	down    time.Duration
	crashes int
	syncs   int
}

func (s *crashable) Members() []Member             { return s.members }
func (s *crashable) Healthy(context.Context) error { return nil }
func (s *crashable) CanCrash(bool) error           { return s.cannot }
func (s *crashable) Sync() error                   { s.syncs++; return nil }
func (s *crashable) synced() int                   { return s.syncs }
func (s *crashable) Crash(_ context.Context, powerLoss bool) (CrashReport, error) {
	if s.fails != nil {
		return CrashReport{}, s.fails
	}
	s.crashes++
	r := CrashReport{PowerLoss: powerLoss, Killed: time.Now().Add(-s.down), Serving: time.Now()}
	if powerLoss {
		r.DroppedBytes, r.DroppedFiles = 81, []string{"data/appendonly.aof"}
	}
	return r, nil
}

// crashableCluster is crashable with a leader.
type crashableCluster struct{ *crashable }

func (c crashableCluster) Leader(context.Context) (Member, error) { return c.members[0], nil }

type named string

func (n named) Name() string { return string(n) }
func (named) Stop() error    { return nil }
func (named) Cont() error    { return nil }
func (named) Kill() error    { return nil }

// TestCrash: the crash applies to a Crasher that can crash so, single
// server or cluster as the fault says, and otherwise is skipped with the
// reason; struck, its span runs from the kill to the restart on the run's
// clock, says what a power loss dropped, and Crashed reports the crash.
func TestCrash(t *testing.T) {
	ctx := context.Background()
	one := &crashable{members: []Member{named("redis-server")}, down: 300 * time.Millisecond}
	three := crashableCluster{&crashable{members: []Member{named("etcd-1"), named("etcd-2"), named("etcd-3")}}}
	noFUSE := &crashable{members: one.members, cannot: fmt.Errorf("%w: not on lazyfs", errors.ErrUnsupported)}
	broken := &crashable{members: one.members, cannot: errors.New("cannot tell")}
	for _, tc := range []struct {
		name           string
		svc            Service
		power, cluster bool
		skip, err      string
	}{
		{"no servers", nil, false, false, "Config.Servers is nil", ""},
		{"embedded", &crashable{}, false, false, "Servers.Members is empty", ""},
		{"not a Crasher", &plainService{one.members}, false, false, "does not implement suite.Crasher", ""},
		{"single, cluster-crash", one, false, true, "a single server", ""},
		{"cluster, server-crash", three, false, false, "a cluster", ""},
		{"no FUSE", noFUSE, true, false, "not on lazyfs", ""},
		{"cannot tell", broken, false, false, "", "cannot tell"},
		{"single", one, false, false, "", ""},
		{"cluster", three, true, true, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &Crash{Service: tc.svc, PowerLoss: tc.power, Cluster: tc.cluster, Clock: func() time.Duration { return 10 * time.Second }}
			err := f.Applies(ctx)
			switch {
			case tc.skip != "":
				if !errors.Is(err, ErrNotApplicable) || !strings.Contains(err.Error(), tc.skip) {
					t.Fatalf("Applies: %v, want a skip saying %q", err, tc.skip)
				}
				return
			case tc.err != "":
				if err == nil || errors.Is(err, ErrNotApplicable) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Applies: %v, want an error (not a skip) saying %q", err, tc.err)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if _, ok := f.Crashed(); ok {
				t.Fatal("Crashed before the crash struck")
			}
			if err := f.Sync(); err != nil || tc.svc.(interface{ synced() int }).synced() != 1 {
				t.Fatalf("Sync: %v, want the service synced once", err)
			}
			log := NewLog(func() time.Duration { return 10 * time.Second })
			heal, err := log.Strike(ctx, f, false)
			if err != nil {
				t.Fatal(err)
			}
			if err := heal(); err != nil {
				t.Fatal(err)
			}
			r, ok := f.Crashed()
			sp := log.Spans()[0]
			if !ok || r.PowerLoss != tc.power || sp.Lane != ServiceLane || sp.Until != "serving again" {
				t.Fatalf("report %+v (%v), span %+v", r, ok, sp)
			}
			if got, want := sp.End-sp.Start, r.Down(); got < want-5*time.Millisecond || got > want+5*time.Millisecond {
				t.Errorf("span %v long, the service was down %v", got, want)
			}
			if tc.power != strings.Contains(sp.What, "dropped 81 B of 1 file (data/appendonly.aof)") || tc.power != (sp.Kind == "power loss") {
				t.Errorf("span %+v: with power loss %v, want kind and what to say so", sp, tc.power)
			}
			if tc.cluster && !strings.Contains(sp.What, "etcd-1, etcd-2, etcd-3") {
				t.Errorf("span %q does not name every member", sp.What)
			}
		})
	}

	// A crash that fails is an error naming what failed; one the service
	// turns out not to support is a skip.
	for _, tc := range []struct {
		fails error
		skip  bool
	}{
		{errors.New("after the crash: not healthy"), false},
		{fmt.Errorf("%w: consul -dev", errors.ErrUnsupported), true},
	} {
		svc := &crashable{members: one.members, fails: tc.fails}
		f := &Crash{Service: svc, Clock: func() time.Duration { return 0 }}
		_, err := f.Inject(ctx)
		if errors.Is(err, ErrNotApplicable) != tc.skip || !strings.Contains(err.Error(), strings.TrimPrefix(tc.fails.Error(), "unsupported operation: ")) {
			t.Errorf("Crash failing with %v: %v (skip %v)", tc.fails, err, tc.skip)
		}
		if tc.skip {
			continue
		}
		if !strings.Contains(err.Error(), "crash of redis-server") {
			t.Errorf("%v does not name the crash and the member", err)
		}
	}
}

// TestCrashReportDropped: what a power loss dropped, in a few words.
func TestCrashReportDropped(t *testing.T) {
	for _, tc := range []struct {
		r    CrashReport
		want string
	}{
		{CrashReport{}, "nothing"},
		{CrashReport{DroppedBytes: 44, DroppedFiles: []string{"a"}}, "44 B of 1 file (a)"},
		{CrashReport{DroppedBytes: 9, DroppedFiles: []string{"a", "b", "c", "d", "e"}}, "9 B of 5 files (a, b, c, and 2 more)"},
	} {
		if got := tc.r.Dropped(); got != tc.want {
			t.Errorf("Dropped() = %q, want %q", got, tc.want)
		}
	}
}

// plainService is a Service that is no Crasher.
type plainService struct{ members []Member }

func (s *plainService) Members() []Member             { return s.members }
func (s *plainService) Healthy(context.Context) error { return nil }
