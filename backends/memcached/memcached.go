// Package memcached is the locksuite adapter for the lock that Laravel's and
// Rails' cache locks take on memcached: add the lock key with an expiry (it
// is stored only if absent), and give it up with a compare-and-delete.
//
// It speaks memcached's meta protocol (1.6 and later) itself, over one
// connection it dials through Config.Dial: "ms <key> <len> T<exptime> ME c"
// adds the key and returns the CAS value of the item it stored in the same
// round trip, and "md <key> C<cas>" deletes the key only while it is still
// that item, so a release never removes another grant's lock. (Laravel's
// MemcachedLock reads the owner and then deletes, two steps; the common Go
// clients have no CAS delete.)
//
// Expiry is in whole seconds, on a clock the server advances once a
// second: an item stored with exptime N lives between N-1 and N seconds. So
// the adapter asks for N = Lease rounded up to seconds, plus one: the lock
// lives at least Lease (TTL), at most a second more (Expiry).
//
// The fencing token is that CAS value. memcached takes CAS values from one
// counter for every item it stores, so while one server runs, a later grant
// of the lock carries a larger one: a fence. It is no fence across a
// restart of the server (the counter starts again at 1, and the lock is
// gone with its memory), nor across several servers (each counts its own),
// nor on a server run with -C (no CAS values: the adapter refuses it).
package memcached

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/backends/internal/adapt"
)

// Config describes one client of one memcached lock.
type Config struct {
	// Addr is the server's host:port (as in MEMCACHE_SERVERS' first
	// entry). Required.
	Addr string
	// Dial, if not nil, makes the connection: pass suite.Client.Dial, so
	// that the suite can fault this client's network. Default: TCP.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Key names the lock: at most 250 bytes, no spaces or control
	// characters (memcached's keys). Required.
	Key string
	// Lease is how long the lock lives at least: the item's exptime is
	// Lease rounded up to whole seconds, plus one (see the package
	// comment). Default 1s; at least 1ms.
	Lease time.Duration
	// Poll is the wait between attempts while the lock is taken. Default
	// 5ms.
	Poll time.Duration
	_    struct{}
}

type locker struct {
	cfg     Config
	exptime int // seconds
	closed  atomic.Bool

	mu   sync.Mutex // one request at a time on conn
	conn net.Conn   // nil: dial at the next request
	r    *bufio.Reader
}

// New returns a Locker for cfg. It does not contact the server.
func New(cfg Config) (backends.Locker, error) {
	if err := adapt.Check("memcached", cfg.Key, "the lock key", &cfg.Lease, time.Second, time.Millisecond, "1ms"); err != nil {
		return nil, err
	}
	if len(cfg.Key) > 250 || strings.ContainsFunc(cfg.Key, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return nil, fmt.Errorf("memcached: Config.Key %q is no memcached key: at most 250 bytes, no spaces or control characters", cfg.Key)
	}
	if cfg.Addr == "" {
		return nil, errors.New("memcached: no server: set Config.Addr (host:port)")
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 5 * time.Millisecond
	}
	if cfg.Dial == nil {
		var d net.Dialer
		cfg.Dial = d.DialContext
	}
	secs := int((cfg.Lease + time.Second - 1) / time.Second)
	return &locker{cfg: cfg, exptime: secs + 1}, nil
}

var _ backends.TTLer = (*locker)(nil)

// TTL is the whole seconds the lock is asked for, less the second the
// server's clock may already have run of them: at least Lease.
func (l *locker) TTL() time.Duration { return time.Duration(l.exptime-1) * time.Second }

// Expiry is the exptime: the server frees the lock by then.
func (l *locker) Expiry() time.Duration { return time.Duration(l.exptime) * time.Second }

func (l *locker) Acquire(ctx context.Context) (backends.Lease, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	unsure := false // an add whose reply was lost may have stored token
	g, err := adapt.Poll(ctx, &l.closed, l.cfg.Poll, func(ctx context.Context) (backends.Lease, error) {
		if unsure {
			// Did the lost add store it? The item is ours if it holds token.
			reply, value, err := l.do(ctx, fmt.Sprintf("mg %s v c\r\n", l.cfg.Key), true)
			if err != nil {
				return nil, nil // try again: the lock expires by itself
			}
			unsure = false
			if value == token {
				return l.granted(reply)
			}
		}
		reply, _, err := l.do(ctx, fmt.Sprintf("ms %s %d T%d ME c\r\n%s\r\n", l.cfg.Key, len(token), l.exptime, token), false)
		switch {
		case err != nil:
			if ctx.Err() != nil || l.closed.Load() {
				return nil, err
			}
			unsure = true
			return nil, nil // the connection is redialled at the next attempt
		case strings.HasPrefix(reply, "NS"):
			return nil, nil // taken
		case strings.HasPrefix(reply, "HD"):
			return l.granted(reply)
		}
		return nil, fmt.Errorf("unexpected reply %q to an add", reply)
	})
	if err != nil && !errors.Is(err, backends.ErrClosed) {
		return nil, adapt.Wrap(ctx, "memcached", "acquire", l.cfg.Key, err)
	}
	return g, err
}

// granted is the lease of the item a reply names by its CAS value ("HD
// c41", "VA 32 c41").
func (l *locker) granted(reply string) (backends.Lease, error) {
	for _, f := range strings.Fields(reply) {
		if v, ok := strings.CutPrefix(f, "c"); ok {
			cas, err := strconv.ParseUint(v, 10, 64)
			if err != nil || cas == 0 {
				return nil, fmt.Errorf("the server gave CAS value %q: is it run with -C (no CAS)? The lock needs CAS values", v)
			}
			return &lease{l: l, cas: cas}, nil
		}
	}
	return nil, fmt.Errorf("reply %q carries no CAS value: memcached 1.6 or later is needed", reply)
}

// do sends req and reads its reply line and, with value, the value block
// a "VA" reply carries. An error drops the connection.
func (l *locker) do(ctx context.Context, req string, value bool) (reply, val string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() {
		return "", "", backends.ErrClosed
	}
	defer func() {
		if err != nil && l.conn != nil {
			l.conn.Close()
			l.conn = nil
		}
	}()
	if l.conn == nil {
		c, err := l.cfg.Dial(ctx, "tcp", l.cfg.Addr)
		if err != nil {
			return "", "", err
		}
		l.conn, l.r = c, bufio.NewReader(c)
	}
	if d, ok := ctx.Deadline(); ok {
		_ = l.conn.SetDeadline(d)
	} else {
		_ = l.conn.SetDeadline(time.Time{})
	}
	c := l.conn // the AfterFunc may run after an error dropped l.conn
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := l.conn.Write([]byte(req)); err != nil {
		return "", "", err
	}
	line, err := l.r.ReadString('\n')
	if err != nil {
		return "", "", err
	}
	reply = strings.TrimRight(line, "\r\n")
	if strings.HasPrefix(reply, "SERVER_ERROR") || strings.HasPrefix(reply, "CLIENT_ERROR") || reply == "ERROR" {
		return "", "", fmt.Errorf("memcached answered %q", reply)
	}
	if value && strings.HasPrefix(reply, "VA ") {
		n, err := strconv.Atoi(strings.Fields(reply)[1])
		if err != nil {
			return "", "", fmt.Errorf("bad reply %q", reply)
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(l.r, b); err != nil {
			return "", "", err
		}
		val = string(b[:n])
	}
	return reply, val, nil
}

func (l *locker) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		err := l.conn.Close()
		l.conn = nil
		return err
	}
	return nil
}

// lease is one grant: the item the add stored, named by its CAS value.
type lease struct {
	l   *locker
	cas uint64
}

func (s *lease) Fence() uint64 { return s.cas }

// Release deletes the lock only while it is still this grant's item: HD
// (deleted), EX (another grant's item) and NF (expired) are all released.
func (s *lease) Release(ctx context.Context) error {
	reply, _, err := s.l.do(ctx, fmt.Sprintf("md %s C%d\r\n", s.l.cfg.Key, s.cas), false)
	if errors.Is(err, backends.ErrClosed) {
		return nil // Close dropped the connection; the lock expires
	}
	if err != nil {
		return fmt.Errorf("memcached: release %s: %w", s.l.cfg.Key, err)
	}
	switch {
	case strings.HasPrefix(reply, "HD"), strings.HasPrefix(reply, "EX"), strings.HasPrefix(reply, "NF"):
		return nil
	}
	return fmt.Errorf("memcached: release %s: unexpected reply %q", s.l.cfg.Key, reply)
}

// Ping checks that the server at addr (dialled with dial; nil: TCP) speaks
// memcached's meta protocol: it answers the meta no-op "mn" with "MN"
// (memcached 1.6 and later), before ctx is done.
func Ping(ctx context.Context, addr string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) error {
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	c, err := dial(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := c.Write([]byte("mn\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "MN\r\n" {
		return fmt.Errorf("memcached: %s answered %q to the meta no-op: memcached 1.6 or later is needed", addr, strings.TrimSpace(line))
	}
	return nil
}
