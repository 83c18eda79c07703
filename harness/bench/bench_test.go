package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/locksuite/locksuite/backends"
)

// small sizes every test bench: 4 windows of 50 ms, the first discarded.
var small = Options{Duration: 200 * time.Millisecond, Rounds: 3, Fencing: []bool{}, NoTakeover: true}

// served is a lock that only ever grants client 0 (at once); every other
// client waits until its context is done.
func served(ctx context.Context, id int, _ string, _ Dialer) (backends.Locker, error) {
	return &servedLocker{id: id}, nil
}

type servedLocker struct{ id int }

func (l *servedLocker) Acquire(ctx context.Context) (backends.Lease, error) {
	if l.id == 0 {
		return grant{}, nil
	}
	<-ctx.Done()
	return nil, fmt.Errorf("served: %w", ctx.Err())
}

func (l *servedLocker) Close() error { return nil }

type grant struct{}

func (grant) Fence() uint64                 { return 1 }
func (grant) Release(context.Context) error { return nil }

// TestOneClientServed: a lock that serves one client of n gives Jain's
// index 1/n and n-1 starved clients, where the fairest spread of its
// grants would have starved none.
func TestOneClientServed(t *testing.T) {
	o := small
	o.Clients = []int{1, 3, 4}
	res := Run(context.Background(), Target{Name: "served", NewLocker: served}, o)
	if res.Error != "" {
		t.Fatal(res.Error)
	}
	for _, n := range o.Clients {
		p, ok := res.Point(n, Empty, false)
		if !ok {
			t.Fatalf("%d clients: point did not run: %+v", n, p)
		}
		f := p.Fairness
		if f.GrantsPerClient[0] == 0 || f.GrantsPerClient[0] != p.Grants {
			t.Fatalf("%d clients: client 0 got %d of %d grants, want all and some", n, f.GrantsPerClient[0], p.Grants)
		}
		if math.Abs(f.Jain-1/float64(n)) > 1e-12 || f.Starved != n-1 {
			t.Errorf("%d clients: Jain %v, %d starved; want %v, %d", n, f.Jain, f.Starved, 1/float64(n), n-1)
		}
		if p.Grants >= n && (f.FairestJain < 0.99 || f.FewestStarved != 0) {
			t.Errorf("%d clients, %d grants: fairest Jain %v, fewest starved %d; want about 1 and 0", n, p.Grants, f.FairestJain, f.FewestStarved)
		}
		if p.Rounds != 3 || p.RoundMS != 50 {
			t.Errorf("%d clients: %d rounds of %v ms, want 3 of 50", n, p.Rounds, p.RoundMS)
		}
		if (n > 1) != (p.Handoff != nil) {
			t.Errorf("%d clients: handoff %v: want one with 2 clients or more", n, p.Handoff)
		}
	}
	if res.Fence != true || len(res.Takeovers) != 0 {
		t.Errorf("fence %v, takeovers %v: want a fence and none timed", res.Fence, res.Takeovers)
	}
}

// flaky is a lock whose every other Acquire fails at once.
type flaky struct {
	backends.Locker
	n int
}

func (l *flaky) Acquire(ctx context.Context) (backends.Lease, error) {
	if l.n++; l.n%2 == 0 {
		return nil, errors.New("flaky: connection reset")
	}
	return l.Locker.Acquire(ctx)
}

// TestFailuresCounted: a client whose Acquire fails goes on; the point
// counts the failures, keeps the first, and still measures the grants.
func TestFailuresCounted(t *testing.T) {
	m := Mutex(nil)
	target := Target{Name: "flaky", NewLocker: func(ctx context.Context, id int, key string, dial Dialer) (backends.Locker, error) {
		l, err := m.NewLocker(ctx, id, key, dial)
		return &flaky{Locker: l}, err
	}}
	o := small
	o.Clients = []int{2}
	res := Run(context.Background(), target, o)
	p, ok := res.Point(2, Empty, false)
	if !ok || p.Grants == 0 || p.Errors == 0 || !strings.Contains(p.FirstError, "Acquire: flaky: connection reset") {
		t.Errorf("point %+v: want grants, and the failures counted with the first", p)
	}
}

// delayed is the in-process lock, each of whose grants takes delay.
func delayed(delay time.Duration) Target {
	m := Mutex(nil)
	return Target{Name: "delayed", NewLocker: func(ctx context.Context, id int, key string, dial Dialer) (backends.Locker, error) {
		l, err := m.NewLocker(ctx, id, key, dial)
		return &delayedLocker{l, delay}, err
	}}
}

type delayedLocker struct {
	backends.Locker
	delay time.Duration
}

func (l *delayedLocker) Acquire(ctx context.Context) (backends.Lease, error) {
	lease, err := l.Locker.Acquire(ctx)
	if err == nil {
		time.Sleep(l.delay)
	}
	return lease, err
}

// TestKnownDelay: a lock whose grant takes 5 ms gives an acquire +
// release latency of at least 5 ms, at every percentile of every round;
// holding it 3 ms more, at least 8 ms.
func TestKnownDelay(t *testing.T) {
	const delay, holding = 5 * time.Millisecond, 3 * time.Millisecond
	o := small
	o.Clients, o.Hold = []int{1, 2}, holding
	res := Run(context.Background(), delayed(delay), o)
	for _, c := range []struct {
		n     int
		sec   Section
		least time.Duration
	}{{1, Empty, delay}, {2, Empty, delay}, {2, Hold, delay + holding}} {
		n := c.n
		p, ok := res.Point(n, c.sec, false)
		if !ok {
			t.Fatalf("%d clients, %s: %+v", n, c.sec, p)
		}
		if lo := p.Cycle.P50.Min; lo < ms(c.least) {
			t.Errorf("%d clients, %s: p50 latency %v ms in a round, below %v", n, c.sec, lo, c.least)
		}
		if p.Cycle.Max.Max < p.Cycle.P99.Max || p.Cycle.P99.Min < p.Cycle.P50.Min {
			t.Errorf("%d clients: percentiles out of order: %+v", n, p.Cycle)
		}
		if gps := p.GrantsPerSec.Max; gps > float64(time.Second/delay) {
			t.Errorf("%d clients: %v grants/s, more than one per %v allows", n, gps, delay)
		}
	}
}

// TestFigures: the figures of known rounds.
func TestFigures(t *testing.T) {
	mk := func(perClient []int, reads int64, wait time.Duration, cycle ...time.Duration) round {
		r := round{window: time.Second, perClient: perClient, reads: reads, longestWait: wait}
		for _, c := range cycle {
			r.cycle.Add(c)
		}
		return r
	}
	p := figures(Point{Clients: 2}, []round{
		mk([]int{10, 0}, 100, time.Second, time.Millisecond),
		mk([]int{10, 10}, 400, 2*time.Second, 3*time.Millisecond),
		mk([]int{30, 0}, 300, 3*time.Second, 2*time.Millisecond),
	})
	if p.GrantsPerSec != (Stat{10, 20, 30}) {
		t.Errorf("grants/s %+v, want 10, 20, 30", p.GrantsPerSec)
	}
	if p.RepliesPerGrant != (Stat{10, 10, 20}) {
		t.Errorf("replies per grant %+v, want 10, 10, 20", p.RepliesPerGrant)
	}
	if p.Cycle.P50 != (Stat{1, 2, 3}) || p.Cycle.Max != (Stat{1, 2, 3}) {
		t.Errorf("cycle %+v, want p50 and max 1, 2, 3 ms", p.Cycle)
	}
	if p.LongestWaitMS != (Stat{1000, 2000, 3000}) || p.Starved != (Stat{0, 1, 1}) || p.Jain != (Stat{0.5, 0.5, 1}) {
		t.Errorf("longest wait %+v, starved %+v, Jain %+v", p.LongestWaitMS, p.Starved, p.Jain)
	}
	if f := p.Fairness; f.GrantsPerClient[0] != 50 || f.GrantsPerClient[1] != 10 || p.Grants != 60 {
		t.Errorf("fairness %+v, grants %d: want 50 and 10 of 60", f, p.Grants)
	}
}

// TestHandoffs: each grant is paired with its predecessor's release,
// whichever comes in first.
func TestHandoffs(t *testing.T) {
	h := newHandoffs()
	if s, _, ok := h.grant(10); s != 1 || ok {
		t.Fatalf("the first grant is %d, paired %v", s, ok)
	}
	// Release of 1 before grant 2: grant 2 pairs.
	if _, _, ok := h.release(1, 15); ok {
		t.Fatal("release 1 paired before grant 2")
	}
	if s, d, ok := h.grant(18); s != 2 || !ok || d != 3 {
		t.Fatalf("grant 2: %d, %v, %v; want 2, 3, true", s, d, ok)
	}
	// Grant 3 before release of 2 (its reply was slow): the release pairs.
	if s, _, ok := h.grant(20); s != 3 || ok {
		t.Fatalf("grant 3: %d, paired %v", s, ok)
	}
	if d, g, ok := h.release(2, 25); !ok || d != -5 || g != 20 {
		t.Fatalf("release 2: %v, %v, %v; want -5, 20, true", d, g, ok)
	}
	if len(h.granted) != 0 || len(h.released) != 0 {
		t.Errorf("left unpaired: %v, %v", h.granted, h.released)
	}
}

// TestFencingOverhead: fenced over unfenced grants per second, only when
// both ran.
func TestFencingOverhead(t *testing.T) {
	r := Result{Points: []Point{
		{Clients: 4, Section: Write, Rounds: 3, GrantsPerSec: Stat{90, 100, 110}},
		{Clients: 4, Section: Write, Fenced: true, Rounds: 3, GrantsPerSec: Stat{70, 80, 85}},
		{Clients: 16, Section: Write, Rounds: 3, GrantsPerSec: Stat{1, 2, 3}},
		{Clients: 16, Section: Write, Fenced: true, Skipped: NoFence},
	}}
	if v, ok := r.FencingOverhead(4); !ok || v != 0.8 {
		t.Errorf("overhead at 4: %v, %v; want 0.8", v, ok)
	}
	if _, ok := r.FencingOverhead(16); ok {
		t.Error("overhead at 16 with the fenced point skipped")
	}
}

// tracked counts what Run does to its clients.
type tracked struct {
	mu            sync.Mutex
	made, closed  int
	cleanups      int
	openAtCleanup []int
	closedTwice   bool
}

type trackedLocker struct {
	backends.Locker
	t      *tracked
	closed bool
}

func (l *trackedLocker) Close() error {
	l.t.mu.Lock()
	defer l.t.mu.Unlock()
	if l.closed {
		l.t.closedTwice = true
	}
	l.closed = true
	l.t.closed++
	return l.Locker.Close()
}

func (l *trackedLocker) Cleanup(context.Context) error {
	l.t.mu.Lock()
	defer l.t.mu.Unlock()
	l.t.cleanups++
	l.t.openAtCleanup = append(l.t.openAtCleanup, l.t.made-l.t.closed)
	return nil
}

// TestRunLeavesNothing: every client Run makes is closed once, and each
// lock's state (a lock per point) is cleaned up once, by its last open
// client; a target
// without a store skips the store-write points and says why; a client that
// dials nothing cannot be killed or frozen through its path, and its
// takeovers are skipped with the reason.
func TestRunLeavesNothing(t *testing.T) {
	tr := &tracked{}
	m := Mutex(nil)
	target := Target{Name: "tracked", NewLocker: func(ctx context.Context, id int, key string, dial Dialer) (backends.Locker, error) {
		l, err := m.NewLocker(ctx, id, key, dial)
		tr.mu.Lock()
		defer tr.mu.Unlock()
		tr.made++
		return &trackedLocker{Locker: l, t: tr}, err
	}}
	o := small
	o.Clients, o.Fencing, o.NoTakeover, o.Rounds = []int{1, 3}, []bool{false, true}, false, 1
	res := Run(context.Background(), target, o)
	if res.Error != "" {
		t.Fatal(res.Error)
	}
	if tr.made != tr.closed || tr.closedTwice {
		t.Errorf("%d clients made, %d closed (twice: %v)", tr.made, tr.closed, tr.closedTwice)
	}
	// One lock for the probe, one for each point that ran (1 and 3
	// clients, empty), one for the takeovers; each cleaned up by its last
	// open client.
	if tr.cleanups != 4 || !slices.Equal(tr.openAtCleanup, []int{1, 1, 1, 1}) {
		t.Errorf("%d cleanups, with %v clients open; want 4, each with 1", tr.cleanups, tr.openAtCleanup)
	}
	for _, f := range []bool{false, true} {
		if p, _ := res.Point(3, Write, f); p.Skipped != NoStore {
			t.Errorf("store write, fencing %v: %+v, want skipped: %s", f, p, NoStore)
		}
	}
	if len(res.Takeovers) != 2 {
		t.Fatalf("takeovers %+v, want killed and frozen", res.Takeovers)
	}
	for _, tk := range res.Takeovers {
		if !strings.Contains(tk.Skipped, "no connection through the dialer") {
			t.Errorf("takeover %s: %+v, want skipped: the Locker dials nothing", tk.Fault, tk)
		}
	}
}

// TestMutex: the in-process lock keeps the Locker contract.
func TestMutex(t *testing.T) {
	ctx := context.Background()
	m := Mutex(nil)
	a, _ := m.NewLocker(ctx, 0, "k", nil)
	b, _ := m.NewLocker(ctx, 1, "k", nil)
	other, _ := m.NewLocker(ctx, 2, "other", nil)
	la, err := a.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Acquire(ctx); err != nil {
		t.Fatalf("another name is another lock: %v", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := b.Acquire(cctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire of a held lock: %v, want the context's error", err)
	}
	_ = la.Release(ctx)
	_ = la.Release(ctx) // idempotent: one token, not two
	lb, err := b.Acquire(ctx)
	if err != nil || lb.Fence() <= la.Fence() {
		t.Fatalf("Acquire after Release: %v, fence %d after %d", err, lb.Fence(), la.Fence())
	}
	cctx2, cancel2 := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel2()
	if _, err := a.Acquire(cctx2); err == nil {
		t.Fatal("a double Release let two clients hold the lock")
	}
	_ = b.Close()
	if _, err := b.Acquire(ctx); !errors.Is(err, backends.ErrClosed) {
		t.Errorf("Acquire after Close: %v, want ErrClosed", err)
	}
}

// TestCountingConn: a read that returns data counts once; one that
// returns none (EOF) does not.
func TestCountingConn(t *testing.T) {
	server, client := net.Pipe()
	var rc readCounter
	conn, err := rc.dial(func(context.Context, string, string) (net.Conn, error) { return client, nil })(context.Background(), "tcp", "x")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for _, m := range []string{"one", "two", "three"} {
			_, _ = server.Write([]byte(m))
		}
		server.Close()
	}()
	buf := make([]byte, 64)
	for {
		if _, err := conn.Read(buf); err == io.EOF {
			break
		}
	}
	if rc.count() != 3 {
		t.Errorf("%d reads counted, want 3", rc.count())
	}
}
