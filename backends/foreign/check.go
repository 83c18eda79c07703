package foreign

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/locksuite/locksuite/backends"
)

// Check walks the protocol with two clients, A and B, of one lock, as
// docs/protocol.md's "Checking a worker" describes: the handshake, A's
// acquire, B's acquire timing out while A holds the lock, A's release and
// a second release of the same lease, B's grant with a greater fence; with
// the ttl capability, B's lease expiring while B is stopped (SIGSTOP),
// A's grant, B's stale release freeing nothing (and, with lost, whether B
// was told); cleanup and close. It prints each step to out, and its error
// names the first step that went wrong. start makes client n's Locker
// (New, with Config.Client n); Check closes them. Give the workers a lease
// of a second or more: a lease that is not renewed must outlive the steps
// of one holder.
func Check(ctx context.Context, start func(ctx context.Context, client int) (*Locker, error), out io.Writer) error {
	c := &checker{ctx: ctx, out: out}
	err := c.run(start)
	for _, l := range c.lockers {
		if cerr := l.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close: %w", cerr)
		}
	}
	if err != nil {
		fmt.Fprintf(out, "FAIL %v\n", err)
		return err
	}
	fmt.Fprintln(out, "ok   the worker speaks protocol 1")
	return nil
}

type checker struct {
	ctx     context.Context
	out     io.Writer
	lockers []*Locker
}

func (c *checker) ok(format string, args ...any) { fmt.Fprintf(c.out, "ok   "+format+"\n", args...) }

// acquire is l.Acquire within d.
func (c *checker) acquire(l *Locker, d time.Duration) (backends.Lease, time.Duration, error) {
	ctx, cancel := context.WithTimeout(c.ctx, d)
	defer cancel()
	t := time.Now()
	ls, err := l.Acquire(ctx)
	return ls, time.Since(t), err
}

// mustWait checks that l is not granted the lock for a while: half the
// TTL (the holder's lease must not expire meanwhile), at most 500 ms.
func (c *checker) mustWait(l *Locker, who string) error {
	d := 500 * time.Millisecond
	if l.Has(CapTTL) {
		d = min(d, l.TTL()/2)
	}
	ls, _, err := c.acquire(l, d)
	if err == nil {
		_ = ls.Release(c.ctx)
		return fmt.Errorf("%s was granted the lock while another client held it (acquire_ok to %s)", who, who)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s's acquire while another client held the lock: want error timeout, got %w", who, err)
	}
	return nil
}

func (c *checker) release(ls backends.Lease, who string, want bool) error {
	if err := ls.Release(c.ctx); err != nil {
		return fmt.Errorf("%s's release: %w", who, err)
	}
	if got := leaseOf(ls).held; got != want {
		return fmt.Errorf("%s's release: release_ok held %v, want %v", who, got, want)
	}
	return nil
}

func leaseOf(ls backends.Lease) *lease {
	if n, ok := ls.(*noticeLease); ok {
		return n.lease
	}
	return ls.(*lease)
}

func (c *checker) run(start func(ctx context.Context, client int) (*Locker, error)) error {
	t := time.Now()
	a, err := start(c.ctx, 0)
	if err != nil {
		return fmt.Errorf("client A's handshake: %w", err)
	}
	c.lockers = append(c.lockers, a)
	lib := a.Library()
	c.ok("handshake: %s, capabilities [%s], ttl %v, expiry %v (started in %v)", lib, strings.Join(lib.Capabilities, " "), a.TTL(), a.Expiry(), time.Since(t).Round(time.Millisecond))
	b, err := start(c.ctx, 1)
	if err != nil {
		return fmt.Errorf("client B's handshake: %w", err)
	}
	c.lockers = append(c.lockers, b)
	if bl := b.Library(); bl.String() != lib.String() {
		return fmt.Errorf("client B's handshake: %s, but A's said %s", bl, lib)
	}

	a1, d, err := c.acquire(a, 10*time.Second)
	if err != nil {
		return fmt.Errorf("A's acquire of a free lock: %w", err)
	}
	c.ok("A acquires the free lock in %v (lease %q, fence %d)", d.Round(time.Millisecond), leaseOf(a1).id, a1.Fence())
	if err := c.mustWait(b, "B"); err != nil {
		return err
	}
	c.ok("B's acquire times out while A holds the lock")
	if err := c.release(a1, "A", true); err != nil {
		return err
	}
	c.ok("A releases (held true)")
	m, err := a.do(c.ctx, request{Type: "release", Lease: leaseOf(a1).id}, 10*time.Second, nil)
	var we *Error
	switch {
	case errors.As(err, &we) && we.Code == "not-held":
	case err != nil:
		return fmt.Errorf("A's second release of lease %q: %w", leaseOf(a1).id, err)
	case m.Type != "release_ok" || m.Held == nil || *m.Held:
		return fmt.Errorf("A's second release of lease %q: want release_ok with held false, got %q", leaseOf(a1).id, clip(m.line))
	}
	c.ok("A's second release of the same lease: release_ok, held false")

	b1, d, err := c.acquire(b, 10*time.Second)
	if err != nil {
		return fmt.Errorf("B's acquire of the released lock: %w", err)
	}
	c.ok("B acquires in %v (fence %d)", d.Round(time.Millisecond), b1.Fence())
	if a.Has(CapFence) && b1.Fence() <= a1.Fence() {
		return fmt.Errorf("fence: B's grant after A's has fence %d, not greater than A's %d", b1.Fence(), a1.Fence())
	}
	if !a.Has(CapTTL) {
		c.ok("no ttl capability: the expiry of a stopped holder's lease is not checked")
		return c.end(a, b, b1)
	}
	thaw := b.Freeze()
	a2, d, err := c.acquire(a, 2*a.Expiry()+10*time.Second)
	thaw()
	if err != nil {
		return fmt.Errorf("A's acquire while B is stopped (SIGSTOP) past its expiry %v: %w", a.Expiry(), err)
	}
	c.ok("B stopped (SIGSTOP): A acquires in %v, B's lease having expired (expiry %v)", d.Round(time.Millisecond), a.Expiry())
	if a.Has(CapFence) && a2.Fence() <= b1.Fence() {
		return fmt.Errorf("fence: A's grant after B's has fence %d, not greater than B's %d", a2.Fence(), b1.Fence())
	}
	if n, ok := b1.(backends.LossNotifier); ok {
		select {
		case <-n.Lost():
			c.ok("B continued: a lost notice for its lease")
		case <-time.After(2*a.Expiry() + time.Second):
			c.ok("B continued: no lost notice within %v (the library may tell only later)", 2*a.Expiry()+time.Second)
		}
	}
	t = time.Now()
	if err := c.release(b1, "B (stale)", false); err != nil {
		return err
	}
	stale := time.Since(t).Round(time.Millisecond)
	if n, ok := a2.(backends.LossNotifier); ok && closed(n.Lost()) {
		// Not the worker's fault: the library gave up a lock it granted.
		c.ok("B's stale release in %v: release_ok, held false; A's lease was lost meanwhile (%q), so whether A still holds the lock is not checked", stale, leaseOf(a2).lostText)
		return c.end(a, b, nil)
	}
	if err := c.mustWait(b, "B"); err != nil {
		if n, ok := a2.(backends.LossNotifier); ok && closed(n.Lost()) {
			c.ok("B's stale release in %v: release_ok, held false; A's lease was lost meanwhile (%q), so whether A still holds the lock is not checked", stale, leaseOf(a2).lostText)
			return c.end(a, b, nil)
		}
		return fmt.Errorf("after B's stale release: %w", err)
	}
	c.ok("B's stale release in %v: release_ok, held false, and A still holds the lock", stale)
	if err := c.release(a2, "A", true); err != nil {
		return err
	}
	return c.end(a, b, nil)
}

// end releases held (if not nil), closes b, cleans up and closes a.
func (c *checker) end(a, b *Locker, held backends.Lease) error {
	if held != nil {
		if err := c.release(held, "B", true); err != nil {
			return err
		}
	}
	c.lockers = c.lockers[:1]
	if err := b.Close(); err != nil {
		return fmt.Errorf("B's close: %w", err)
	}
	if a.Has(CapCleanup) {
		if err := a.Cleanup(c.ctx); err != nil {
			return fmt.Errorf("A's cleanup: %w", err)
		}
		c.ok("cleanup")
	}
	c.lockers = nil
	if err := a.Close(); err != nil {
		return fmt.Errorf("A's close: %w", err)
	}
	c.ok("close: close_ok from both")
	return nil
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
