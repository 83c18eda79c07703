package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/fencing"
)

// NoFence is why the fenced points of a lock without fencing tokens are
// skipped.
const NoFence = "the lock gives no fencing token (Lease.Fence() is 0): a fenced store has nothing to compare"

// NoStore is why the store-write points of a Target without NewStore are
// skipped.
const NoStore = "no counter store (Target.NewStore is nil)"

// probeTimeout bounds the first Acquire of a free lock.
const probeTimeout = 10 * time.Second

// Run measures t as o says: first every point with an empty critical
// section, one per number of clients, then the Hold points (Options.Hold),
// then the store-write points, each number of clients with each fencing
// mode in turn, then the takeovers. Each point, and the takeovers, have a
// lock and clients of their own. What fails is said in the Result
// (Result.Error, Point.Error, Takeover.Error), never returned: the other
// figures stand. Run leaves nothing behind: it releases what it holds,
// closes its clients, calls backends.Cleaner once per lock and closes its
// counters.
func Run(ctx context.Context, t Target, o Options) Result {
	o = o.withDefaults()
	res := Result{Backend: t.Name, Ceiling: t.Ceiling}
	if t.Name == "" || t.NewLocker == nil {
		res.Error = "bench: Target.Name and Target.NewLocker are required"
		return res
	}
	id := newRunID()
	expiry, hasTTL := points(ctx, t, id, o, &res)
	if !t.Ceiling && ctx.Err() == nil && res.Error == "" {
		bound := t.TakeoverBound
		switch {
		case bound > 0:
		case hasTTL:
			bound = 3*expiry + 2*time.Second
		default:
			bound = 30 * time.Second
		}
		res.Takeovers = takeovers(ctx, t, keyOf(t, id, "takeover"), o, bound)
	}
	return res
}

// points measures every point of t into res, each on a lock and clients
// of its own, closed before the next point, and returns the clients'
// Expiry and whether they declare a TTL. A lock of its own per point: the
// waiters a point abandons (their Acquire's context done) may stay queued
// on the server for a while (Postgres grants a pg_advisory_lock whose
// client has gone, then notices), or for good (an etcd Mutex key whose
// create committed as its Lock was cancelled waits for its own client to
// lock again), and must not weigh on the next point.
func points(ctx context.Context, t Target, id string, o Options, res *Result) (expiry time.Duration, hasTTL bool) {
	rc := &readCounter{}
	var reads func() int64
	if !t.Ceiling {
		reads = rc.count
	}
	first, err := makeLockers(ctx, t, 1, keyOf(t, id, "probe"), directDial)
	if err != nil {
		res.Error = err.Error()
		return 0, false
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	fence, err := probe(pctx, first[0])
	cancel()
	ttl, expiry, hasTTL := backends.TTLOf(first[0])
	closeAll(ctx, first)
	if err != nil {
		res.Error = err.Error()
		return 0, false
	}
	res.Fence = fence != 0
	res.LeaseMS, res.ExpiryMS = ms(ttl), ms(expiry)

	measure := func(n int, sec Section, fenced bool, do section) {
		p := Point{Clients: n, Section: sec, Fenced: fenced}
		lockers, err := makeLockers(ctx, t, n, keyOf(t, id, fmt.Sprintf("%s-%d-fenced-%v", sec, n, fenced)), rc.dial(directDial))
		switch {
		case ctx.Err() != nil:
			p.Error = ctx.Err().Error()
		case err != nil:
			p.Error = err.Error()
		default:
			p = point(ctx, lockers, sec, fenced, do, o, reads)
		}
		closeAll(ctx, lockers)
		if sec == Hold {
			p.HoldMS = ms(o.Hold)
		}
		o.Progress(fmt.Sprintf("%s: %s", t.Name, p.summary()))
		res.Points = append(res.Points, p)
	}
	for _, n := range o.Clients {
		measure(n, Empty, false, nil)
	}
	if o.Hold > 0 {
		for _, n := range o.Clients {
			if n > 1 {
				measure(n, Hold, false, hold(o.Hold))
			}
		}
	}
	// The store-write points: per number of clients, each fencing mode in
	// turn, so that a fenced point and its unfenced one run close in time
	// and a drift in the machine's load weighs on both alike.
	stores := map[bool]fencing.Store{}
	absent := map[bool]Point{} // why a mode's points do not run
	for _, f := range o.Fencing {
		switch {
		case t.NewStore == nil:
			absent[f] = Point{Skipped: NoStore}
		case f && !res.Fence:
			absent[f] = Point{Skipped: NoFence}
		default:
			s, err := t.NewStore(ctx, keyOf(t, id, fmt.Sprintf("counter-fenced-%v", f)), f)
			if err != nil {
				absent[f] = Point{Error: fmt.Sprintf("the counter store: %v", err)}
				continue
			}
			stores[f] = s
			defer s.Close(context.WithoutCancel(ctx))
		}
	}
	for _, n := range o.Clients {
		for _, f := range o.Fencing {
			if s := stores[f]; s != nil {
				measure(n, Write, f, increment(s))
				continue
			}
			p := absent[f]
			p.Clients, p.Section, p.Fenced = n, Write, f
			res.Points = append(res.Points, p)
		}
	}
	return expiry, hasTTL
}

// point runs one point: the lockers contend for o.Rounds+1 windows, the
// first discarded.
func point(ctx context.Context, lockers []backends.Locker, sec Section, fenced bool, do section, o Options, reads func() int64) Point {
	p := Point{Clients: len(lockers), Section: sec, Fenced: fenced}
	window := o.Duration / time.Duration(o.Rounds+1)
	rounds, err := contend(ctx, lockers, do, window, o.Rounds+1, reads)
	if err != nil {
		p.Error = err.Error()
		return p
	}
	for _, r := range rounds {
		if r.firstErr != nil && p.FirstError == "" {
			p.FirstError = r.firstErr.Error()
		}
	}
	return figures(p, rounds[1:])
}

// figures fills p with the figures of rounds (the warm-up left out).
func figures(p Point, rounds []round) Point {
	var perSec, jain, starved, wait, replies []float64
	var cycle, handoff []Latency
	p.Rounds = len(rounds)
	all := make([]int, p.Clients)
	for _, r := range rounds {
		for i, g := range r.perClient {
			all[i] += g
		}
		p.RoundMS = ms(r.window)
		g := r.grants()
		p.Grants += g
		p.Rejected += r.rejected
		p.Errors += r.errs
		perSec = append(perSec, float64(g)/r.window.Seconds())
		jain = append(jain, Jain(r.perClient))
		starved = append(starved, float64(Starved(r.perClient)))
		wait = append(wait, ms(r.longestWait))
		if g > 0 {
			replies = append(replies, float64(r.reads)/float64(g))
		}
		if r.cycle.N() > 0 {
			cycle = append(cycle, r.cycle.Latency())
		}
		if r.handoff.N() > 0 {
			handoff = append(handoff, r.handoff.Latency())
		}
	}
	p.GrantsPerSec, p.Jain, p.Starved, p.LongestWaitMS, p.RepliesPerGrant = StatOf(perSec), StatOf(jain), StatOf(starved), StatOf(wait), StatOf(replies)
	p.Fairness = FairnessOf(all)
	p.Cycle = distOf(cycle)
	if p.Clients > 1 && len(handoff) > 0 {
		d := distOf(handoff)
		p.Handoff = &d
	}
	return p
}

// distOf is the percentiles of each round, over the rounds.
func distOf(ls []Latency) Dist {
	pick := func(f func(Latency) time.Duration) Stat {
		var v []float64
		for _, l := range ls {
			v = append(v, ms(f(l)))
		}
		return StatOf(v)
	}
	return Dist{
		P50: pick(func(l Latency) time.Duration { return l.P50 }),
		P90: pick(func(l Latency) time.Duration { return l.P90 }),
		P99: pick(func(l Latency) time.Duration { return l.P99 }),
		Max: pick(func(l Latency) time.Duration { return l.Max }),
	}
}

// summary is the point in one line, for progress.
func (p Point) summary() string {
	what := fmt.Sprintf("%s, %s section", clients(p.Clients), p.Section)
	if p.Section == Hold {
		what += fmt.Sprintf(" of %.0f ms", p.HoldMS)
	}
	if p.Section == Write {
		what += fmt.Sprintf(", fencing %s", onOff(p.Fenced))
	}
	switch {
	case p.Skipped != "":
		return what + ": skipped: " + p.Skipped
	case p.Error != "":
		return what + ": failed: " + p.Error
	}
	s := fmt.Sprintf("%s: %.0f grants/s (%.0f–%.0f), p50 %.3f ms, Jain %.2f (fairest %.2f), %d starved (fewest %d)", what,
		p.GrantsPerSec.Median, p.GrantsPerSec.Min, p.GrantsPerSec.Max, p.Cycle.P50.Median, p.Fairness.Jain, p.Fairness.FairestJain, p.Fairness.Starved, p.Fairness.FewestStarved)
	if p.FirstError != "" {
		s += fmt.Sprintf("; %d failed in the rounds, the first: %s", p.Errors, p.FirstError)
	}
	return s
}

// clients is "1 client" or "n clients".
func clients(n int) string {
	if n == 1 {
		return "1 client"
	}
	return fmt.Sprintf("%d clients", n)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// makeLockers makes n clients of the lock key, a few at a time. On an
// error it closes those it made and returns the first error.
func makeLockers(ctx context.Context, t Target, n int, key string, dial Dialer) ([]backends.Locker, error) {
	out := make([]backends.Locker, n)
	var g errgroup.Group
	g.SetLimit(8)
	for id := range n {
		g.Go(func() error {
			l, err := t.NewLocker(ctx, id, key, dial)
			if err == nil && l == nil {
				err = errors.New("NewLocker returned a nil Locker")
			}
			if err != nil {
				return fmt.Errorf("bench: %s: NewLocker for client %d: %w", t.Name, id, err)
			}
			out[id] = l
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		closeAll(ctx, slices.DeleteFunc(out, func(l backends.Locker) bool { return l == nil }))
		return nil, err
	}
	return out, nil
}

// probe acquires and releases the lock once, within ctx, and returns the
// grant's fence.
func probe(ctx context.Context, l backends.Locker) (uint64, error) {
	lease, err := l.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("bench: the first Acquire of a free lock: %w", err)
	}
	fence := lease.Fence()
	if err := lease.Release(ctx); err != nil {
		return 0, fmt.Errorf("bench: releasing the first lease: %w", err)
	}
	return fence, nil
}

// closeAll closes the clients of one lock, the first last: the others
// (at once), then the first's backends.Cleaner, then the first.
func closeAll(ctx context.Context, lockers []backends.Locker) {
	if len(lockers) == 0 {
		return
	}
	var wg sync.WaitGroup
	for _, l := range lockers[1:] {
		wg.Go(func() { _ = l.Close() })
	}
	wg.Wait()
	if c, ok := lockers[0].(backends.Cleaner); ok {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_ = c.Cleanup(cctx)
		cancel()
	}
	_ = lockers[0].Close()
}
