package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/fencing"
)

// section is what a holder does while it holds the lock (nil: nothing).
type section func(ctx context.Context, lease backends.Lease) error

// increment is the critical section with a store write: the suite's own
// (read the counter with the grant's fence, write it plus one), without
// the work between the two.
func increment(s fencing.Store) section {
	return func(ctx context.Context, lease backends.Lease) error {
		v, err := s.Read(ctx, lease.Fence())
		if err != nil {
			return err
		}
		return s.Write(ctx, v+1, lease.Fence())
	}
}

// hold is the critical section that keeps the lock for d.
func hold(d time.Duration) section {
	return func(ctx context.Context, _ backends.Lease) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// round is what one window of a contention run measured.
type round struct {
	window      time.Duration
	perClient   []int
	cycle       Histogram // Acquire called → Release returned
	handoff     Histogram // a Release returned → the next grant
	longestWait time.Duration
	reads       int64 // reads from the lock service, all clients
	rejected    int   // sections the fenced store refused
	errs        int   // Acquires, sections and Releases that failed
	firstErr    error // the first of them, with its client
}

func (r *round) grants() int {
	n := 0
	for _, g := range r.perClient {
		n += g
	}
	return n
}

// finishTimeout bounds how long the clients may take to return once a run
// is over: a holder's section and Release, a waiter's Acquire seeing its
// context done.
const finishTimeout = 15 * time.Second

// ErrStuck is wrapped by the error of a run whose clients did not return
// within finishTimeout of its end: a Locker's Acquire that ignores its
// context, or a Release that hangs.
var ErrStuck = errors.New("bench: a client did not return after the run ended: Acquire must return once its context is done, and Release must return")

// client is one client's records, by window. Only its own goroutine
// writes them, but waitingSince, which the run reads at each window's end.
type client struct {
	grants   []int
	cycle    []Histogram
	handoff  []Histogram
	maxWait  []time.Duration
	rejected []int
	errs     []int
	firstErr error
	// waitingSince is 1 + when its current Acquire was called (since
	// the run's start, ns); 0 while it is not in Acquire.
	waitingSince atomic.Int64
}

// handoffs pairs each grant with the release of the grant before it:
// handoff of grant s+1 = its Acquire returned − grant s's Release
// returned. Grants are numbered inside the critical section.
type handoffs struct {
	mu       sync.Mutex
	seq      uint64
	granted  map[uint64]time.Duration // grant s, whose predecessor's release is not in yet
	released map[uint64]time.Duration // grant s's release, whose successor's grant is not in yet
}

func newHandoffs() *handoffs {
	return &handoffs{granted: map[uint64]time.Duration{}, released: map[uint64]time.Duration{}}
}

// grant numbers a grant at g and returns its number, and its handoff if
// its predecessor's Release has returned.
func (h *handoffs) grant(g time.Duration) (seq uint64, handoff time.Duration, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	seq = h.seq
	if r, found := h.released[seq-1]; found {
		delete(h.released, seq-1)
		return seq, g - r, true
	}
	if seq > 1 {
		h.granted[seq] = g
	}
	return seq, 0, false
}

// release records that grant seq's Release returned at r, and returns the
// handoff of the grant after it if that grant is in.
func (h *handoffs) release(seq uint64, r time.Duration) (handoff, granted time.Duration, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if g, found := h.granted[seq+1]; found {
		delete(h.granted, seq+1)
		return g - r, g, true
	}
	h.released[seq] = r
	return 0, 0, false
}

// contend runs the lockers as contending clients, each looping Acquire →
// sec → Release, for windows consecutive windows of length window, then
// stops them. It returns one round per window; the first is the warm-up.
// A grant belongs to the window in which its Acquire returned. reads, if
// not nil, is the running count of reads from the lock service.
func contend(ctx context.Context, lockers []backends.Locker, sec section, window time.Duration, windows int, reads func() int64) ([]round, error) {
	n := len(lockers)
	clients := make([]*client, n)
	for i := range clients {
		clients[i] = &client{grants: make([]int, windows), cycle: make([]Histogram, windows), handoff: make([]Histogram, windows),
			maxWait: make([]time.Duration, windows), rejected: make([]int, windows), errs: make([]int, windows)}
	}
	rounds := make([]round, windows)
	hs := newHandoffs()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	t0 := time.Now()
	since := func() time.Duration { return time.Since(t0) }
	windowOf := func(d time.Duration) int { return int(d / window) }
	g, gctx := errgroup.WithContext(runCtx)
	for id, l := range lockers {
		c := clients[id]
		g.Go(func() error { return c.loop(gctx, id, l, sec, hs, n > 1, since, windowOf, windows) })
	}
	// Each window's end: the reads so far, and the waits still going on.
	var readsBefore int64
	if reads != nil {
		readsBefore = reads()
	}
	timer := time.NewTimer(window)
	defer timer.Stop()
	for w := range windows {
		select {
		case <-timer.C:
		case <-gctx.Done():
		}
		if gctx.Err() != nil {
			break
		}
		end := since()
		timer.Reset(time.Duration(w+2)*window - end)
		for _, c := range clients {
			if ws := c.waitingSince.Load(); ws != 0 {
				rounds[w].longestWait = max(rounds[w].longestWait, end-time.Duration(ws-1))
			}
		}
		if reads != nil {
			now := reads()
			rounds[w].reads, readsBefore = now-readsBefore, now
		}
	}
	stop()
	done := make(chan error, 1)
	go func() { done <- g.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(finishTimeout):
		return nil, fmt.Errorf("%w (waited %v)", ErrStuck, finishTimeout)
	}
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	for w := range rounds {
		r := &rounds[w]
		r.window = window
		for _, c := range clients {
			r.perClient = append(r.perClient, c.grants[w])
			r.cycle.Merge(&c.cycle[w])
			r.handoff.Merge(&c.handoff[w])
			r.longestWait = max(r.longestWait, c.maxWait[w])
			r.rejected += c.rejected[w]
			r.errs += c.errs[w]
			if r.firstErr == nil && c.errs[w] > 0 {
				r.firstErr = c.firstErr
			}
		}
	}
	return rounds, nil
}

// retryPause is how long a client waits after a failed Acquire, section
// or Release before it goes on.
const retryPause = 10 * time.Millisecond

// failed counts err, which happened at d, in its window (the last one
// after the run), keeps the first, and pauses retryPause.
func (c *client) failed(ctx context.Context, id int, what string, err error, d time.Duration, windowOf func(time.Duration) int, windows int) {
	c.errs[min(windowOf(d), windows-1)]++
	if c.firstErr == nil {
		c.firstErr = fmt.Errorf("client %d: %s: %w", id, what, err)
	}
	t := time.NewTimer(retryPause)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// loop is one client: Acquire, the section, Release, until ctx is done.
// A grant whose Acquire returned after the last window is not counted. A
// failed Acquire, section or Release is counted (client.errs) and the
// client goes on, as an application would: a lock that fails now and then
// under load shows it in its figures, not by ending the point.
func (c *client) loop(ctx context.Context, id int, l backends.Locker, sec section, hs *handoffs, pairs bool, since func() time.Duration, windowOf func(time.Duration) int, windows int) error {
	// The section and the Release of the last grant run to their end
	// after the run stops, within finishTimeout.
	held := context.WithoutCancel(ctx)
	for ctx.Err() == nil {
		asked := since()
		c.waitingSince.Store(int64(asked) + 1)
		lease, err := l.Acquire(ctx)
		granted := since()
		c.waitingSince.Store(0)
		if err != nil {
			if ctx.Err() == nil {
				c.failed(ctx, id, "Acquire", err, granted, windowOf, windows)
			}
			continue
		}
		w := windowOf(granted)
		counted := w < windows
		var seq uint64
		if pairs {
			var h time.Duration
			var ok bool
			if seq, h, ok = hs.grant(granted); ok && counted {
				c.handoff[w].Add(h)
			}
		}
		if counted {
			c.grants[w]++
			c.maxWait[w] = max(c.maxWait[w], granted-asked)
		}
		if sec != nil {
			sctx, cancel := context.WithTimeout(held, finishTimeout)
			err := sec(sctx, lease)
			cancel()
			switch {
			case errors.Is(err, fencing.ErrStale):
				if counted {
					c.rejected[w]++
				}
			case err != nil:
				c.failed(ctx, id, "the critical section's store write", err, since(), windowOf, windows)
			}
		}
		rctx, cancel := context.WithTimeout(held, finishTimeout)
		err = lease.Release(rctx)
		cancel()
		released := since()
		if err != nil {
			c.failed(ctx, id, "Release", err, released, windowOf, windows)
			continue
		}
		if counted {
			c.cycle[w].Add(released - asked)
		}
		if pairs {
			if h, g, ok := hs.release(seq, released); ok {
				if gw := windowOf(g); gw < windows {
					c.handoff[gw].Add(h)
				}
			}
		}
	}
	return nil
}

// Dialer connects to the lock service (suite.Client.Dial).
type Dialer = func(ctx context.Context, network, address string) (net.Conn, error)

// directDial dials without a fault path.
func directDial(ctx context.Context, network, address string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, network, address)
}

// readCounter counts the reads that returned data on the connections made
// through its dialer: about one per reply of the lock service.
type readCounter struct{ n atomic.Int64 }

func (rc *readCounter) dial(d Dialer) Dialer {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		c, err := d(ctx, network, address)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: c, n: &rc.n}, nil
	}
}

func (rc *readCounter) count() int64 { return rc.n.Load() }

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.n.Add(1)
	}
	return n, err
}
