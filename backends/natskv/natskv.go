// Package natskv is the locksuite adapter for a lock kept as one key of a
// NATS JetStream key-value bucket, written with a per-key TTL.
//
// Acquire creates the key (KeyValue.Create: a publish that expects the
// key's subject to hold no live value) with a per-message TTL, the lease;
// the server removes the value once the TTL has passed and leaves a delete
// marker, after which the next Create succeeds. While the holder runs, a
// renewal every third of the lease writes the key again at its last
// revision (a publish with Nats-Expected-Last-Subject-Sequence set to that
// revision and a fresh Nats-TTL: the KeyValue API's Update cannot set a
// TTL), so a renewal never revives a key that expired or that another
// client holds. Release deletes the key only at the lease's last revision
// (KeyValue.Delete with LastRevision). The fencing token is the revision of
// the grant, the stream sequence of the Create, which strictly increases
// across grants in a bucket.
//
// The server's message TTL is a whole number of seconds, at least 1 (a
// shorter or fractional Nats-TTL is refused or truncated by the server), so
// a Lease is rounded up to whole seconds and 1 s is the floor. Per-message
// TTLs need nats-server 2.11 or later (JetStream API level 1), nats.go
// 1.42.0 or later (KeyTTL, LimitMarkerTTL), and a bucket created with
// LimitMarkerTTL: the adapter creates its bucket so, and never edits an
// existing one (nats-server issue 6920: a bucket edited to add the marker
// TTL does not expire the keys written afterwards).
package natskv

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"net"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/internal/adapt"
)

// Config describes one client of one lock.
type Config struct {
	// URL is the server's URL, or several comma-separated, nats://
	// (tls:// for TLS with the system's roots), with user:password@ or a
	// token@ if the server asks for one. Default nats://127.0.0.1:4222.
	URL string
	// Addr, if set, is a host:port every connection goes to instead of
	// the URL's (the suite points it at a fault proxy); the URL's
	// credentials are kept, and TLS still verifies the URL's host name.
	Addr string
	// Dial, if set, makes every connection to the server
	// (nats.SetCustomDialer), to Addr if set, else to the URL's address.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// CredsFile is a NATS credentials file (a user JWT and its NKey seed,
	// nats.UserCredentials). Optional.
	CredsFile string
	// TLS, if set, is the client's TLS configuration (a CA, a client
	// certificate); the connection then requires TLS.
	TLS *tls.Config
	// Bucket is the key-value bucket. Default "locksuite-" followed by
	// the FNV-64a hash of the key in hex: a bucket per lock, which Cleanup
	// deletes. A bucket named here must allow per-key TTLs
	// (LimitMarkerTTL); it is created so if missing, and Cleanup then
	// purges only the lock's key.
	Bucket string
	// Key names the lock. A key that is not a valid KV key (letters,
	// digits, "-/_=." only) is hashed to "sha256." and 64 hex digits.
	// Required.
	Key string
	// Lease is the key's TTL, rounded up to whole seconds (the server's
	// resolution), so at least 1s; TTL reports the rounded value. Default
	// 1s; negative is an error.
	Lease time.Duration
	// Replicas is the bucket's replication factor (3 on a three-server
	// cluster). Default 1.
	Replicas int
	_        struct{}
}

type locker struct {
	cfg      Config
	key      string
	lease    time.Duration
	ownsBkt  bool
	opts     []nats.Option
	servers  string
	mu       sync.Mutex
	closed   bool
	nc       *nats.Conn
	js       jetstream.JetStream
	kv       jetstream.KeyValue
	held     *lease
	bucketOK bool
}

var (
	_ backends.Locker       = (*locker)(nil)
	_ backends.TTLer        = (*locker)(nil)
	_ backends.Cleaner      = (*locker)(nil)
	_ backends.LossNotifier = (*lease)(nil)
)

var validKey = regexp.MustCompile(`^[-/_=.a-zA-Z0-9]+$`)

// New returns a Locker for cfg. It does not connect.
func New(cfg Config) (backends.Locker, error) {
	// No minimum: the server's message TTL is whole seconds, and the lease
	// is rounded up to them.
	if err := adapt.Check("natskv", cfg.Key, "the lock key", &cfg.Lease, time.Second, 0, ""); err != nil {
		return nil, err
	}
	if cfg.URL == "" {
		cfg.URL = nats.DefaultURL
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	key := cfg.Key
	if !validKey.MatchString(key) || key[0] == '.' || key[len(key)-1] == '.' {
		sum := sha256.Sum256([]byte(key))
		key = "sha256." + hex.EncodeToString(sum[:])
	}
	l := &locker{cfg: cfg, key: key, lease: time.Duration(math.Ceil(cfg.Lease.Seconds())) * time.Second, servers: cfg.URL}
	if cfg.Bucket == "" {
		h := fnv.New64a()
		h.Write([]byte(cfg.Key))
		l.cfg.Bucket, l.ownsBkt = fmt.Sprintf("locksuite-%016x", h.Sum64()), true
	}
	// Asynchronous errors (a flush on a connection the server or a fault
	// closed: "broken pipe") are not printed, as nats.go's default handler
	// does on stderr: the connection reconnects, and the request that
	// needed it returns its own error.
	l.opts = []nats.Option{nats.Name("locksuite"), nats.Timeout(3 * time.Second), nats.ReconnectWait(100 * time.Millisecond),
		nats.MaxReconnects(-1), nats.NoCallbacksAfterClientClose(), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})}
	if cfg.CredsFile != "" {
		l.opts = append(l.opts, nats.UserCredentials(cfg.CredsFile))
	}
	if cfg.TLS != nil {
		l.opts = append(l.opts, nats.Secure(cfg.TLS.Clone()))
	}
	if cfg.Addr != "" {
		if _, _, err := net.SplitHostPort(cfg.Addr); err != nil {
			return nil, fmt.Errorf("natskv: Addr %q: %w (expected host:port)", cfg.Addr, err)
		}
	}
	if cfg.Dial != nil || cfg.Addr != "" {
		l.opts = append(l.opts, nats.SetCustomDialer(dialer{dial: cfg.Dial, addr: cfg.Addr}))
	}
	return l, nil
}

// dialer is the nats.CustomDialer of Config.Dial and Config.Addr.
type dialer struct {
	dial func(ctx context.Context, network, address string) (net.Conn, error)
	addr string
}

func (d dialer) Dial(network, address string) (net.Conn, error) {
	if d.addr != "" {
		address = d.addr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if d.dial != nil {
		return d.dial(ctx, network, address)
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, address)
}

func (l *locker) TTL() time.Duration { return l.lease }

// Expiry is the lease plus the server's lateness in removing an expired
// message.
func (l *locker) Expiry() time.Duration { return l.lease + expiryLateness }

// expiryLateness bounds how late nats-server (2.15.3) removes a message
// past its TTL: its store's expiry timer is never set less than 250 ms
// ahead, from a clock it reads at 100 ms resolution (the ats package), so
// a message due while the timer is set for later waits that long. Measured
// on a lone key (ten frozen holders, a 1 s TTL): 1 ms to 5 ms late.
const expiryLateness = 350 * time.Millisecond

// connect makes the Locker's connection and its bucket, once.
func (l *locker) connect(ctx context.Context) (jetstream.KeyValue, jetstream.JetStream, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.dialLocked(); err != nil {
		return nil, nil, err
	}
	if l.kv == nil {
		// Look the bucket up first: creating (or updating) a stream goes
		// through the meta leader and every replica, a lookup only to the
		// stream's leader, so a client that starts during a failover needs
		// only the latter.
		kv, err := l.bucket(ctx)
		for err != nil && ctx.Err() == nil && retryable(err) {
			time.Sleep(100 * time.Millisecond)
			kv, err = l.bucket(ctx)
		}
		if err != nil {
			fix := ""
			if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
				fix = " (start the server with JetStream: nats-server -js)"
			} else if errors.Is(err, jetstream.ErrLimitMarkerTTLNotSupported) {
				fix = " (per-key TTLs need nats-server 2.11 or later)"
			}
			return nil, nil, fmt.Errorf("natskv: bucket %s: %w%s", l.cfg.Bucket, err, fix)
		}
		l.kv = kv
	}
	return l.kv, l.js, nil
}

// dialLocked makes the Locker's connection, once. Callers hold l.mu.
func (l *locker) dialLocked() error {
	if l.closed {
		return backends.ErrClosed
	}
	if l.nc != nil {
		return nil
	}
	nc, err := nats.Connect(l.servers, l.opts...)
	if err != nil {
		return fmt.Errorf("natskv: connect: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return fmt.Errorf("natskv: %w", err)
	}
	l.nc, l.js = nc, js
	return nil
}

// requestTimeout bounds each JetStream request the adapter retries.
const requestTimeout = 2 * time.Second

// bucket looks the bucket up, and creates it if missing, each request
// bounded by requestTimeout.
func (l *locker) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	kv, err := l.js.KeyValue(ctx, l.cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = l.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: l.cfg.Bucket, History: 1, Replicas: l.cfg.Replicas,
			// Per-key TTLs need it; the markers it keeps live a lease.
			LimitMarkerTTL: l.lease,
		})
		if errors.Is(err, jetstream.ErrBucketExists) { // another client made it first
			kv, err = l.js.KeyValue(ctx, l.cfg.Bucket)
		}
	}
	return kv, err
}

// Acquire creates the key, waiting (a watch on the key, and a retry every
// 100 ms) while another client holds it, until it holds the lock or ctx is
// done.
func (l *locker) Acquire(ctx context.Context) (backends.Lease, error) {
	kv, js, err := l.connect(ctx)
	if err != nil {
		return nil, err
	}
	wrap := func(err error) error {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fmt.Errorf("natskv: acquire %s/%s: %w", l.cfg.Bucket, l.key, err)
	}
	// A watch on the key wakes the wait as soon as the key is deleted or
	// expires; the 100 ms retry covers the time before the watch is made,
	// and a watch that cannot be made (a request to a replicated bucket
	// without a leader gets no answer, and the watch's request waits for
	// ctx), which is why it is made in the background.
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watching := make(chan (<-chan jetstream.KeyValueEntry), 1)
	go func() {
		if w, err := kv.Watch(wctx, l.key, jetstream.UpdatesOnly()); err == nil {
			watching <- w.Updates()
		}
	}()
	var updates <-chan jetstream.KeyValueEntry
	owner := make([]byte, 16)
	_, _ = rand.Read(owner)
	value := []byte(hex.EncodeToString(owner))
	for {
		if l.isClosed() {
			return nil, backends.ErrClosed
		}
		sent := time.Now()
		// Each attempt gets at most requestTimeout: a request sent while a
		// replicated bucket has no leader gets no answer at all.
		actx, acancel := context.WithTimeout(ctx, requestTimeout)
		rev, err := kv.Create(actx, l.key, value, jetstream.KeyTTL(l.lease))
		acancel()
		if err == nil {
			s := &lease{l: l, js: js, kv: kv, value: value, fence: rev, stop: make(chan struct{}), done: make(chan struct{}),
				lost: make(chan struct{})}
			s.rev.Store(rev)
			s.renewed.Store(sent.UnixNano())
			l.mu.Lock()
			if l.closed {
				l.mu.Unlock()
				dctx, dcancel := context.WithTimeout(context.Background(), time.Second)
				_ = kv.Delete(dctx, l.key, jetstream.LastRevision(rev))
				dcancel()
				return nil, backends.ErrClosed
			}
			l.held = s
			l.mu.Unlock()
			go s.renew()
			return s, nil
		}
		// Taken: ErrKeyExists, or on a replicated bucket the stream's own
		// 10164 (wrong last sequence), which Create does not translate.
		if ctx.Err() != nil || !errors.Is(err, jetstream.ErrKeyExists) && !wrongRevision(err) && !retryable(err) {
			return nil, wrap(err)
		}
		select {
		case <-ctx.Done():
			return nil, wrap(ctx.Err())
		case updates = <-watching:
		case _, ok := <-updates:
			if !ok {
				updates = nil // the watch ended: retry alone
			}
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// retryable: a request that timed out or found no responders (a server
// restarting, a connection reconnecting).
func retryable(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected)
}

func (l *locker) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// Close releases a lease still held (given up to a second; otherwise its
// TTL frees it) and closes the connection.
func (l *locker) Close() error {
	l.mu.Lock()
	l.closed = true
	held, nc := l.held, l.nc
	l.held = nil
	l.mu.Unlock()
	if held != nil {
		adapt.ReleaseHeld(held)
	}
	if nc != nil {
		nc.Close()
	}
	return nil
}

// Cleanup deletes the adapter's own bucket (Config.Bucket empty), or else
// purges the lock's key from the named bucket (every message of its
// subject, markers included). It retries a request that gets no answer (a
// replicated bucket between leaders) for up to 30 s, or until ctx is done.
func (l *locker) Cleanup(ctx context.Context) error {
	l.mu.Lock()
	err := l.dialLocked()
	js := l.js
	l.kv = nil
	l.mu.Unlock()
	if err != nil {
		return fmt.Errorf("natskv: cleanup: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		rctx, rcancel := context.WithTimeout(ctx, requestTimeout)
		if l.ownsBkt {
			err = js.DeleteKeyValue(rctx, l.cfg.Bucket)
			if errors.Is(err, jetstream.ErrBucketNotFound) {
				err = nil
			}
		} else {
			var st jetstream.Stream
			if st, err = js.Stream(rctx, "KV_"+l.cfg.Bucket); err == nil {
				err = st.Purge(rctx, jetstream.WithPurgeSubject("$KV."+l.cfg.Bucket+"."+l.key))
			}
		}
		rcancel()
		if err == nil || ctx.Err() != nil || !retryable(err) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("natskv: cleanup %s/%s: %w", l.cfg.Bucket, l.key, err)
	}
	return nil
}

type lease struct {
	l     *locker
	js    jetstream.JetStream
	kv    jetstream.KeyValue
	value []byte
	fence uint64
	// rev is the key's last revision written by this lease; renewals and
	// Release are conditional on it.
	rev atomic.Uint64
	// renewed is when the write of rev was sent (UnixNano): its TTL runs
	// from about then.
	renewed  atomic.Int64
	mu       sync.Mutex // serializes renewals and Release
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
	lost     chan struct{}
	lostOnce sync.Once
	released bool
}

func (s *lease) Fence() uint64         { return s.fence }
func (s *lease) Lost() <-chan struct{} { return s.lost }
func (s *lease) markLost()             { s.lostOnce.Do(func() { close(s.lost) }) }

// renew writes the key again every lease/3, at its last revision and with
// a fresh TTL. A revision mismatch means the key expired or was taken:
// Lost fires and renewal ends. Other failures (a timeout) are retried
// until a lease has passed since the last successful write, which is when
// the server may have removed the key: Lost fires then too.
func (s *lease) renew() {
	defer close(s.done)
	t := time.NewTicker(s.l.lease / 3)
	defer t.Stop()
	subject := "$KV." + s.l.cfg.Bucket + "." + s.l.key
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.mu.Lock()
		ctx, cancel := context.WithTimeout(context.Background(), s.l.lease/3)
		sent := time.Now()
		ack, err := s.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: s.value},
			jetstream.WithExpectLastSequencePerSubject(s.rev.Load()), jetstream.WithMsgTTL(s.l.lease))
		cancel()
		if err == nil {
			s.rev.Store(ack.Sequence)
			s.renewed.Store(sent.UnixNano())
		}
		s.mu.Unlock()
		if err != nil && (wrongRevision(err) || time.Since(time.Unix(0, s.renewed.Load())) >= s.l.lease) {
			s.markLost()
			return
		}
	}
}

// Release deletes the key at the lease's last revision: if the key expired
// and was created again by another client, or expired and was removed, the
// revision differs and nothing is deleted. It returns nil then too.
func (s *lease) Release(ctx context.Context) error {
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.released {
		return nil
	}
	err := s.kv.Delete(ctx, s.l.key, jetstream.LastRevision(s.rev.Load()))
	if err != nil && !wrongRevision(err) {
		return fmt.Errorf("natskv: release %s/%s: %w", s.l.cfg.Bucket, s.l.key, err)
	}
	s.released = true
	s.l.mu.Lock()
	if s.l.held == s {
		s.l.held = nil
	}
	s.l.mu.Unlock()
	return nil
}

// wrongRevision: the server refused a write conditional on the key's last
// revision (10071; 10164 on a replicated stream).
func wrongRevision(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
