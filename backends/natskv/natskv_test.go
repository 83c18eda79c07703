package natskv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/internal/lockertest"
	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/harness/servers/servertest"
	natsservice "github.com/locksuite/locksuite/harness/services/nats"
)

// url is the server the tests use: NATS_URL if set, else a server the
// test embeds (natsservice.Start).
var url string

func TestMain(m *testing.M) {
	os.Exit(lockertest.Main(m, "NATS_URL", &url, natsservice.Start, (*natsservice.Server).URL))
}

// newLocker returns a Locker of key, through proxy p if not nil, closed and
// (for cleanup true) cleaned up at the test's end.
func newLocker(t *testing.T, key string, p *faults.Proxy, cleanup bool) backends.Locker {
	t.Helper()
	l, err := New(Config{URL: url, Key: key, Dial: lockertest.DialVia(p)})
	return lockertest.Managed(t, l, err, cleanup)
}

// value is the lock key's live value, "" if none.
func value(t *testing.T, key string) string {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	l, _ := New(Config{Key: key})
	kv, err := js.KeyValue(context.Background(), l.(*locker).cfg.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(context.Background(), l.(*locker).key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(e.Value())
}

// TestExclusiveAndFences: see lockertest.ExclusiveAndFences.
func TestExclusiveAndFences(t *testing.T) {
	lockertest.ExclusiveAndFences(t, newLocker(t, t.Name(), nil, true), newLocker(t, t.Name(), nil, false))
}

// TestRenewal: a holder that runs keeps the lock for several leases.
func TestRenewal(t *testing.T) {
	key := t.Name()
	a, b := newLocker(t, key, nil, true), newLocker(t, key, nil, false)
	sa := lockertest.Acquire(t, a, 5*time.Second)
	defer sa.Release(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 3*a.(*locker).lease)
	defer cancel()
	if _, err := b.Acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("B acquired while A renews (err %v)", err)
	}
	select {
	case <-sa.(*lease).Lost():
		t.Fatal("Lost fired while renewing")
	default:
	}
}

// TestStalledHolderExpiry freezes the holder's connection (the fault
// proxy) ten times and measures when a second client gets the lock, from
// the holder's last write (see lockertest.StalledHolder).
func TestStalledHolderExpiry(t *testing.T) {
	key := t.Name()
	p := lockertest.Proxy(t, hostPort(t))
	lockertest.StalledHolder(t, lockertest.Stalled{
		A: newLocker(t, key, p, true), B: newLocker(t, key, nil, false), Proxy: p,
		Renewed: func(s backends.Lease) time.Time { return time.Unix(0, s.(*lease).renewed.Load()) },
		Holds:   func(s backends.Lease) bool { return value(t, key) == string(s.(*lease).value) },
	})
}

func hostPort(t *testing.T) string {
	t.Helper()
	s := strings.Split(url, ",")[0]
	s = s[strings.Index(s, "://")+3:]
	if i := strings.LastIndexByte(s, '@'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// TestCloseAndCleanup: Close releases a held lock and makes Acquire return
// ErrClosed; a key that is not a valid KV key works (hashed); Cleanup
// deletes the lock's bucket.
func TestCloseAndCleanup(t *testing.T) {
	key := "a key: not valid in KV " + strings.Repeat("k", 300)
	l, err := New(Config{URL: url, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	s := lockertest.Acquire(t, l, 5*time.Second)
	if v := value(t, key); v != string(s.(*lease).value) {
		t.Fatalf("hashed key holds %q, want %q", v, s.(*lease).value)
	}
	lockertest.Closes(t, l)
	if v := value(t, key); v != "" {
		t.Errorf("key still holds %q after Close", v)
	}
	l2, _ := New(Config{URL: url, Key: key})
	defer l2.Close()
	if err := l2.(backends.Cleaner).Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := js.KeyValue(context.Background(), l2.(*locker).cfg.Bucket); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Errorf("bucket after Cleanup: %v, want not found", err)
	}
}

// TestBadConfig: bad input and a wrong server get an error naming the
// problem in bounded time.
func TestBadConfig(t *testing.T) {
	lockertest.Refuses(t, New, []lockertest.Refusal[Config]{
		{Cfg: Config{URL: url}, Want: "Key is empty"},
		{Cfg: Config{URL: url, Key: "k", Lease: -time.Second}, Want: "negative"},
		{Cfg: Config{URL: url, Key: "k", Addr: "nope"}, Want: "host:port"},
	})
	lockertest.WholeSecondTTL(t, func(lease time.Duration) (backends.Locker, error) {
		return New(Config{URL: url, Key: "k", Lease: lease})
	})
	port, _ := servers.FreePort()
	l, err := New(Config{URL: fmt.Sprintf("nats://127.0.0.1:%d", port), Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := l.Acquire(ctx); err == nil || !strings.Contains(err.Error(), "connect") || time.Since(t0) > 5*time.Second {
		t.Errorf("no server: %v after %v, want a connect error at once", err, time.Since(t0))
	}
}

// TestServerTTLResolution: the server refuses a message TTL under a
// second (why a Lease is at least 1 s), and takes one of a second.
func TestServerTTLResolution(t *testing.T) {
	l := newLocker(t, t.Name(), nil, true).(*locker)
	_, js, err := l.connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	subject := "$KV." + l.cfg.Bucket + ".probe"
	_, err = js.PublishMsg(context.Background(), &nats.Msg{Subject: subject}, jetstream.WithMsgTTL(200*time.Millisecond))
	if err == nil || !strings.Contains(err.Error(), "TTL") {
		t.Errorf("a 200ms message TTL: %v, want the server to refuse it", err)
	}
	if _, err := js.PublishMsg(context.Background(), &nats.Msg{Subject: subject}, jetstream.WithMsgTTL(time.Second)); err != nil {
		t.Errorf("a 1s message TTL: %v", err)
	}
}

// TestClusterFailover: on a three-server JetStream cluster with a
// three-replica bucket, killing the server that leads the bucket's stream
// while A holds the lock: B gets the lock once a new leader serves (timed),
// with a higher fence, A's Lost fires, and A's late Release leaves B's key
// alone.
func TestClusterFailover(t *testing.T) {
	ctx := servertest.Slow(t, "starts a three-server cluster", 2*time.Minute)
	// Stopped after the lockers' cleanup.
	c := servertest.Cluster(t, ctx, natsservice.StartCluster, 3)
	key := t.Name()
	mk := func(cleanup bool) backends.Locker {
		l, err := New(Config{URL: c.Endpoint(), Key: key, Replicas: 3})
		return lockertest.Managed(t, l, err, cleanup)
	}
	a, b := mk(true), mk(false)
	sa := lockertest.Acquire(t, a, 10*time.Second).(*lease)
	info, err := sa.js.Stream(ctx, "KV_"+a.(*locker).cfg.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	si, err := info.Info(ctx)
	if err != nil || si.Cluster == nil {
		t.Fatalf("stream info: %v %+v", err, si)
	}
	var leader *servers.Member
	for _, m := range c.Members() {
		if m.Name() == si.Cluster.Leader {
			leader = m
		}
	}
	if leader == nil {
		t.Fatalf("stream leader %q is no member", si.Cluster.Leader)
	}
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	// What the bucket's stream and the key look like each second, shown
	// if B does not get the lock.
	var (
		mu    sync.Mutex
		trace []string
	)
	tctx, stopTrace := context.WithCancel(ctx)
	go func() {
		for tctx.Err() == nil {
			time.Sleep(time.Second)
			line := time.Since(t1).Round(time.Millisecond).String() + ": "
			ictx, icancel := context.WithTimeout(tctx, time.Second)
			if si, err := info.Info(ictx); err != nil {
				line += "stream info: " + err.Error()
			} else {
				line += "stream leader " + si.Cluster.Leader
			}
			if e, err := sa.kv.Get(ictx, sa.l.key); err != nil {
				line += "; key: " + err.Error()
			} else {
				line += fmt.Sprintf("; key rev %d written %v ago; A's rev %d", e.Revision(), time.Since(e.Created()).Round(time.Millisecond), sa.rev.Load())
			}
			icancel()
			mu.Lock()
			trace = append(trace, line)
			mu.Unlock()
		}
	}()
	bctx, bcancel := context.WithTimeout(ctx, time.Minute)
	sb, err := b.Acquire(bctx)
	bcancel()
	stopTrace()
	if err != nil {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("B: %v; after the kill:\n%s", err, strings.Join(trace, "\n"))
	}
	t.Logf("killed %s (the bucket's stream leader): B got the lock %v later", leader.Name(), time.Since(t1).Round(time.Millisecond))
	if sb.Fence() <= sa.Fence() {
		t.Errorf("fence %d after %d", sb.Fence(), sa.Fence())
	}
	lockertest.LostThenRelease(t, sa, 5*time.Second, "after the leader's kill")
	e, err := sb.(*lease).kv.Get(ctx, sb.(*lease).l.key)
	if err != nil || string(e.Value()) != string(sb.(*lease).value) {
		t.Errorf("after A's late Release: %v %v, want B's value", e, err)
	}
	if err := sb.Release(ctx); err != nil {
		t.Error(err)
	}
	// Cleanup deletes the bucket, which needs every replica's server.
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestAuthAndTLS: against a server that demands a password and TLS (test
// CA), the URL's password and Config.TLS get the lock, through a fault
// proxy too (Addr: TLS still verifies the URL's host); a wrong password is
// refused at once.
func TestAuthAndTLS(t *testing.T) {
	// Stopped after the lockers' cleanup.
	s := servertest.Start(t, context.Background(), natsservice.Start, servers.WithAuth(), servers.WithTLS())
	tc, err := s.Secrets().ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	lockertest.AuthAndTLS(t, context.Background(), s.URL(), s.Secrets().Password, s.Addr(), "Authorization Violation", func(endpoint, addr string) (backends.Locker, error) {
		return New(Config{URL: endpoint, TLS: tc, Addr: addr, Key: t.Name()})
	})
}
