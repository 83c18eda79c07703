// Package zksession is the ZooKeeper session the zookeeper and zklock
// adapters share: a go-zookeeper connection made through the suite's
// dialer (and TLS, and digest auth), its negotiated timeout checked against
// the lease asked for, notice of the session's loss, and ending the session
// from outside.
//
// go-zookeeper keeps the session's id and password (what a client needs to
// take a session over) to itself. The dialer wraps every connection and
// reads them from the server's connect response, the first frame on each
// connection, as it passes: that is what lets Terminate end the session
// from a connection of its own, as a second client with the same
// credentials would.
//
// This file is the session; terminate.go ends one from outside, over the
// wire; lock.go is the half of a Locker and of a Lease that both adapters
// share.
package zksession

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/locksuite/locksuite/internal/tlsdial"
)

// Options describe a session.
type Options struct {
	// Servers are host:port addresses. Required.
	Servers []string
	// Timeout is the session timeout asked for. Open fails if the server
	// grants a different one (it clamps it to its minSessionTimeout and
	// maxSessionTimeout).
	Timeout time.Duration
	// Dial, if not nil, makes every connection.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// TLS, if not nil, wraps every connection in TLS.
	TLS *tls.Config
	// Auth, if not empty, is "user:password" for the digest scheme.
	Auth string
	// Name prefixes errors: "zookeeper", "zk-lock".
	Name string
}

// Session is one ZooKeeper session.
type Session struct {
	Conn *zk.Conn
	opts Options

	hosts *hosts

	mu      sync.Mutex
	lastLog string // go-zookeeper's last log line (a failed dial, handshake)
	id      int64  // the session of the last connect response
	passwd  []byte // its password
	granted time.Duration
	waiters map[chan struct{}]int64 // loss channels → the session they watch
}

// Open connects and waits (up to ctx, at most 10 s) until the server has
// granted the session. It fails when the server grants a timeout other than
// Options.Timeout.
func Open(ctx context.Context, o Options) (*Session, error) {
	if len(o.Servers) == 0 {
		return nil, fmt.Errorf("%s: no server: set Config.Servers (host:port, ...)", o.Name)
	}
	s := &Session{opts: o, waiters: map[chan struct{}]int64{}, hosts: &hosts{}}
	conn, _, err := zkConnect(s)
	if err != nil {
		return nil, fmt.Errorf("%s: connect %v: %w", o.Name, o.Servers, err)
	}
	s.Conn = conn
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for conn.State() != zk.StateHasSession {
		select {
		case <-ctx.Done():
			conn.Close()
			s.mu.Lock()
			last := s.lastLog
			s.mu.Unlock()
			if last == "" {
				last = "none"
			}
			return nil, fmt.Errorf("%s: no session from %v: %w (the client's last error: %s; check the addresses, "+
				"and Config.TLS against the server's port: plain clientPort or TLS secureClientPort)", o.Name, o.Servers, ctx.Err(), last)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if o.Auth != "" {
		if err := Do(ctx, func() error { return conn.AddAuth("digest", []byte(o.Auth)) }); err != nil {
			conn.Close()
			return nil, fmt.Errorf("%s: digest auth: %w", o.Name, err)
		}
	}
	s.mu.Lock()
	granted := s.granted
	s.mu.Unlock()
	if granted != o.Timeout.Truncate(time.Millisecond) { // sent in whole milliseconds
		conn.Close()
		return nil, fmt.Errorf("%s: the server grants a session timeout of %v, not the lease %v: its minSessionTimeout (default 2 × tickTime) "+
			"or maxSessionTimeout excludes the lease; set them to allow it, or ask for a lease within them", o.Name, granted, o.Timeout)
	}
	return s, nil
}

// zkConnect starts s's go-zookeeper client, which connects in the
// background.
func zkConnect(s *Session) (*zk.Conn, <-chan zk.Event, error) {
	return zk.Connect(s.opts.Servers, s.opts.Timeout,
		zk.WithDialer(s.dial),
		zk.WithHostProvider(s.hosts),
		zk.WithEventCallback(s.event),
		zk.WithLogger(logger{s}),
		zk.WithLogInfo(false))
}

// hosts is go-zookeeper's host provider without its pause on the first
// reconnection. go-zookeeper waits a second whenever the host provider says
// it has been round every server since the last success; its
// DNSHostProvider says so at once after a disconnection from the only
// server, which costs a 200 ms session its life on any disconnection, even
// one the server would have forgiven. hosts says so only after every server
// has been tried once since the disconnection: the first attempt is
// immediate, as in ZooKeeper's Java client, and a server that stays away
// still gets the library's one-second pause between rounds.
type hosts struct {
	mu      sync.Mutex
	servers []string
	curr    int
	tried   int // servers tried since the last success
}

func (h *hosts) Init(servers []string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	// go-zookeeper shuffles the list before Init; no lookup here, the
	// dialer resolves.
	h.servers, h.curr, h.tried = append([]string(nil), servers...), -1, 0
	return nil
}

func (h *hosts) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.servers)
}

func (h *hosts) Next() (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.curr = (h.curr + 1) % len(h.servers)
	retryStart := h.tried >= len(h.servers)
	if retryStart {
		h.tried = 0
	}
	h.tried++
	return h.servers[h.curr], retryStart
}

func (h *hosts) Connected() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tried = 0
}

// logger keeps go-zookeeper's last log line for Open's error.
type logger struct{ s *Session }

func (l logger) Printf(format string, args ...any) {
	l.s.mu.Lock()
	l.s.lastLog = fmt.Sprintf(format, args...)
	l.s.mu.Unlock()
}

// Explain adds the fix to an error that has one: a server that enforces
// authentication answers a session without it with error -124
// (SESSIONCLOSEDREQUIRESASLAUTH), which go-zookeeper does not name.
func Explain(err error) error {
	if err != nil && strings.Contains(err.Error(), "-124") {
		return fmt.Errorf("%w: the server requires authentication: set Config.Auth (user:password, digest scheme)", err)
	}
	return err
}

// ACL is the ACL for the znodes a client makes: all rights to the digest
// user of Options.Auth only, or to anyone without it.
func (o Options) ACL() []zk.ACL {
	if user, pass, ok := strings.Cut(o.Auth, ":"); ok {
		return zk.DigestACL(zk.PermAll, user, pass)
	}
	return zk.WorldACL(zk.PermAll)
}

// dial is go-zookeeper's Dialer: Options.Dial (or a plain dial) bounded by
// timeout, TLS if asked for, and the sniffer of the connect response, which
// also bounds the handshake (see Options.handshake).
func (s *Session) dial(network, address string, timeout time.Duration) (net.Conn, error) {
	c, err := s.rawDial(network, address, timeout)
	if err != nil {
		return nil, err
	}
	return &sniffer{Conn: c, s: s, handshake: time.Now().Add(s.opts.handshake())}, nil
}

// handshake is how long a new connection has, from the dial, to deliver the
// server's connect response: a third of the session timeout, and at least
// 2 s. go-zookeeper v1.0.4 gives it 10 × its receive timeout (6⅔ × the
// session timeout, over two minutes for a 20 s session), and nothing while
// it reads the response's body. A ZooKeeper server that is starting accepts
// connections before it serves them and may never answer one (3.8 logs
// "ZooKeeperServer not running" and closes it only later, if at all): with
// this bound the client drops such a connection and dials again, as
// ZooKeeper's Java client does after its connect timeout.
func (o Options) handshake() time.Duration { return max(o.Timeout/3, 2*time.Second) }

func (s *Session) rawDial(network, address string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	dial := s.opts.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	return tlsdial.Wrap(dial, s.opts.TLS)(ctx, network, address)
}

// sniffer reads the first frame the server sends on a connection, the
// connect response (protocol version int32, timeout int32, session id
// int64, password: int32 length and bytes), and records it. Until it has
// read that frame, every deadline go-zookeeper sets (none included) is
// capped at handshake; from then on they pass through as they are.
type sniffer struct {
	net.Conn
	s         *Session
	buf       []byte
	done      atomic.Bool
	handshake time.Time
}

// bound is t capped at the handshake's deadline while it lasts.
func (c *sniffer) bound(t time.Time) time.Time {
	if !c.done.Load() && (t.IsZero() || t.After(c.handshake)) {
		return c.handshake
	}
	return t
}

func (c *sniffer) SetDeadline(t time.Time) error { return c.Conn.SetDeadline(c.bound(t)) }

func (c *sniffer) SetReadDeadline(t time.Time) error { return c.Conn.SetReadDeadline(c.bound(t)) }

func (c *sniffer) SetWriteDeadline(t time.Time) error { return c.Conn.SetWriteDeadline(c.bound(t)) }

func (c *sniffer) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.done.Load() && n > 0 {
		c.buf = append(c.buf, p[:n]...)
		if len(c.buf) >= 4 {
			size := int(binary.BigEndian.Uint32(c.buf))
			if len(c.buf) >= 4+size {
				c.s.record(c.buf[4 : 4+size])
				c.buf = nil
				// Lift the cap go-zookeeper's last deadline got.
				_ = c.Conn.SetReadDeadline(time.Time{})
				c.done.Store(true)
			}
		}
	}
	return n, err
}

func (s *Session) record(b []byte) {
	if len(b) < 20 {
		return
	}
	timeout := time.Duration(int32(binary.BigEndian.Uint32(b[4:]))) * time.Millisecond
	id := int64(binary.BigEndian.Uint64(b[8:]))
	plen := int(int32(binary.BigEndian.Uint32(b[16:])))
	if id == 0 || plen < 0 || len(b) < 20+plen {
		return // expired: the client starts a new session
	}
	s.mu.Lock()
	s.id, s.passwd, s.granted = id, append([]byte(nil), b[20:20+plen]...), timeout
	s.mu.Unlock()
}

// event marks every loss channel lost when the connection ends or the
// session expires: a holder that cannot reach the server cannot know that
// its session, and its znode, still exist.
func (s *Session) event(ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	if ev.State == zk.StateExpired {
		// The server answered: the next session is started at once.
		s.hosts.Connected()
	}
	switch ev.State {
	case zk.StateDisconnected, zk.StateExpired, zk.StateAuthFailed:
		s.mu.Lock()
		for ch := range s.waiters {
			close(ch)
			delete(s.waiters, ch)
		}
		s.mu.Unlock()
	}
}

// Current is the session's id, 0 while it has none.
func (s *Session) Current() int64 {
	if s.Conn.State() != zk.StateHasSession {
		return 0
	}
	return s.Conn.SessionID()
}

// Watch returns a channel closed at the next disconnection or expiry, or
// at once if the connection no longer has session id. Forget stops
// watching.
func (s *Session) Watch(id int64) <-chan struct{} {
	ch := make(chan struct{})
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Current() != id {
		close(ch)
		return ch
	}
	s.waiters[ch] = id
	return ch
}

// Forget stops watching ch (a released lease).
func (s *Session) Forget(ch <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.waiters {
		if w == ch {
			delete(s.waiters, w)
		}
	}
}

// Credentials are the current session's id and password.
func (s *Session) Credentials() (int64, []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id, s.passwd
}

// Close ends the session (go-zookeeper sends closeSession) and marks every
// loss channel lost.
func (s *Session) Close() {
	s.Conn.Close()
	s.event(zk.Event{Type: zk.EventSession, State: zk.StateDisconnected})
}

// Check validates o and returns an error naming the field to fix.
func (o Options) Check() error {
	switch {
	case len(o.Servers) == 0:
		return fmt.Errorf("%s: no server: set Config.Servers (host:port, ...)", o.Name)
	case o.Timeout < time.Millisecond:
		return fmt.Errorf("%s: lease %v is below the session timeout's 1ms resolution", o.Name, o.Timeout)
	case o.Auth != "" && !strings.Contains(o.Auth, ":"):
		return fmt.Errorf("%s: Config.Auth is not user:password", o.Name)
	}
	return nil
}
