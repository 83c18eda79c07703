package zookeeper

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
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/servers"
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

// newLocker makes a client of the test's lock; through proxy p if not nil.
func newLocker(t *testing.T, p *faults.Proxy) backends.Locker {
	t.Helper()
	cfg := Config{Servers: []string{server.Endpoint()}, Key: key(t), Lease: lease200}
	if p != nil {
		cfg.Dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, p.Addr())
		}
	}
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func newProxy(t *testing.T) *faults.Proxy {
	t.Helper()
	p, err := faults.NewProxy(server.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

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
// increase.
func TestExclusive(t *testing.T) {
	needServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const clients, rounds = 4, 5
	var (
		holders atomic.Int32
		mu      sync.Mutex
		fences  []uint64
		wg      sync.WaitGroup
		errs    = make(chan error, clients)
	)
	ls := make([]backends.Locker, clients)
	for i := range ls {
		ls[i] = newLocker(t, nil)
	}
	for _, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				lease, err := l.Acquire(ctx)
				if err != nil {
					errs <- err
					return
				}
				if n := holders.Add(1); n != 1 {
					errs <- fmt.Errorf("%d holders at once", n)
				}
				mu.Lock()
				fences = append(fences, lease.Fence())
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
				holders.Add(-1)
				if err := lease.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(fences) != clients*rounds {
		t.Fatalf("%d grants, want %d", len(fences), clients*rounds)
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("fence %d (%d) after %d: fences %v", i, fences[i], fences[i-1], fences)
		}
	}
	cleanup(t, ls[0])
}

// stall freezes A's proxy while A holds the lock and measures how long B
// waits for it: from the freeze to B's grant.
func stall(t *testing.T, ctx context.Context, a, b backends.Locker, p *faults.Proxy) (la, lb backends.Lease, waited time.Duration) {
	t.Helper()
	la, err := a.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A renews: a quiet time of several leases changes nothing.
	time.Sleep(3 * lease200)
	select {
	case <-la.(backends.LossNotifier).Lost():
		t.Fatal("A's Lost fired while A ran")
	default:
	}
	p.Freeze()
	t0 := time.Now()
	lb, err = b.Acquire(ctx)
	waited = time.Since(t0)
	if err != nil {
		p.Thaw()
		t.Fatal(err)
	}
	return la, lb, waited
}

// TestStalledHolder: A's connection is frozen while it holds the lock; the
// server expires its session and B gets the lock, not before A's session
// could have expired; A learns of the loss (Lost) once it runs again; B's
// fence is above A's; A's late Release leaves B's znode alone. Ten runs:
// the freeze-to-grant times are the expiry floor the README reports.
func TestStalledHolder(t *testing.T) {
	needServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	obs := observer(t)
	var waits []time.Duration
	var last backends.Locker
	lostFrozen := 0
	for run := range 10 {
		p := newProxy(t)
		a, b := newLocker(t, p), newLocker(t, nil)
		last = b
		la, lb, waited := stall(t, ctx, a, b, p)
		waits = append(waits, waited)
		// The server cannot have freed A before A's session timed out
		// since A's last ping, at most a third of the session before the
		// freeze (go-zookeeper pings every third).
		if min := lease200 * 2 / 3; waited < min {
			t.Errorf("run %d: B got the lock %v after A froze, before A's session (%v) could expire", run, waited, lease200)
		}
		if lb.Fence() <= la.Fence() {
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
		// A's late Release must not remove B's znode.
		if err := la.Release(ctx); err != nil {
			t.Errorf("run %d: A's late Release: %v", run, err)
		}
		kids, _, err := obs.Children("/" + key(t))
		if err != nil || len(kids) != 1 || "/"+key(t)+"/"+kids[0] != lb.(*lease).path {
			t.Fatalf("run %d: after A's late Release the lock's znodes are %v (%v), want only B's %s", run, kids, err, lb.(*lease).path)
		}
		if err := lb.Release(ctx); err != nil {
			t.Fatal(err)
		}
		a.Close()
		p.Close()
	}
	sorted := append([]time.Duration(nil), waits...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	t.Logf("A's Lost had fired while frozen, before B's grant returned, in %d of 10 runs", lostFrozen)
	t.Logf("freeze → B's grant, session %v, tick %v, 10 runs: min %v median %v max %v (Expiry() = %v); all: %v",
		lease200, servers.ZooKeeperTick, sorted[0].Round(time.Millisecond), sorted[len(sorted)/2].Round(time.Millisecond),
		sorted[len(sorted)-1].Round(time.Millisecond), last.(backends.Expirer).Expiry(), waits)
	cleanup(t, last)
}

// TestTerminate: ending A's session from outside frees the lock at once
// (B is granted) and A's Lost fires.
func TestTerminate(t *testing.T) {
	needServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b := newLocker(t, nil), newLocker(t, nil)
	la, err := a.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := la.(backends.Terminator).Terminate(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := observer(t).Exists(la.(*lease).path); err != nil || ok {
		t.Fatalf("A's znode %s exists after Terminate returned (%v)", la.(*lease).path, err)
	}
	lb, err := b.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("B granted %v after Terminate began", time.Since(t0).Round(time.Millisecond))
	select {
	case <-la.(backends.LossNotifier).Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("A's Lost did not fire within 10 s after Terminate")
	}
	if lb.Fence() <= la.Fence() {
		t.Errorf("B's fence %d is not above A's %d", lb.Fence(), la.Fence())
	}
	// A second Terminate finds the session gone.
	if err := la.(backends.Terminator).Terminate(ctx); err == nil {
		t.Error("Terminate of an ended session: nil error")
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	cleanup(t, b)
}

// TestCancelAndClose: a waiter whose ctx ends gives up with ctx's error and
// leaves no znode in the queue; Acquire after Close returns ErrClosed, and
// Close deletes the holder's znode with its session.
func TestCancelAndClose(t *testing.T) {
	needServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b := newLocker(t, nil), newLocker(t, nil)
	if _, err := a.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := b.Acquire(wctx)
	wcancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiter's Acquire: %v, want context.DeadlineExceeded", err)
	}
	obs := observer(t)
	if kids, _, err := obs.Children("/" + key(t)); err != nil || len(kids) != 1 {
		t.Fatalf("znodes after the waiter gave up: %v (%v), want only the holder's", kids, err)
	}
	a.Close()
	if _, err := a.Acquire(ctx); !errors.Is(err, backends.ErrClosed) {
		t.Fatalf("Acquire after Close: %v, want ErrClosed", err)
	}
	lb, err := b.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	cleanup(t, b)
}

// TestBadConfig: each mistake gets an error that names it, in bounded time.
func TestBadConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Servers: []string{"127.0.0.1:1"}}, "Key is empty"},
		{Config{Servers: []string{"127.0.0.1:1"}, Key: "a//b"}, "not a znode path"},
		{Config{Key: "k"}, "no server"},
		{Config{Servers: []string{"127.0.0.1:1"}, Key: "k", Auth: "nopassword"}, "not user:password"},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v): %v, want an error with %q", tc.cfg, err, tc.want)
		}
	}
	if server == nil {
		return
	}
	// A lease below the server's minSessionTimeout is not granted.
	l, err := New(Config{Servers: []string{server.Endpoint()}, Key: "locksuite-test/short", Lease: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := l.Acquire(ctx); err == nil || !strings.Contains(err.Error(), "minSessionTimeout") {
		t.Errorf("Acquire with a 50ms lease: %v, want an error naming minSessionTimeout", err)
	}
}
