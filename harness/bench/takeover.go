package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/harness/faults"
)

// settle is how long the waiter waits for the lock, at least, before the
// holder is faulted, so that it has asked (queued, watched or polled) by
// then: a quarter of the TTL, at most 100 ms.
func settle(ttl time.Duration) time.Duration {
	if ttl > 0 {
		return min(100*time.Millisecond, ttl/4)
	}
	return 100 * time.Millisecond
}

// errNoPath: the holder dials nothing through its fault path.
var errNoPath = errors.New("the Locker makes no connection through the dialer it is given (suite.Client.Dial), so the harness cannot cut it off")

// takeovers times o.Rounds takeovers of each of o.Faults on the lock key:
// a holder (a new client each round, dialling through a fault path of its
// own) acquires; a waiter (one client for all rounds) asks; the holder is
// faulted; the takeover is the time from the fault to the waiter's grant,
// given up after bound. The fault strikes settle plus a random time
// below half the TTL after the grant, so that the rounds see it at
// different points of the holder's renewal cycle (every renewing Locker
// here renews at least every half TTL): a takeover from a frozen holder
// lies between the expiry less the renewal interval and the expiry. A
// lease that is not renewed (redis) is freed a TTL after its grant,
// whatever became of its holder: its takeover is what was left of it.
func takeovers(ctx context.Context, t Target, key string, o Options, bound time.Duration) []Takeover {
	var out []Takeover
	if len(o.Faults) == 0 {
		return nil
	}
	waiter, err := t.NewLocker(ctx, 0, key, directDial)
	if err != nil {
		for _, f := range o.Faults {
			out = append(out, Takeover{Fault: f, BoundMS: ms(bound), Error: fmt.Sprintf("NewLocker for the waiter: %v", err)})
		}
		return out
	}
	defer closeAll(ctx, []backends.Locker{waiter})
	ttl, _, _ := backends.TTLOf(waiter)
	for _, f := range o.Faults {
		tk := Takeover{Fault: f, BoundMS: ms(bound)}
		var times []float64
		for r := range o.Rounds {
			if ctx.Err() != nil {
				tk.Error = ctx.Err().Error()
				break
			}
			wait := settle(ttl)
			if ttl > 1 {
				wait += rand.N(ttl / 2)
			}
			d, ok, err := takeover(ctx, t, key, 1+r, waiter, f, wait, bound)
			if errors.Is(err, errNoPath) {
				tk.Skipped = err.Error()
				break
			}
			if err != nil {
				tk.Error = err.Error()
				break
			}
			tk.Rounds++
			if !ok {
				tk.TimedOut++
				continue
			}
			times = append(times, ms(d))
		}
		tk.TimeMS = StatOf(times)
		o.Progress(fmt.Sprintf("%s: takeover from a %s holder: %s", t.Name, f, tk.summary()))
		out = append(out, tk)
	}
	return out
}

func (tk Takeover) summary() string {
	switch {
	case tk.Skipped != "":
		return "skipped: " + tk.Skipped
	case tk.Error != "":
		return "failed: " + tk.Error
	case tk.TimedOut == tk.Rounds:
		return fmt.Sprintf("no grant within %.0f ms in %d rounds", tk.BoundMS, tk.Rounds)
	}
	s := fmt.Sprintf("%.0f ms (%.0f–%.0f)", tk.TimeMS.Median, tk.TimeMS.Min, tk.TimeMS.Max)
	if tk.TimedOut > 0 {
		s += fmt.Sprintf(", %d of %d rounds no grant within %.0f ms", tk.TimedOut, tk.Rounds, tk.BoundMS)
	}
	return s
}

type granted struct {
	lease backends.Lease
	err   error
	at    time.Time
}

// takeover times one takeover, the holder faulted wait after its grant:
// ok is false when the waiter got nothing within bound.
func takeover(ctx context.Context, t Target, key string, id int, waiter backends.Locker, f Fault, wait, bound time.Duration) (d time.Duration, ok bool, err error) {
	path := faults.NewPath()
	defer path.Close()
	holder, err := t.NewLocker(ctx, id, key, path.Dial)
	if err != nil {
		return 0, false, fmt.Errorf("NewLocker for the holder: %w", err)
	}
	heal := path.Heal
	var lease backends.Lease
	defer func() {
		// The holder comes back (a frozen one would; a killed one is gone,
		// and its client with it): give its lease up and close it.
		heal()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if lease != nil {
			_ = lease.Release(rctx)
		}
		_ = holder.Close()
	}()
	actx, cancel := context.WithTimeout(ctx, probeTimeout)
	lease, err = holder.Acquire(actx)
	cancel()
	grantedAt := time.Now()
	if err != nil {
		lease = nil
		return 0, false, fmt.Errorf("the holder's Acquire of a free lock: %w", err)
	}
	fault := path.Cut
	if f == Frozen {
		fault = path.Freeze
	}
	if path.Dials() == 0 {
		fz, isFreezer := holder.(backends.Freezer)
		if f != Frozen || !isFreezer {
			return 0, false, errNoPath
		}
		fault = func() { heal = fz.Freeze() }
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	got := make(chan granted, 1)
	go func() {
		l, err := waiter.Acquire(wctx)
		got <- granted{l, err, time.Now()}
	}()
	release := func(g granted) {
		if g.lease != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
			_ = g.lease.Release(rctx)
			cancel()
		}
	}
	select {
	case g := <-got:
		release(g)
		if g.err != nil {
			return 0, false, fmt.Errorf("the waiter's Acquire: %w", g.err)
		}
		return 0, false, fmt.Errorf("the waiter got the lock %v after the holder's grant, before any fault: a lease shorter than that, not renewed, or a broken lock", time.Since(grantedAt).Round(time.Millisecond))
	case <-time.After(wait):
	}
	t0 := time.Now()
	fault()
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case g := <-got:
		release(g)
		if g.err != nil {
			return 0, false, fmt.Errorf("the waiter's Acquire: %w", g.err)
		}
		return g.at.Sub(t0), true, nil
	case <-timer.C:
	case <-ctx.Done():
	}
	wcancel()
	select {
	case g := <-got:
		release(g)
	case <-time.After(finishTimeout):
		return 0, false, fmt.Errorf("%w (the waiter, %v after its context was done)", ErrStuck, finishTimeout)
	}
	if ctx.Err() != nil {
		return 0, false, ctx.Err()
	}
	return 0, false, nil
}
