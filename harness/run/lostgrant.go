package run

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/traffic"
	"github.com/locksuite/locksuite/internal/wait"
)

// LostGrant is a lost grant reply (a SET NX that timed out but succeeded;
// node-redlock#296): the run's fault (replies dropped on A's path) strikes
// before A (client 0) asks for the free lock, with a timeout: A's request
// reaches the service, which may grant it, and A hears nothing and is told
// its Acquire failed when its timeout ends (or its client library's own,
// if it does not heed the context sooner). B (client 1) asks a moment after
// A (once A's path carried A's request, the settle: a quarter of the lease,
// from 20 to 100 ms), and so measures how long nobody could take the lock. Once A is told, the fault heals (the
// connections that lost replies are closed) and A retries. A's retry and B
// each run one critical section.
//
// Kept: no second grant while one is valid; the counter judges A's retry
// and B's section as usual. The reason says when A was told it failed,
// whether the service held the lock for A (B waited at least a quarter of
// the lease) and for how long after A was told, and when A's retry was
// granted.
type LostGrant struct {
	// Timeout is A's Acquire timeout while its replies are dropped. 0:
	// half the lease, at least 100 ms.
	Timeout time.Duration
}

// Prepare makes A and B, each through its own path; A acquires and
// releases once, so that its path is used (and a kept connection is open
// when the fault strikes).
func (LostGrant) Prepare(ctx context.Context, fx *Fixture) error { return fx.Standard(ctx, 2, true) }

func (g LostGrant) Planned(fx *Fixture) time.Duration { return g.timeout(fx) + fx.Expiry() }

func (g LostGrant) timeout(fx *Fixture) time.Duration {
	if g.Timeout > 0 {
		return g.Timeout
	}
	return max(fx.TTL()/2, 100*time.Millisecond)
}

// settle is how long a second client waits before it asks: long enough for
// the first client's request to reach the service.
func settle(fx *Fixture) time.Duration {
	return min(max(fx.TTL()/4, 20*time.Millisecond), 100*time.Millisecond)
}

// sent is what path p has sent so far (0 for a client that dials
// directly).
func sent(p *faults.Path) int64 {
	if p == nil {
		return 0
	}
	return p.Sent()
}

// waitAsked waits until client i's request is out: its path has sent more
// than before (at most the stall bound), and then nothing for the settle
// (a client that connects first sends its handshake, then its request,
// then waits in silence), or for four settles in all, at most half the
// lease (a client that polls is never silent; the holder's lease, if it is
// not renewed, must not run out meanwhile). Without a path, it waits the
// settle.
func waitAsked(ctx context.Context, fx *Fixture, i int, before int64) {
	p, s := fx.Paths[i], settle(fx)
	if p == nil {
		_ = wait.For(ctx, s)
		return
	}
	deadline := time.Now().Add(fx.StallBound())
	for p.Sent() <= before && time.Now().Before(deadline) && wait.For(ctx, time.Millisecond) == nil {
	}
	last, changed, end := p.Sent(), time.Now(), time.Now().Add(min(4*s, max(fx.TTL()/2, s)))
	for time.Since(changed) < s && time.Now().Before(end) && wait.For(ctx, time.Millisecond) == nil {
		if n := p.Sent(); n != last {
			last, changed = n, time.Now()
		}
	}
}

func (g LostGrant) Run(ctx context.Context, fx *Fixture, f faults.Fault) (Outcome, error) {
	a, b, rec := fx.Lockers[0], fx.Lockers[1], fx.Rec
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(ctx, 2*probeTimeout+g.timeout(fx)+2*fx.StallBound())
	defer cancel()

	heal, err := fx.Log.Strike(ctx, f, false)
	if err != nil {
		return Outcome{}, err
	}
	type acquired struct {
		l   backends.Lease
		err error
	}
	asked, sentA := rec.Now(), sent(fx.Paths[0])
	aDone := make(chan acquired, 1)
	go func() {
		actx, cancelA := context.WithTimeout(ctx, g.timeout(fx))
		defer cancelA()
		l, err := traffic.Acquire(actx, a)
		aDone <- acquired{l, err}
	}()

	var (
		wg      sync.WaitGroup
		granted [2]time.Duration
		errs    [2]error
	)
	section := func(i int, l backends.Locker) {
		defer wg.Done()
		sctx, cancelS := context.WithTimeout(ctx, fx.StallBound())
		defer cancelS()
		errs[i] = traffic.Increment(sctx, i, l, fx.Store, rec, fx.Work, traffic.Hooks{
			Granted: func(backends.Lease) { granted[i] = rec.Now() },
		})
	}
	waitAsked(ctx, fx, 0, sentA)
	bAsked := rec.Now()
	wg.Add(1)
	go section(1, b)

	first := <-aDone
	told := rec.Now()
	if err := heal(); err != nil {
		return Outcome{}, err
	}
	var notes []string
	if first.err == nil {
		// A heard of its grant after all (a reply that came through, or a
		// lock granted on a connection the fault never saw): it releases,
		// and retries as it would have.
		notes = append(notes, fmt.Sprintf("A's Acquire returned a lease despite the dropped replies, %v after it asked", (told-asked).Round(time.Millisecond)))
		rctx, cancelR := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = first.l.Release(rctx)
		cancelR()
	} else {
		notes = append(notes, fmt.Sprintf("A was told its Acquire failed %v after it asked (its timeout %v): %v", (told-asked).Round(time.Millisecond), g.timeout(fx), first.err))
	}
	wg.Add(1)
	go section(0, a) // A's retry
	wg.Wait()
	for i, err := range errs {
		if err != nil && granted[i] != 0 && !errors.Is(err, fencing.ErrStale) {
			return Outcome{}, fmt.Errorf("client %s: %w", "AB"[i:i+1], err)
		}
	}
	notes = append(notes, lostGrantNotes(asked, bAsked, told, granted, errs, fx.TTL())...)
	return Outcome{Elapsed: time.Since(t0), Note: strings.Join(notes, "; ")}, nil
}

// lostGrantNotes says how long nobody could take the lock after A asked
// (B asked at bAsked and was granted at granted[1]), whether the service
// held it for A after A was told its Acquire failed (at told), and when
// A's retry was granted (granted[0]).
func lostGrantNotes(asked, bAsked, told time.Duration, granted [2]time.Duration, errs [2]error, ttl time.Duration) []string {
	var notes []string
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	switch bGot := granted[1]; {
	case bGot == 0:
		notes = append(notes, fmt.Sprintf("B was not granted: %v", errs[1]))
	case bGot-bAsked < ttl/4:
		notes = append(notes, fmt.Sprintf("the service held nothing for A: B was granted %v after it asked", ms(bGot-bAsked)))
	case bGot > told:
		notes = append(notes, fmt.Sprintf("the service held the lock for A after A was told it failed: nobody could take it for %v after A asked, %v after A was told (lease %v)", ms(bGot-asked), ms(bGot-told), ttl))
	default:
		notes = append(notes, fmt.Sprintf("the service held the lock for A, and freed it before A was told it failed: nobody could take it for %v after A asked (lease %v)", ms(bGot-asked), ttl))
	}
	if granted[0] == 0 {
		notes = append(notes, fmt.Sprintf("A's retry was not granted: %v", errs[0]))
	} else {
		notes = append(notes, fmt.Sprintf("A's retry was granted %v after A was told it failed", ms(granted[0]-told)))
	}
	return notes
}
