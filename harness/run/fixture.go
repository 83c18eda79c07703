package run

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/history"
	"github.com/locksuite/locksuite/harness/nodes"
	"github.com/locksuite/locksuite/harness/traffic"
)

// Fixture is one run in progress: the clients its load made, its counter,
// its records, and what its faults strike. The load fills it in Prepare;
// the Nemesis reads it to make the run's fault or schedule.
type Fixture struct {
	Setup
	Lockers []backends.Locker
	Paths   []*faults.Path // each client's fault path; nil for a client that dials directly
	Store   fencing.Store
	Rec     *history.Recorder
	Log     *faults.Log
	T0      time.Duration // Rec time when the load started

	// Schedule is the run's fault schedule (Nemesis.Schedule), set once
	// the load is prepared; empty without one.
	Schedule faults.Schedule

	// A chaos run's worker processes (Workers[i] is client i), and who
	// holds the lock as they report it.
	Workers []faults.Stopper
	Holders faults.Holders

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

// Clients makes n Lockers, each asking for Lease; with proxied, each dials
// through a faults.Path of its own.
func (fx *Fixture) Clients(ctx context.Context, n int, proxied bool) error {
	leases := make([]time.Duration, n)
	for i := range leases {
		leases[i] = fx.Lease
	}
	return fx.ClientsLeased(ctx, leases, proxied)
}

// ClientsLeased makes one Locker per lease, client i asking for leases[i]
// (suite.Client.Lease); with proxied, each dials through a faults.Path of
// its own.
func (fx *Fixture) ClientsLeased(ctx context.Context, leases []time.Duration, proxied bool) error {
	for _, lease := range leases {
		id := len(fx.Lockers)
		dial := directDial
		var p *faults.Path
		if proxied {
			p = faults.NewPath()
			dial = p.Dial
		}
		fx.Paths = append(fx.Paths, p)
		l, err := fx.NewLocker(ctx, id, dial, lease)
		if err != nil {
			return fmt.Errorf("NewLocker for client %d (lease %v): %w", id, lease, err)
		}
		fx.Lockers = append(fx.Lockers, l)
	}
	return nil
}

// expiryOf is how long client i's stalled lease takes to run out, by what
// its Locker declares (backends.TTLOf), else Lease.
func (fx *Fixture) expiryOf(i int) time.Duration {
	if _, x, ok := backends.TTLOf(fx.Lockers[i]); ok {
		return x
	}
	return fx.Lease
}

// OpenStore opens the run's counter.
func (fx *Fixture) OpenStore(ctx context.Context, fenced bool) error {
	s, err := fx.NewStore(ctx, fx.Key, fenced)
	if err != nil {
		return fmt.Errorf("NewStore: %w", err)
	}
	fx.stores = append(fx.stores, s)
	fx.Store = s
	return nil
}

// Probe lets client i acquire and release the free lock once, so that it
// has connected (and its fault path knows whether it is used); a fenced
// run whose Locker gives no token returns ErrNoFence.
func (fx *Fixture) Probe(ctx context.Context, i int) error {
	fence, err := firstGrant(ctx, fx.Lockers[i])
	if err != nil || !fx.Fenced {
		return err
	}
	return needFence(fence)
}

// Standard is the usual preparation: n clients (proxied or not), client 0
// probed when its path or its fence matters, the counter opened.
func (fx *Fixture) Standard(ctx context.Context, n int, proxied bool) error {
	if err := fx.Clients(ctx, n, proxied); err != nil {
		return err
	}
	if proxied || fx.Fenced {
		if err := fx.Probe(ctx, 0); err != nil {
			return err
		}
	}
	return fx.OpenStore(ctx, fx.Fenced)
}

// Expiry is how long client 0's stalled lease takes to run out, by what
// its Locker declares (backends.TTLOf), else Lease.
func (fx *Fixture) Expiry() time.Duration {
	if len(fx.Lockers) > 0 {
		if _, x, ok := backends.TTLOf(fx.Lockers[0]); ok {
			return x
		}
	}
	return fx.Lease
}

// TTL is client 0's declared TTL, else Lease.
func (fx *Fixture) TTL() time.Duration {
	if len(fx.Lockers) > 0 {
		if t, _, ok := backends.TTLOf(fx.Lockers[0]); ok {
			return t
		}
	}
	return fx.Lease
}

// StallBound is how long a stalled holder waits for a second client:
// Setup.StallTimeout, else 3 × client 0's expiry + 2 s, or 30 s when its
// Locker declares none.
func (fx *Fixture) StallBound() time.Duration {
	if fx.StallTimeout > 0 {
		return fx.StallTimeout
	}
	if _, x, ok := backends.TTLOf(fx.Lockers[0]); ok {
		return 3*x + 2*time.Second
	}
	return 30 * time.Second
}

// takeover is B's Acquire while its holder stalls (a fault struck; heal
// undoes it): bounded by StallBound, asked and granted at the recorder's
// times asked and start. The fault is healed once Acquire returns.
func (fx *Fixture) takeover(ctx context.Context, b backends.Locker, heal func() error) (lb backends.Lease, asked, start time.Duration, err error) {
	bctx, cancel := context.WithTimeout(ctx, fx.StallBound())
	asked = fx.Rec.Now()
	lb, err = traffic.Acquire(bctx, b)
	start = fx.Rec.Now()
	cancel()
	_ = heal()
	return lb, asked, start, err
}

// holdFree is A's grant of the free lock (client 0), within probeTimeout,
// asked and granted at the recorder's times asked and start.
func (fx *Fixture) holdFree(ctx context.Context) (l backends.Lease, asked, start time.Duration, err error) {
	asked = fx.Rec.Now()
	actx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if l, err = traffic.Acquire(actx, fx.Lockers[0]); err != nil {
		return nil, 0, 0, fmt.Errorf("holder A: %w", err)
	}
	return l, asked, fx.Rec.Now(), nil
}

// Lease0 is client 0's lease while it holds one (set by the holder
// loads), for a fault that needs it (faults.SessionKill).
func (fx *Fixture) Lease0() backends.Lease { return fx.lease }

// Now is the run's clock (the recorder's).
func (fx *Fixture) Now() time.Duration { return fx.Rec.Now() }

// close releases the run's clients, paths and counter, then what the load
// started (closers, last first).
func (fx *Fixture) close() {
	for _, p := range fx.Paths {
		if p != nil {
			p.Heal()
		}
	}
	// What the lock left on the server (fence counters, keys, sequences):
	// the first client cleans for all, once the others are closed.
	for i := len(fx.Lockers) - 1; i >= 0; i-- {
		if c, ok := fx.Lockers[i].(backends.Cleaner); ok && i == 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = c.Cleanup(ctx)
			cancel()
		}
		_ = fx.Lockers[i].Close()
	}
	for _, p := range fx.Paths {
		if p != nil {
			_ = p.Close()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range fx.stores {
		_ = s.Close(ctx)
	}
	for i := len(fx.closers) - 1; i >= 0; i-- {
		fx.closers[i]()
	}
}
