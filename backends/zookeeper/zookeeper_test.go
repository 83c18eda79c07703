package zookeeper_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/internal/lockertest"
	"github.com/locksuite/locksuite/backends/zklock"
	"github.com/locksuite/locksuite/backends/zookeeper"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/harness/servers/servertest"
)

// lease200 is the session timeout of the tests: the harness server's floor,
// as short as the other backends' leases.
const lease200 = 200 * time.Millisecond

// server is the standalone server every test of the package uses.
var server *servers.ZooKeeper

func TestMain(m *testing.M) {
	flag.Parse()
	code := func() int {
		if testing.Short() {
			return m.Run()
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		t0 := time.Now()
		s, err := servers.StartZooKeeper(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer s.Stop()
		fmt.Fprintf(os.Stderr, "zookeeper serving at %s after %v\n", s.Endpoint(), time.Since(t0).Round(time.Millisecond))
		server = s
		return m.Run()
	}()
	os.Exit(code)
}

func needServer(t *testing.T) {
	t.Helper()
	if server == nil {
		t.Skip("-short: no server")
	}
}

// key is a lock of the test's own under /locksuite-test.
func key(t *testing.T) string { return "locksuite-test/" + strings.ReplaceAll(t.Name(), "/", "-") }

// kind is an adapter under test: both take the same configuration.
type kind struct {
	name   string
	new    func(servers []string, dial func(context.Context, string, string) (net.Conn, error), key string, lease time.Duration) (backends.Locker, error)
	fenced bool
}

var kinds = []kind{
	{"zookeeper", func(servers []string, dial func(context.Context, string, string) (net.Conn, error), key string, lease time.Duration) (backends.Locker, error) {
		return zookeeper.New(zookeeper.Config{Servers: servers, Dial: dial, Key: key, Lease: lease})
	}, true},
	{"zk-lock", func(servers []string, dial func(context.Context, string, string) (net.Conn, error), key string, lease time.Duration) (backends.Locker, error) {
		return zklock.New(zklock.Config{Servers: servers, Dial: dial, Key: key, Lease: lease})
	}, false},
}

// forEach runs f as a subtest for each adapter, with a context that ends
// after a minute.
func forEach(t *testing.T, f func(t *testing.T, ctx context.Context, k kind)) {
	needServer(t)
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			f(t, ctx, k)
		})
	}
}

// newLocker makes a client of the test's lock; through proxy p if not nil.
func newLocker(t *testing.T, k kind, p *faults.Proxy) backends.Locker {
	t.Helper()
	l, err := k.new([]string{server.Endpoint()}, lockertest.DialVia(p), key(t), lease200)
	return lockertest.Managed(t, l, err, false)
}

// znodes are the lock's sequence znodes now.
func znodes(t *testing.T, obs *zk.Conn) []string {
	t.Helper()
	kids, _, err := obs.Children("/" + key(t))
	if err != nil {
		t.Fatalf("children of /%s: %v", key(t), err)
	}
	return kids
}

// newProxy is a fault proxy to the server, closed after the test's Lockers.
func newProxy(t *testing.T) *faults.Proxy { return lockertest.Proxy(t, server.Endpoint()) }

// observer is a plain session of the test's own, to look at znodes.
func observer(t *testing.T) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect([]string{server.Endpoint()}, 5*time.Second, zk.WithLogger(log.New(io.Discard, "", 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// cleanup removes the test's lock and checks that nothing of it is left.
func cleanup(t *testing.T, l backends.Locker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.(backends.Cleaner).Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := observer(t).Exists("/locksuite-test"); err != nil || ok {
		t.Errorf("/locksuite-test still exists after Cleanup (%v)", err)
	}
}

// TestExclusive: four clients take the lock five times each; no two ever
// hold it at once, and the fences, in the order of the grants, strictly
// increase (zk-lock: all 0).
func TestExclusive(t *testing.T) {
	forEach(t, func(t *testing.T, _ context.Context, k kind) {
		ls := make([]backends.Locker, 4)
		for i := range ls {
			ls[i] = newLocker(t, k, nil)
		}
		fences := lockertest.Turns(t, ls, 5, 2*time.Millisecond)
		for i := 1; i < len(fences); i++ {
			if k.fenced && fences[i] <= fences[i-1] || !k.fenced && fences[i] != 0 {
				t.Fatalf("fence %d (%d) after %d: fences %v", i, fences[i], fences[i-1], fences)
			}
		}
		cleanup(t, ls[0])
	})
}

// TestStalledHolder: A's connection is frozen (its fault proxy holds every
// byte) while it holds the lock; the server expires A's session and B gets
// the lock, not before A's session could have expired; B's fence is above
// A's; A's Lost has fired once it runs again; A's late Release leaves B's
// znode alone. Ten runs: the freeze-to-grant times are the expiry floor
// docs/services/zookeeper.md reports (three for zk-lock, whose session is
// the same).
func TestStalledHolder(t *testing.T) {
	forEach(t, func(t *testing.T, _ context.Context, k kind) {
		runs := 10
		if !k.fenced {
			runs = 3
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		obs := observer(t)
		var waits []time.Duration
		var last backends.Locker
		lostFrozen := 0
		for run, attempt := 0, 0; run < runs; attempt++ {
			if attempt == 2*runs {
				t.Fatalf("%d of %d runs void: B kept losing its own session", attempt-run, attempt)
			}
			p := newProxy(t)
			a, b := newLocker(t, k, p), newLocker(t, k, nil)
			last = b
			la := lockertest.Acquire(t, a, time.Minute)
			// A renews: a quiet time of two leases changes nothing.
			time.Sleep(2 * lease200)
			select {
			case <-la.(backends.LossNotifier).Lost():
				t.Fatalf("run %d: A's Lost fired while A ran", run)
			default:
			}
			p.Freeze()
			t0 := time.Now()
			lb, err := b.Acquire(ctx)
			waited := time.Since(t0)
			if err != nil {
				t.Fatal(err)
			}
			waits = append(waits, waited)
			// The server cannot free A before A's session times out after
			// A's last ping, at most a third of the session before the
			// freeze (go-zookeeper pings every third).
			if floor := lease200 * 2 / 3; waited < floor {
				t.Errorf("run %d: B got the lock %v after A froze, before A's session (%v) could expire", run, waited, lease200)
			}
			if k.fenced && lb.Fence() <= la.Fence() {
				t.Errorf("run %d: B's fence %d is not above A's %d", run, lb.Fence(), la.Fence())
			}
			select {
			case <-la.(backends.LossNotifier).Lost():
				lostFrozen++
			default:
			}
			p.Thaw()
			select {
			case <-la.(backends.LossNotifier).Lost():
			case <-time.After(10 * time.Second):
				t.Fatalf("run %d: A's Lost did not fire within 10 s after the thaw", run)
			}
			// A's late Release must not remove B's znode, the only one.
			if err := la.Release(ctx); err != nil {
				t.Errorf("run %d: A's late Release: %v", run, err)
			}
			if kids := znodes(t, obs); len(kids) != 1 {
				select {
				case <-lb.(backends.LossNotifier).Lost():
					// B's own session ended (a client starved of CPU for
					// more than two thirds of 200 ms disconnects): the
					// run shows nothing about A's Release. Not counted.
					t.Logf("run %d void: B lost its own session meanwhile", run)
					waits = waits[:len(waits)-1]
					if lostFrozen > run {
						lostFrozen--
					}
					a.Close()
					p.Close()
					continue
				default:
				}
				t.Fatalf("run %d: after A's late Release the lock's znodes are %v, want B's alone", run, kids)
			}
			if err := lb.Release(ctx); err != nil {
				t.Fatal(err)
			}
			a.Close()
			p.Close()
			run++
		}
		sorted := append([]time.Duration(nil), waits...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
		t.Logf("A's Lost had fired (its client's own receive timeout) before B's grant returned in %d of %d runs", lostFrozen, runs)
		t.Logf("freeze → B's grant, session %v, tick %v, %d runs: min %v median %v max %v (Expiry() = %v); all: %v",
			lease200, servers.ZooKeeperTick, runs, sorted[0].Round(time.Millisecond), sorted[len(sorted)/2].Round(time.Millisecond),
			sorted[len(sorted)-1].Round(time.Millisecond), last.(backends.TTLer).Expiry(), waits)
		cleanup(t, last)
	})
}

// TestTerminate: ending A's session from outside deletes A's znode before
// Terminate returns, B is granted, and A's Lost fires.
func TestTerminate(t *testing.T) {
	forEach(t, func(t *testing.T, ctx context.Context, k kind) {
		a, b := newLocker(t, k, nil), newLocker(t, k, nil)
		la := lockertest.Acquire(t, a, time.Minute)
		t0 := time.Now()
		if err := la.(backends.Terminator).Terminate(ctx); err != nil {
			t.Fatal(err)
		}
		if kids := znodes(t, observer(t)); len(kids) != 0 {
			t.Fatalf("znodes %v after Terminate returned, want none", kids)
		}
		lb := lockertest.Acquire(t, b, time.Minute)
		t.Logf("B granted %v after Terminate began", time.Since(t0).Round(time.Millisecond))
		select {
		case <-la.(backends.LossNotifier).Lost():
		case <-time.After(10 * time.Second):
			t.Fatal("A's Lost did not fire within 10 s after Terminate")
		}
		if k.fenced && lb.Fence() <= la.Fence() {
			t.Errorf("B's fence %d is not above A's %d", lb.Fence(), la.Fence())
		}
		if err := la.(backends.Terminator).Terminate(ctx); err == nil {
			t.Error("Terminate of an ended session: nil error")
		}
		if err := la.Release(ctx); err != nil {
			t.Errorf("Release of a terminated lease: %v", err)
		}
		if kids := znodes(t, observer(t)); len(kids) != 1 {
			t.Fatalf("znodes %v after A's Release, want B's alone", kids)
		}
		if err := lb.Release(ctx); err != nil {
			t.Fatal(err)
		}
		cleanup(t, b)
	})
}

// TestCancelAndClose: a waiter whose ctx ends gives up with ctx's error and
// leaves no znode in the queue; Close ends the holder's session (its znode
// goes, the waiter is granted); Acquire after Close returns ErrClosed;
// Release is idempotent.
func TestCancelAndClose(t *testing.T) {
	forEach(t, func(t *testing.T, ctx context.Context, k kind) {
		a, b := newLocker(t, k, nil), newLocker(t, k, nil)
		lockertest.Acquire(t, a, time.Minute)
		wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err := b.Acquire(wctx)
		wcancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("waiter's Acquire: %v, want context.DeadlineExceeded", err)
		}
		if k.name == "zookeeper" {
			// The waiter's znode is deleted in the background (zk.Lock's
			// abandoned Lock keeps its znode until it is granted and
			// unlocked: the package doc says so).
			obs := observer(t)
			kids := znodes(t, obs)
			for deadline := time.Now().Add(10 * time.Second); len(kids) != 1 && time.Now().Before(deadline); kids = znodes(t, obs) {
				time.Sleep(5 * time.Millisecond)
			}
			if len(kids) != 1 {
				t.Fatalf("znodes 10 s after the waiter gave up: %v, want the holder's alone", kids)
			}
		}
		a.Close()
		if _, err := a.Acquire(ctx); !errors.Is(err, backends.ErrClosed) {
			t.Fatalf("Acquire after Close: %v, want ErrClosed", err)
		}
		lb := lockertest.Acquire(t, b, time.Minute)
		if err := lb.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := lb.Release(ctx); err != nil {
			t.Fatalf("second Release: %v", err)
		}
		cleanup(t, b)
	})
}

// TestBadConfig: each mistake gets an error that names it, in bounded time.
func TestBadConfig(t *testing.T) {
	for _, k := range kinds {
		for _, tc := range []struct {
			servers []string
			key     string
			lease   time.Duration
			want    string
		}{
			{[]string{"127.0.0.1:1"}, "", 0, "Key is empty"},
			{[]string{"127.0.0.1:1"}, "a//b", 0, "not a znode path"},
			{nil, "k", 0, "no server"},
			{[]string{"127.0.0.1:1"}, "k", time.Microsecond, "1ms resolution"},
		} {
			if _, err := k.new(tc.servers, nil, tc.key, tc.lease); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: New(%v, %q, %v): %v, want an error with %q", k.name, tc.servers, tc.key, tc.lease, err, tc.want)
			}
		}
	}
	if _, err := zookeeper.New(zookeeper.Config{Servers: []string{"127.0.0.1:1"}, Key: "k", Auth: "nopassword"}); err == nil || !strings.Contains(err.Error(), "user:password") {
		t.Errorf("Auth without a colon: %v", err)
	}
	if server == nil {
		return
	}
	// A lease below the server's minSessionTimeout is not granted.
	for _, k := range kinds {
		l, err := k.new([]string{server.Endpoint()}, nil, "locksuite-test/short", 50*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		if _, err := l.Acquire(ctx); err == nil || !strings.Contains(err.Error(), "minSessionTimeout") {
			t.Errorf("%s: Acquire with a 50ms lease: %v, want an error naming minSessionTimeout", k.name, err)
		}
		cancel()
		l.Close()
	}
}

// TestSecure: against a server started WithAuth and WithTLS, a client with
// the CA and the digest user works; one without TLS, or without the user,
// fails in bounded time with an error naming the fix; another digest user
// cannot remove the lock's znodes (their ACL names the suite's user).
func TestSecure(t *testing.T) {
	needServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := servertest.Start(t, ctx, servers.StartZooKeeper, servers.WithAuth(), servers.WithTLS())
	sec := s.Secrets()
	tlsCfg, err := sec.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	auth := sec.User + ":" + sec.Password
	cfg := func(tls bool, auth string) zookeeper.Config {
		c := zookeeper.Config{Servers: []string{s.Endpoint()}, Key: key(t), Lease: lease200, Auth: auth}
		if tls {
			c.TLS = tlsCfg
		}
		return c
	}
	a, err := zookeeper.New(cfg(true, auth))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	la := lockertest.Acquire(t, a, time.Minute)
	for _, tc := range []struct {
		name string
		cfg  zookeeper.Config
		want string
	}{
		{"plain", cfg(false, auth), "Config.TLS"},
		{"no auth", cfg(true, ""), "Config.Auth"},
	} {
		l, err := zookeeper.New(tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = l.Acquire(actx)
		acancel()
		l.Close()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Acquire: %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
	// Another digest user: the lock's znode's ACL names the suite's user.
	o, err := zookeeper.New(cfg(true, "intruder:x"))
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if err := o.(backends.Cleaner).Cleanup(ctx); err == nil || !strings.Contains(err.Error(), "not authenticated") {
		t.Errorf("another user's Cleanup while A holds: %v, want zk.ErrNoAuth", err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.(backends.Cleaner).Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestEnsembleFailover: on a three-server ensemble, A holds the lock and the
// leader is killed. Once a new leader serves, B gets the lock (after A's
// session expired in the election, or A's release), and B's fence is above
// A's: czxids stay ordered across the leader's epochs (a zxid's high 32
// bits are the epoch).
func TestEnsembleFailover(t *testing.T) {
	needServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := servertest.Cluster(t, ctx, servers.StartZooKeeperEnsemble, 3)
	mk := func() backends.Locker {
		l, err := zookeeper.New(zookeeper.Config{Servers: c.Addrs(), Key: key(t), Lease: lease200})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	a, b := mk(), mk()
	la := lockertest.Acquire(t, a, time.Minute)
	leader, t1 := servertest.KillLeader(t, ctx, c)
	healthy := time.Since(t1)
	lost := false
	select {
	case <-la.(backends.LossNotifier).Lost():
		lost = true
	default:
	}
	// Lost fires when A's connection drops (A cannot know whether its
	// session lives on), not only when the session expires: A's session may
	// have survived the election on another server, its znode with it, and
	// B waits until A releases. A released lease whose session did expire
	// is no error (Lease.Release of an expired lease is harmless).
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb := lockertest.Acquire(t, b, time.Minute)
	t.Logf("leader %s killed; healthy after %v; A's Lost fired: %v; B granted after %v",
		leader.Name(), healthy.Round(time.Millisecond), lost, time.Since(t1).Round(time.Millisecond))
	if lb.Fence() <= la.Fence() {
		t.Errorf("B's fence %#x is not above A's %#x", lb.Fence(), la.Fence())
	}
	if lb.Fence()>>32 <= la.Fence()>>32 {
		t.Errorf("B's fence %#x is not of a later epoch than A's %#x", lb.Fence(), la.Fence())
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.(backends.Cleaner).Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestWaiterReconnects: a waiter's connection is cut and healed at once,
// within its session; it reconnects to the same session, is granted when
// the holder releases, and leaves no znode behind it in the queue.
func TestWaiterReconnects(t *testing.T) {
	forEach(t, func(t *testing.T, ctx context.Context, k kind) {
		p := newProxy(t)
		a, b := newLocker(t, k, nil), newLocker(t, k, p)
		la := lockertest.Acquire(t, a, time.Minute)
		got := make(chan backends.Lease, 1)
		errc := make(chan error, 1)
		go func() {
			lb, err := b.Acquire(ctx)
			if err != nil {
				errc <- err
				return
			}
			got <- lb
		}()
		obs := observer(t)
		for len(znodes(t, obs)) < 2 {
			time.Sleep(5 * time.Millisecond)
		}
		p.Cut()
		p.Heal()
		time.Sleep(2 * lease200)
		if err := la.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case lb := <-got:
			if kids := znodes(t, obs); len(kids) != 1 {
				t.Errorf("znodes while B holds: %v, want B's alone", kids)
			}
			if err := lb.Release(ctx); err != nil {
				t.Fatal(err)
			}
		case err := <-errc:
			t.Fatalf("B's Acquire: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatal("B not granted within 10 s of A's release")
		}
		cleanup(t, b)
	})
}

// TestSilentServer: the server B's client reaches accepts its connection
// and never answers (a ZooKeeper restarting after a crash: it accepts
// before it serves): B's Acquire returns with its ctx, the client drops the
// silent connection and dials again, and once the server answers B gets
// the lock. The lease is 6 s, so that go-zookeeper alone would wait 40 s
// (10 × its receive timeout) for the answer, queueing every request.
func TestSilentServer(t *testing.T) {
	forEach(t, func(t *testing.T, ctx context.Context, k kind) {
		const lease = 6 * time.Second
		p := newProxy(t)
		var dials atomic.Int32
		via := lockertest.DialVia(p)
		dial := func(ctx context.Context, network, address string) (net.Conn, error) {
			dials.Add(1)
			return via(ctx, network, address)
		}
		a := newLocker(t, k, nil)
		b, err := k.new([]string{server.Endpoint()}, dial, key(t), lease)
		b = lockertest.Managed(t, b, err, false)
		la := lockertest.Acquire(t, a, time.Minute)
		// B's session, and its first try.
		wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = b.Acquire(wctx)
		wcancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("B's first Acquire: %v, want context.DeadlineExceeded", err)
		}
		// The server "crashes" and accepts, silent, as it comes back.
		n0 := dials.Load()
		p.Cut()
		p.Blackhole()
		for dials.Load() == n0 {
			time.Sleep(5 * time.Millisecond)
		}
		const wait, bound = 2 * time.Second, 5 * time.Second
		wctx, wcancel = context.WithTimeout(ctx, wait)
		t0 := time.Now()
		_, err = b.Acquire(wctx)
		took := time.Since(t0)
		wcancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("B's Acquire while the server is silent: %v, want context.DeadlineExceeded", err)
		}
		if took > bound {
			t.Fatalf("B's Acquire with a %v ctx returned after %v, want within %v", wait, took, bound)
		}
		// The next Acquire waits; its client drops each silent connection
		// and dials again (zk-lock's first session ended when its
		// abandoned Lock failed, so it dials a new one).
		type result struct {
			l   backends.Lease
			err error
		}
		got := make(chan result, 1)
		n1 := dials.Load()
		go func() {
			l, err := b.Acquire(ctx)
			got <- result{l, err}
		}()
		for deadline := time.Now().Add(3 * lease); dials.Load() < n1+2 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		if n := dials.Load() - n1; n < 2 {
			t.Fatalf("%d dial(s) in %v of a silent server, want a second after the first connection was dropped", n, 3*lease)
		}
		p.Heal()
		if err := la.Release(ctx); err != nil {
			t.Fatal(err)
		}
		r := <-got
		if r.err != nil {
			t.Fatalf("B's Acquire once the server answers: %v", r.err)
		}
		if err := r.l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		cleanup(t, b)
	})
}
