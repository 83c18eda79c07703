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
package zksession

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/locksuite/locksuite/backends"
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
	conn, _, err := zk.Connect(o.Servers, o.Timeout,
		zk.WithDialer(s.dial),
		zk.WithHostProvider(s.hosts),
		zk.WithEventCallback(s.event),
		zk.WithLogger(logger{s}),
		zk.WithLogInfo(false))
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
		if err := conn.AddAuth("digest", []byte(o.Auth)); err != nil {
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
// timeout, TLS if asked for, and the sniffer of the connect response.
func (s *Session) dial(network, address string, timeout time.Duration) (net.Conn, error) {
	c, err := s.rawDial(network, address, timeout)
	if err != nil {
		return nil, err
	}
	return &sniffer{Conn: c, s: s}, nil
}

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
// int64, password: int32 length and bytes), and records it.
type sniffer struct {
	net.Conn
	s    *Session
	buf  []byte
	done bool
}

func (c *sniffer) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.done && n > 0 {
		c.buf = append(c.buf, p[:n]...)
		if len(c.buf) >= 4 {
			size := int(binary.BigEndian.Uint32(c.buf))
			if len(c.buf) >= 4+size {
				c.done = true
				c.s.record(c.buf[4 : 4+size])
				c.buf = nil
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

// ErrSessionGone is Terminate's error for a session the server no longer
// has.
var ErrSessionGone = errors.New("the session no longer exists")

// Terminate ends session id (password passwd) from a connection of its
// own, through the same dialer, to the first server that answers: it
// connects with the session's credentials, which the server accepts as the
// same client reconnecting (it drops the holder's own connection), and asks
// to close the session. The server removes the session's ephemeral znodes
// before it answers. It returns ErrSessionGone (wrapped) if the session had
// already ended.
//
// The holder's client reconnects as soon as its connection is dropped, and
// the server then drops this one in turn: Terminate sends its connect and
// close requests in one write, and tries again (up to five times) when its
// connection is dropped before the answer.
func (s *Session) Terminate(ctx context.Context, id int64, passwd []byte) error {
	var last error
	for try := 0; try < 5; try++ {
		for _, addr := range s.opts.Servers {
			err := s.terminateOn(ctx, addr, id, passwd)
			switch {
			case err == nil:
				return nil
			case errors.Is(err, ErrSessionGone) && try > 0:
				return nil // closed by the try before, whose answer was lost
			case errors.Is(err, ErrSessionGone):
				return err
			case ctx.Err() != nil:
				return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
			}
			last = err
		}
	}
	return last
}

func (s *Session) terminateOn(ctx context.Context, addr string, id int64, passwd []byte) error {
	timeout := 5 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	c, err := s.rawDial("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	// ConnectRequest: protocol version, last zxid seen, timeout, session
	// id, password; then RequestHeader: xid 1, type closeSession (-11).
	req := binary.BigEndian.AppendUint32(nil, 0)
	req = binary.BigEndian.AppendUint64(req, 0)
	req = binary.BigEndian.AppendUint32(req, uint32(s.opts.Timeout.Milliseconds()))
	req = binary.BigEndian.AppendUint64(req, uint64(id))
	req = binary.BigEndian.AppendUint32(req, uint32(len(passwd)))
	req = append(req, passwd...)
	closeSession := int32(-11)
	out := append(frame(req), frame(binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, 1), uint32(closeSession)))...)
	if _, err := c.Write(out); err != nil {
		return err
	}
	resp, err := readFrame(c)
	if err != nil {
		return fmt.Errorf("connect response: %w", err)
	}
	if len(resp) < 16 || int64(binary.BigEndian.Uint64(resp[8:])) != id {
		return fmt.Errorf("session 0x%x: %w", id, ErrSessionGone)
	}
	// ReplyHeader: xid, zxid, err; pings' and notifications' replies
	// (negative xids) are skipped.
	for {
		r, err := readFrame(c)
		if err != nil {
			return fmt.Errorf("close session 0x%x: %w", id, err)
		}
		if len(r) >= 16 && int32(binary.BigEndian.Uint32(r)) == 1 {
			if code := int32(binary.BigEndian.Uint32(r[12:])); code != 0 {
				return fmt.Errorf("close session 0x%x: server error %d", id, code)
			}
			return nil
		}
	}
}

// frame prefixes b with its length, as every ZooKeeper packet is.
func frame(b []byte) []byte { return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...) }

func readFrame(r io.Reader) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(h[:])
	if n > 1<<20 {
		return nil, fmt.Errorf("frame of %d bytes", n)
	}
	b := make([]byte, n)
	_, err := io.ReadFull(r, b)
	return b, err
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

// LockPath makes a lock's key a znode path: "/" + key, a leading "/" kept.
func LockPath(name, key string) (string, error) {
	if key == "" {
		return "", fmt.Errorf("%s: Config.Key is empty: name the lock", name)
	}
	p := key
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	for _, c := range strings.Split(p[1:], "/") {
		if c == "" || c == "." || c == ".." {
			return "", fmt.Errorf("%s: Config.Key %q is not a znode path: a component is empty, \".\" or \"..\"", name, key)
		}
	}
	return p, nil
}

// Retryable reports whether a request failed with the connection or the
// session, which go-zookeeper re-establishes (a new session if the old one
// expired).
func Retryable(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrSessionExpired) ||
		errors.Is(err, zk.ErrSessionMoved) || errors.Is(err, zk.ErrNoServer)
}

// Pause waits d, or less if ctx ends first (then it returns ctx's error).
func Pause(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// Moved reports whether the client now has a session other than id: id
// ended, and its ephemeral znodes with it.
func (s *Session) Moved(id int64) bool {
	cur := s.Current()
	return cur != 0 && cur != id
}

// Release calls del until it succeeds, the znode is gone (zk.ErrNoNode),
// session id has ended (Moved), or ctx is done; it retries while the
// client reconnects. It is a Lease's release of its ephemeral znode.
func (s *Session) Release(ctx context.Context, id int64, del func() error) error {
	for !s.Moved(id) {
		err := del()
		if err == nil || errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if !Retryable(err) {
			return err
		}
		if werr := Pause(ctx, 10*time.Millisecond); werr != nil {
			return fmt.Errorf("%w (last: %v)", werr, err)
		}
	}
	return nil
}

// End terminates session id if it is still the client's (see Terminate).
func (s *Session) End(ctx context.Context, id int64) error {
	cur, passwd := s.Credentials()
	if cur != id {
		return fmt.Errorf("terminate session 0x%x: the client has moved to session 0x%x: %w", id, cur, ErrSessionGone)
	}
	if err := s.Terminate(ctx, id, passwd); err != nil {
		return fmt.Errorf("terminate session 0x%x: %w", id, err)
	}
	return nil
}

// RemoveEmpty deletes path and then each parent up to the root, stopping
// at the first that is not empty or not there: it removes a lock's znodes
// once no client uses them, and nothing else.
func (s *Session) RemoveEmpty(path string) error {
	for p := path; p != "/" && p != ""; p = p[:strings.LastIndex(p, "/")] {
		err := s.Conn.Delete(p, -1)
		if errors.Is(err, zk.ErrNotEmpty) || errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("delete %s: %w", p, err)
		}
	}
	return nil
}

// Client is a Locker's session, opened at first use and replaced after
// Drop, until Close.
type Client struct {
	opts   Options
	closed atomic.Bool
	mu     sync.Mutex
	sess   *Session
}

// NewClient returns a Client for o (checked with Check). It does not
// connect.
func NewClient(o Options) (*Client, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	return &Client{opts: o}, nil
}

// Options are the client's options.
func (c *Client) Options() Options { return c.opts }

// Closed reports whether Close was called.
func (c *Client) Closed() bool { return c.closed.Load() }

// Session returns the open session, opening one if there is none; after
// Close it returns backends.ErrClosed.
func (c *Client) Session(ctx context.Context) (*Session, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return nil, backends.ErrClosed
	}
	if c.sess == nil {
		s, err := Open(ctx, c.opts)
		if err != nil {
			return nil, err
		}
		c.sess = s
	}
	return c.sess, nil
}

// Drop ends s if it is still the client's session; the next Session
// opens a new one.
func (c *Client) Drop(s *Session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess == s {
		c.sess = nil
		s.Close()
	}
}

// Close ends the session (the server deletes its ephemeral znodes at
// once). It is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Swap(true) {
		return nil
	}
	if c.sess != nil {
		c.sess.Close()
	}
	return nil
}

// Lock is the half of a Locker that both adapters share: the client, the
// lock's znode and the ACL of the znodes the client creates. It gives the
// Locker its TTL, Expiry, Close and Cleanup.
type Lock struct {
	*Client
	// Path is the lock's znode ("/" + Config.Key).
	Path string
	// ACL is Options.ACL.
	ACL []zk.ACL
}

// NewLock checks key (LockPath) and o (Check), with a Timeout of 0 made
// 1 s, the adapters' default lease. It does not connect.
func NewLock(o Options, key string) (*Lock, error) {
	path, err := LockPath(o.Name, key)
	if err != nil {
		return nil, err
	}
	if o.Timeout == 0 {
		o.Timeout = time.Second
	}
	c, err := NewClient(o)
	if err != nil {
		return nil, err
	}
	return &Lock{Client: c, Path: path, ACL: o.ACL()}, nil
}

// TTL is the session timeout: the lease.
func (l *Lock) TTL() time.Duration { return l.opts.Timeout }

// Expiry is the lease and half of it again: the server expires a session
// on the first tick boundary after its timeout, and the timeout is at
// least 2 ticks (minSessionTimeout's default, and the harness's server's),
// so a tick is at most half of it.
func (l *Lock) Expiry() time.Duration { return l.opts.Timeout * 3 / 2 }

// Open is Session for an Acquire: its error names the adapter and the
// lock, except backends.ErrClosed, returned as it is.
func (l *Lock) Open(ctx context.Context) (*Session, error) {
	s, err := l.Session(ctx)
	if err != nil && !errors.Is(err, backends.ErrClosed) {
		return nil, fmt.Errorf("%s: acquire %s: %w", l.opts.Name, l.Path, err)
	}
	return s, err
}

// Cleanup deletes the lock's znode and then each parent up to the root,
// stopping at the first that is not empty (another lock's, or a waiter's
// still) or not there: it removes what Acquire created and nothing else.
func (l *Lock) Cleanup(ctx context.Context) error {
	s, err := l.Session(ctx)
	if err == nil {
		err = s.RemoveEmpty(l.Path)
	}
	if err != nil {
		return fmt.Errorf("%s: cleanup %s: %w", l.opts.Name, l.Path, err)
	}
	return nil
}

// Grant is the half of a Lease that both adapters share: the session the
// holder's znode lives in, and that session's id. It gives the Lease its
// Lost, Release and Terminate.
type Grant struct {
	name string
	path string // the znode, for errors
	s    *Session
	id   int64
	lost <-chan struct{}
	del  func() error

	mu       sync.Mutex
	released bool
}

// NewGrant is the grant of znode path, held in session id of s, that del
// deletes (see Session.Release). Its loss channel is s.Watch(id).
func (l *Lock) NewGrant(s *Session, id int64, path string, del func() error) *Grant {
	return &Grant{name: l.opts.Name, path: path, s: s, id: id, lost: s.Watch(id), del: del}
}

// Lost is closed when the client loses its connection or the session
// expires (see Session.Watch).
func (g *Grant) Lost() <-chan struct{} { return g.lost }

// Release deletes the znode with del, once: a znode already gone is no
// error, nor is a session that ended (an ephemeral znode goes with its
// session). While the client reconnects, it tries again until ctx is done.
func (g *Grant) Release(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.released {
		return nil
	}
	if err := g.s.Release(ctx, g.id, g.del); err != nil {
		return fmt.Errorf("%s: release %s: %w", g.name, g.path, err)
	}
	g.released = true
	g.s.Forget(g.lost)
	return nil
}

// Terminate ends the holder's session from a connection of its own (see
// Session.Terminate): the server deletes the znode before it answers, and
// the holder finds out at its next request or ping (Lost).
func (g *Grant) Terminate(ctx context.Context) error {
	if err := g.s.End(ctx, g.id); err != nil {
		return fmt.Errorf("%s: %w", g.name, err)
	}
	return nil
}
