// Package lockertest holds the checks an adapter's own tests run against a
// real server: exclusivity with strictly increasing fences, and the expiry
// of a holder whose connection is frozen.
package lockertest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/role"
	"github.com/locksuite/locksuite/harness/servers"
)

// Acquire acquires l within d, or fails the test.
func Acquire(t testing.TB, l backends.Locker, d time.Duration) backends.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	s, err := l.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ExclusiveAndFences checks, three times over, two Lockers of one lock:
// while a holds it, b's Acquire with a 300 ms context fails with
// DeadlineExceeded within 2 s; b gets the lock once a releases; fences
// strictly increase across the grants of both; a second Release is nil.
func ExclusiveAndFences(t *testing.T, a, b backends.Locker) {
	t.Helper()
	var last uint64
	for i := range 3 {
		sa := Acquire(t, a, 5*time.Second)
		if sa.Fence() <= last {
			t.Fatalf("grant %d: fence %d after %d", i, sa.Fence(), last)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		t0 := time.Now()
		_, err := b.Acquire(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("B acquired while A holds (err %v)", err)
		}
		if d := time.Since(t0); d > 2*time.Second {
			t.Errorf("Acquire with a 300ms ctx returned after %v", d)
		}
		done := make(chan backends.Lease)
		go func() {
			s, err := b.Acquire(context.Background())
			if err != nil {
				t.Error(err)
			}
			done <- s
		}()
		time.Sleep(50 * time.Millisecond)
		if err := sa.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		sb := <-done
		if sb == nil {
			return
		}
		if sb.Fence() <= sa.Fence() {
			t.Fatalf("B's fence %d not above A's %d", sb.Fence(), sa.Fence())
		}
		last = sb.Fence()
		if err := sb.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := sa.Release(context.Background()); err != nil {
			t.Errorf("second Release: %v", err)
		}
	}
}

// Turns runs lockers at once, each taking the lock rounds times and holding
// it for hold each time, and fails the test if two hold it at once or if a
// grant is missing (an Acquire or a Release failed). It returns the fences
// in grant order.
func Turns(t *testing.T, lockers []backends.Locker, rounds int, hold time.Duration) []uint64 {
	t.Helper()
	var (
		inside atomic.Int32
		mu     sync.Mutex
		fences []uint64
		wg     sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, l := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				g, err := l.Acquire(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if n := inside.Add(1); n != 1 {
					t.Errorf("%d holders at once", n)
				}
				mu.Lock()
				fences = append(fences, g.Fence())
				mu.Unlock()
				time.Sleep(hold)
				inside.Add(-1)
				if err := g.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(fences) != len(lockers)*rounds {
		t.Fatalf("fences %v: %d grants, want %d", fences, len(fences), len(lockers)*rounds)
	}
	return fences
}

// Stalled is what StalledHolder needs to know of the adapter.
type Stalled struct {
	// A dials the server through Proxy only; B dials it directly.
	A, B  backends.Locker
	Proxy *faults.Proxy
	// Renewed is when the lease's last write that reached the server was
	// sent: its expiry runs from about then.
	Renewed func(backends.Lease) time.Time
	// Holds reports whether the server says the lease holds the lock now.
	Holds func(backends.Lease) bool
}

// StalledHolder freezes A's connection ten times (once with -short) while it holds the lock
// and returns, sorted, how long after A's last write B got the lock. Each
// must be at least A's TTL (the lease is never cut short) and at most its
// Expiry (the bound the suite sizes its waits by); A's Lost fires once it
// runs again, its late Release returns nil and leaves B's grant alone, and
// B's fence is above A's.
func StalledHolder(t *testing.T, s Stalled) []time.Duration {
	t.Helper()
	runs := 10
	if testing.Short() {
		runs = 1
	}
	ttl, expiry, _ := backends.TTLOf(s.A)
	var out []time.Duration
	for range runs {
		sa := Acquire(t, s.A, 5*time.Second)
		time.Sleep(ttl / 2) // a renewal or so
		s.Proxy.Freeze()
		sb := Acquire(t, s.B, 10*expiry)
		exp := time.Since(s.Renewed(sa))
		out = append(out, exp)
		if exp < ttl {
			t.Errorf("the lock was free %v after the holder's last write, before its TTL %v", exp, ttl)
		}
		if exp > expiry {
			t.Errorf("the lock was free only %v after the holder's last write, past its Expiry %v", exp, expiry)
		}
		if sb.Fence() <= sa.Fence() {
			t.Errorf("fence %d after %d", sb.Fence(), sa.Fence())
		}
		s.Proxy.Thaw()
		LostThenRelease(t, sa, 5*time.Second, "after the lease expired")
		if !s.Holds(sb) {
			t.Error("after A's late Release, B no longer holds the lock")
		}
		if err := sb.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	t.Logf("TTL %v, Expiry %v: the lock was free after the holder's last write, %d runs: min %v median %v max %v",
		ttl, expiry, len(out), out[0].Round(time.Millisecond), out[len(out)/2].Round(time.Millisecond), out[len(out)-1].Round(time.Millisecond))
	return out
}

// LostThenRelease checks a lease that another grant has replaced (after
// says how): its Lost fires within d, and its late Release returns nil.
func LostThenRelease(t testing.TB, s backends.Lease, d time.Duration, after string) {
	t.Helper()
	select {
	case <-s.(backends.LossNotifier).Lost():
	case <-time.After(d):
		t.Errorf("Lost did not fire within %v %s", d, after)
	}
	if err := s.Release(context.Background()); err != nil {
		t.Errorf("late Release %s: %v", after, err)
	}
}

// Closes closes l, which must return nil and make a later Acquire return
// ErrClosed.
func Closes(t *testing.T, l backends.Locker) {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(context.Background()); !errors.Is(err, backends.ErrClosed) {
		t.Errorf("Acquire after Close: %v, want ErrClosed", err)
	}
}

// Refusal is a configuration New must refuse, with an error that contains
// Want.
type Refusal[C any] struct {
	Cfg  C
	Want string
}

// Refuses checks that newLocker refuses each configuration of cases with
// an error that contains its Want.
func Refuses[C any](t *testing.T, newLocker func(C) (backends.Locker, error), cases []Refusal[C]) {
	t.Helper()
	for _, tc := range cases {
		if _, err := newLocker(tc.Cfg); err == nil || !strings.Contains(err.Error(), tc.Want) {
			t.Errorf("New(%+v): error %v, want one containing %q", tc.Cfg, err, tc.Want)
		}
	}
}

// WholeSecondTTL checks an adapter whose server counts a lease in whole
// seconds: newLocker's Locker of a Config.Lease of 0 (the default),
// 200 ms and 1.5 s has a TTL of 1 s, 1 s and 2 s, rounded up.
func WholeSecondTTL(t *testing.T, newLocker func(lease time.Duration) (backends.Locker, error)) {
	t.Helper()
	for _, tc := range []struct{ lease, ttl time.Duration }{{0, time.Second}, {200 * time.Millisecond, time.Second}, {1500 * time.Millisecond, 2 * time.Second}} {
		l, err := newLocker(tc.lease)
		if err != nil {
			t.Errorf("Lease %v: %v", tc.lease, err)
		} else if got := l.(backends.TTLer).TTL(); got != tc.ttl {
			t.Errorf("Lease %v: TTL %v, want %v: whole seconds, rounded up", tc.lease, got, tc.ttl)
		}
	}
}

// DialVia is a Config.Dial that sends every connection to p, whatever the
// address asked for; nil (the adapter's own dial) when p is nil.
func DialVia(p *faults.Proxy) func(ctx context.Context, network, address string) (net.Conn, error) {
	if p == nil {
		return nil
	}
	return func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", p.Addr())
	}
}

// Managed returns l, or fails the test on err, and at the test's end closes
// l, after Cleanup when cleanup is true (one client per lock cleans up).
func Managed(t *testing.T, l backends.Locker, err error, cleanup bool) backends.Locker {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cleanup {
			if err := l.(backends.Cleaner).Cleanup(context.Background()); err != nil {
				t.Error(err)
			}
		}
		l.Close()
	})
	return l
}

// Proxy is a fault proxy to target, closed at the test's end after the
// Lockers made after it (their Cleanup dials through it).
func Proxy(t *testing.T, target string) *faults.Proxy {
	t.Helper()
	p, err := faults.NewProxy(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// AuthAndTLS checks an adapter against a server that demands a password
// and TLS. newLocker makes a Locker of endpoint (the server's URL or DSN,
// which holds password) that dials addr when addr is not "": the one of
// endpoint through a fault proxy to target gets the lock within 10 s; the
// one of endpoint with "wrong" for password is refused within 5 s with an
// error that contains want (the server's message) and not the password.
func AuthAndTLS(t *testing.T, ctx context.Context, endpoint, password, target, want string, newLocker func(endpoint, addr string) (backends.Locker, error)) {
	t.Helper()
	p := Proxy(t, target)
	l, err := newLocker(endpoint, p.Addr())
	l = Managed(t, l, err, true)
	Acquire(t, l, 10*time.Second).Release(ctx)
	bad, err := newLocker(strings.Replace(endpoint, password, "wrong", 1), "")
	bad = Managed(t, bad, err, false)
	t0 := time.Now()
	if _, err := bad.Acquire(ctx); err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), password) {
		t.Errorf("wrong password: %v, want %s without the password", err, want)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("wrong password refused after %v", d)
	}
}

// Main runs m against the server that the environment variable env names
// (its address, URL or DSN), or, when env is unset, against one that start
// starts (within a minute) and stops after m. It sets *addr to env's value
// or to the started server's endpoint (what endpoint returns) and reports
// how long the start took; a failed start is the exit code 1. A package's
// TestMain is os.Exit(lockertest.Main(...)). First, as role.Main, it serves
// the role this binary was run again in, if any (harness/role), and
// returns its status.
func Main[S servers.Server](m *testing.M, env string, addr *string, start func(context.Context, ...servers.Option) (S, error), endpoint func(S) string) int {
	if code, ok := role.Serve(); ok {
		return code
	}
	if *addr = os.Getenv(env); *addr == "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		t0 := time.Now()
		s, err := start(ctx)
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer s.Stop()
		fmt.Fprintf(os.Stderr, "%s started in %v\n", s.Name(), time.Since(t0).Round(time.Millisecond))
		*addr = endpoint(s)
	}
	return m.Run()
}
