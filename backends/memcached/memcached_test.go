package memcached_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	memcachedserver "github.com/locksuite/locksuite/harness/services/memcached"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/internal/lockertest"
	"github.com/locksuite/locksuite/backends/memcached"
	"github.com/locksuite/locksuite/harness/faults"
)

// addr is the server the tests use: MEMCACHE_SERVERS (host:port) if set,
// else a memcached the test starts.
var addr string

func TestMain(m *testing.M) {
	os.Exit(lockertest.Main(m, "MEMCACHE_SERVERS", &addr, memcachedserver.Start, (*memcachedserver.Server).Endpoint))
}

// newLocker returns a Locker of key with lease, through proxy p if not
// nil, closed at the test's end.
func newLocker(t *testing.T, key string, lease time.Duration, p *faults.Proxy) backends.Locker {
	t.Helper()
	l, err := memcached.New(memcached.Config{Addr: addr, Key: key, Lease: lease, Dial: lockertest.DialVia(p)})
	return lockertest.Managed(t, l, err, false)
}

// TestExclusiveAndFences: see lockertest.ExclusiveAndFences; the CAS
// values the adds return grow from grant to grant.
func TestExclusiveAndFences(t *testing.T) {
	lockertest.ExclusiveAndFences(t, newLocker(t, t.Name(), 0, nil), newLocker(t, t.Name(), 0, nil))
}

// TestStalledHolderExpiry: a holder whose connection is frozen keeps the
// lock at least its TTL (its Lease rounded up to whole seconds) and loses
// it by its Expiry (a second more: memcached's clock moves once a
// second), and B's fence is above A's; A's late Release leaves B's lock
// alone (the compare-and-delete).
func TestStalledHolderExpiry(t *testing.T) {
	key := t.Name()
	p := lockertest.Proxy(t, addr)
	a, b := newLocker(t, key, 200*time.Millisecond, p), newLocker(t, key, 200*time.Millisecond, nil)
	ttl, expiry, _ := backends.TTLOf(a)
	if ttl != time.Second || expiry != 2*time.Second {
		t.Fatalf("a 200ms lease: TTL %v, Expiry %v, want 1s and 2s", ttl, expiry)
	}
	runs := 3
	if testing.Short() {
		runs = 1
	}
	for range runs {
		sa := lockertest.Acquire(t, a, 5*time.Second)
		granted := time.Now()
		p.Freeze()
		sb := lockertest.Acquire(t, b, 10*expiry)
		free := time.Since(granted)
		t.Logf("B got the lock %v after A's grant (TTL %v, Expiry %v)", free.Round(time.Millisecond), ttl, expiry)
		if free < ttl || free > expiry+500*time.Millisecond {
			t.Errorf("B got the lock %v after A's grant: want between its TTL %v and its Expiry %v", free, ttl, expiry)
		}
		if sb.Fence() <= sa.Fence() {
			t.Errorf("B's fence %d is not above A's %d", sb.Fence(), sa.Fence())
		}
		p.Thaw()
		if err := sa.Release(context.Background()); err != nil {
			t.Errorf("A's late Release: %v", err)
		}
		c := newLocker(t, key, time.Second, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		if _, err := c.Acquire(ctx); err == nil {
			t.Error("after A's late Release, a third client got the lock B holds")
		}
		cancel()
		if err := sb.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWholeSecondTTL: see lockertest.WholeSecondTTL.
func TestWholeSecondTTL(t *testing.T) {
	lockertest.WholeSecondTTL(t, func(lease time.Duration) (backends.Locker, error) {
		return memcached.New(memcached.Config{Addr: addr, Key: "k", Lease: lease})
	})
}

// TestCloses: see lockertest.Closes.
func TestCloses(t *testing.T) {
	lockertest.Closes(t, newLocker(t, t.Name(), 0, nil))
}

// TestRefuses: a Config without a server, with a key memcached cannot
// store, or with a negative lease is refused, naming the fix.
func TestRefuses(t *testing.T) {
	lockertest.Refuses(t, memcached.New, []lockertest.Refusal[memcached.Config]{
		{Cfg: memcached.Config{Key: "k"}, Want: "set Config.Addr"},
		{Cfg: memcached.Config{Addr: addr}, Want: "Config.Key is empty"},
		{Cfg: memcached.Config{Addr: addr, Key: "a b"}, Want: "no memcached key"},
		{Cfg: memcached.Config{Addr: addr, Key: strings.Repeat("k", 251)}, Want: "at most 250 bytes"},
		{Cfg: memcached.Config{Addr: addr, Key: "k", Lease: -time.Second}, Want: "negative"},
	})
}
