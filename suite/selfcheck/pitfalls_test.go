package selfcheck_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/internal/wait"
	"github.com/locksuite/locksuite/suite"
	"github.com/locksuite/locksuite/suite/local/localtest"
)

// queueLock is an etcd lock that queues its waiters, as etcd's
// concurrency.Mutex does: each client puts a key under the lock's prefix
// with its own session's lease (kept alive), and is granted once every key
// created before its own is gone. With checkSession false it is the
// mutant of etcd#19597 (and Jepsen's etcd 3.4.3 analysis): after waiting,
// it does not check that its own key, and so its session, still exists.
type queueLock struct {
	c            *clientv3.Client
	prefix       string
	ttl          int64 // seconds
	checkSession bool
}

func (q *queueLock) TTL() time.Duration { return time.Duration(q.ttl) * time.Second }

// Expiry: etcd's lessor checks expiry every 500 ms.
func (q *queueLock) Expiry() time.Duration { return q.TTL() + 500*time.Millisecond }
func (q *queueLock) Close() error          { return q.c.Close() }

func (q *queueLock) Acquire(ctx context.Context) (backends.Lease, error) {
	g, err := q.c.Grant(ctx, q.ttl)
	if err != nil {
		return nil, err
	}
	kctx, stop := context.WithCancel(context.Background())
	if _, err := q.c.KeepAlive(kctx, g.ID); err != nil {
		stop()
		return nil, err
	}
	l := &queueLease{q: q, id: g.ID, stop: stop, key: fmt.Sprintf("%s/%x", q.prefix, g.ID)}
	fail := func(err error) (backends.Lease, error) { _ = l.Release(context.WithoutCancel(ctx)); return nil, err }
	put, err := q.c.Put(ctx, l.key, "", clientv3.WithLease(g.ID))
	if err != nil {
		return fail(err)
	}
	rev := put.Header.Revision
	for { // wait for every key created before this one to go
		opts := append([]clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithMaxCreateRev(rev - 1)}, clientv3.WithLastCreate()...)
		older, err := q.c.Get(ctx, q.prefix+"/", opts...)
		if err != nil {
			return fail(err)
		}
		if len(older.Kvs) == 0 {
			break
		}
		w := q.c.Watch(ctx, string(older.Kvs[0].Key), clientv3.WithRev(older.Header.Revision+1), clientv3.WithFilterPut())
		for r := range w {
			if len(r.Events) > 0 || r.Err() != nil {
				break
			}
		}
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
	}
	if q.checkSession {
		mine, err := q.c.Get(ctx, l.key)
		if err != nil {
			return fail(err)
		}
		if len(mine.Kvs) == 0 {
			return fail(errors.New("queueLock: the session expired while it waited"))
		}
	}
	l.fence = uint64(rev)
	return l, nil
}

type queueLease struct {
	q     *queueLock
	id    clientv3.LeaseID
	key   string
	fence uint64
	stop  context.CancelFunc
	once  sync.Once
}

func (l *queueLease) Fence() uint64 { return l.fence }

// Release revokes the session's lease, and its key with it.
func (l *queueLease) Release(ctx context.Context) error {
	var err error
	l.once.Do(func() {
		l.stop()
		_, err = l.q.c.Revoke(ctx, l.id)
		if err != nil && strings.Contains(err.Error(), "requested lease not found") {
			err = nil
		}
	})
	return err
}

// judgedLease is a Redis lock whose expiry each client judges by what it
// reads, as a Kubernetes Lease's candidates do: the key holds the holder's
// token, when it last renewed and the lease it asked for, with no TTL of
// its own; a candidate takes the lock over (a compare-and-set) once the
// record is older than the lease. The holder renews every third of its
// lease. With ownLease true it is the mutant of fabric8 PR #7258: a
// candidate judges the record by its own lease instead of the one stored.
type judgedLease struct {
	c        *goredis.Client
	key      string
	lease    time.Duration
	ownLease bool
}

// takeScript sets KEYS[1] to ARGV[2] if it still holds ARGV[1] ("" for
// none), and returns the next fence (0 if it did not).
var takeScript = goredis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if (cur or '') ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
if ARGV[3] == '1' then return redis.call('INCR', KEYS[2]) end
return 1`)

func (j *judgedLease) TTL() time.Duration    { return j.lease }
func (j *judgedLease) Expiry() time.Duration { return j.lease }
func (j *judgedLease) Close() error          { return j.c.Close() }
func (j *judgedLease) Cleanup(ctx context.Context) error {
	return j.c.Del(ctx, j.key, j.key+":fence").Err()
}

// record is what the key holds: token|renewed (Unix ms)|lease (ms).
func record(token string, at time.Time, lease time.Duration) string {
	return fmt.Sprintf("%s|%d|%d", token, at.UnixMilli(), lease.Milliseconds())
}

func (j *judgedLease) Acquire(ctx context.Context) (backends.Lease, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	for {
		cur, err := j.c.Get(ctx, j.key).Result()
		if err != nil && !errors.Is(err, goredis.Nil) {
			return nil, err
		}
		if free(cur, j.lease, j.ownLease) {
			mine := record(token, time.Now(), j.lease)
			fence, err := takeScript.Run(ctx, j.c, []string{j.key, j.key + ":fence"}, cur, mine, "1").Int64()
			if err != nil {
				return nil, err
			}
			if fence > 0 {
				l := &judgedGrant{j: j, token: token, rec: mine, fence: uint64(fence), stop: make(chan struct{}), done: make(chan struct{})}
				go l.renew()
				return l, nil
			}
		}
		if err := wait.For(ctx, 5*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

// free: no record, or one older than the lease it stores (ownLease: than
// own).
func free(cur string, own time.Duration, ownLease bool) bool {
	if cur == "" {
		return true
	}
	f := strings.Split(cur, "|")
	at, _ := strconv.ParseInt(f[1], 10, 64)
	ms, _ := strconv.ParseInt(f[2], 10, 64)
	lease := time.Duration(ms) * time.Millisecond
	if ownLease {
		lease = own
	}
	return time.Since(time.UnixMilli(at)) > lease
}

type judgedGrant struct {
	j          *judgedLease
	token      string
	mu         sync.Mutex
	rec        string
	fence      uint64
	stop, done chan struct{}
	once       sync.Once
}

func (l *judgedGrant) Fence() uint64 { return l.fence }

func (l *judgedGrant) renew() {
	defer close(l.done)
	every(l.stop, l.j.lease/3, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		next := record(l.token, time.Now(), l.j.lease)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		ok, err := takeScript.Run(ctx, l.j.c, []string{l.j.key, l.j.key + ":fence"}, l.rec, next, "0").Int64()
		if err == nil && ok == 1 {
			l.rec = next
		}
		return err != nil || ok != 0 // taken over
	})
}

// Release stops the renewal, then deletes the record if it is still this
// grant's.
func (l *judgedGrant) Release(ctx context.Context) error {
	l.once.Do(func() { close(l.stop) })
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return cadScript.Run(ctx, l.j.c, []string{l.j.key}, l.rec).Err()
}

// kvCreate is a NATS JetStream KV lock: Acquire creates the key, Release
// deletes it (a delete marker). With plainPut it is the mutant of
// nats.rs#1301: a create that finds the key's last entry a delete marker
// writes with a plain put instead of an update that expects that entry's
// revision, so two clients that both saw the marker both win.
type kvCreate struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	bucket   string
	key      string
	plainPut bool
	bkt      jetstream.KeyValue // once made
}

func (k *kvCreate) Close() error { k.nc.Close(); return nil }

func (k *kvCreate) Cleanup(ctx context.Context) error { return k.js.DeleteKeyValue(ctx, k.bucket) }

func (k *kvCreate) kv(ctx context.Context) (jetstream.KeyValue, error) {
	if k.bkt != nil {
		return k.bkt, nil
	}
	kv, err := k.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: k.bucket})
	if errors.Is(err, jetstream.ErrBucketExists) {
		kv, err = k.js.KeyValue(ctx, k.bucket)
	}
	k.bkt = kv
	return kv, err
}

func (k *kvCreate) Acquire(ctx context.Context) (backends.Lease, error) {
	kv, err := k.kv(ctx)
	if err != nil {
		return nil, err
	}
	for {
		var rev uint64
		if k.plainPut {
			rev, err = kv.Update(ctx, k.key, []byte("held"), 0) // the key was never written
			if err != nil {
				_, gerr := kv.Get(ctx, k.key)
				if errors.Is(gerr, jetstream.ErrKeyNotFound) { // deleted: "create" it with a plain put
					rev, err = kv.Put(ctx, k.key, []byte("held"))
				}
			}
		} else {
			rev, err = kv.Create(ctx, k.key, []byte("held"))
		}
		if err == nil {
			return &kvGrant{kv: kv, key: k.key, rev: rev}, nil
		}
		if err := wait.For(ctx, time.Millisecond); err != nil {
			return nil, err
		}
	}
}

type kvGrant struct {
	kv  jetstream.KeyValue
	key string
	rev uint64
}

func (g *kvGrant) Fence() uint64 { return g.rev }

// Release deletes the key if its last revision is this grant's.
func (g *kvGrant) Release(ctx context.Context) error {
	err := g.kv.Delete(ctx, g.key, jetstream.LastRevision(g.rev))
	if err != nil && strings.Contains(err.Error(), "wrong last sequence") {
		return nil
	}
	return err
}

// TestPitfallMutantsAreCaught: each scenario of the pitfalls users report
// catches the bug it targets, in every run, and keeps its correct twin:
// waiter-stall a waiter that does not check its session after waiting
// (etcd), mixed-lease a client that judges expiry by its own lease
// (Redis), release-race a create after a delete that writes without a
// compare (NATS KV). The mutation table is logged.
func TestPitfallMutantsAreCaught(t *testing.T) {
	env := localtest.Start(t, context.Background(), []string{"redis", "etcd", "nats-kv"})
	for _, n := range []string{"redis", "etcd", "nats-kv"} {
		if err := env.Unavailable[n]; err != nil {
			t.Fatal(err)
		}
	}
	base := env.Config("redis", false)
	with := func(lease time.Duration, newLocker func(c suite.Client) (backends.Locker, error)) suite.Config {
		cfg := base
		cfg.Lease = lease
		cfg.NewLocker = func(_ context.Context, c suite.Client) (backends.Locker, error) { return newLocker(c) }
		return cfg
	}
	etcdAddrs := strings.Split(env.Endpoint("etcd"), ",")
	queue := func(check bool) suite.Config {
		return with(time.Second, func(c suite.Client) (backends.Locker, error) {
			cl, err := clientv3.New(clientv3.Config{Endpoints: etcdAddrs, DialTimeout: 2 * time.Second, Logger: zap.NewNop(),
				DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
					return c.Dial(ctx, "tcp", addr)
				})}})
			if err != nil {
				return nil, err
			}
			return &queueLock{c: cl, prefix: c.Key + "/queue", ttl: 1, checkSession: check}, nil // not the counter store's keys
		})
	}
	redisAddr := env.Endpoint("redis")
	judged := func(own bool) suite.Config {
		return with(300*time.Millisecond, func(c suite.Client) (backends.Locker, error) {
			return &judgedLease{c: goredis.NewClient(&goredis.Options{Addr: redisAddr, Dialer: c.Dial}), key: c.Key, lease: c.Lease, ownLease: own}, nil
		})
	}
	natsURL := env.Config("nats-kv", false).Endpoint.URL
	kvLock := func(plain bool) suite.Config {
		return with(time.Second, func(c suite.Client) (backends.Locker, error) {
			nc, err := nats.Connect(natsURL, nats.SetCustomDialer(dialerOf(c)))
			if err != nil {
				return nil, err
			}
			js, err := jetstream.New(nc)
			if err != nil {
				nc.Close()
				return nil, err
			}
			bucket := "locksuite_mutant_" + strings.NewReplacer("/", "_", "-", "_").Replace(c.Key)
			return &kvCreate{nc: nc, js: js, bucket: bucket, key: "lock", plainPut: plain}, nil
		})
	}
	runMutants(t, []mutant{
		{"waiter that does not check its session after waiting (etcd#19597)", queue(false), suite.WaiterStall, report.Broken},
		{"  twin: the waiter checks its own key after waiting", queue(true), suite.WaiterStall, report.Kept},
		{"client that judges expiry by its own lease (fabric8 #7258)", judged(true), suite.MixedLease, report.Broken},
		{"  twin: expiry judged by the lease stored in the record", judged(false), suite.MixedLease, report.Kept},
		{"create after delete with a plain put (nats.rs#1301)", kvLock(true), suite.ReleaseRace, report.Broken},
		{"  twin: the library's Create (an update expecting the marker's revision)", kvLock(false), suite.ReleaseRace, report.Kept},
	})
}

// dialerOf is nats.go's CustomDialer over c.Dial.
func dialerOf(c suite.Client) nats.CustomDialer { return clientDialer{c} }

type clientDialer struct{ c suite.Client }

func (d clientDialer) Dial(network, address string) (net.Conn, error) {
	return d.c.Dial(context.Background(), network, address)
}
