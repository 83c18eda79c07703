// Package foreign is the Locker of a lock library in any language: a
// worker process that speaks the worker protocol (docs/protocol.md) over
// its standard input and output, one JSON object a line.
//
// New starts the worker from a command line, hands it the lock's name, the
// lease and the addresses of the lock service (local ports that forward
// through the client's Dial, so that the client's network faults reach the
// foreign library's connections), and maps every promise of
// backends.Locker to a request: Acquire to acquire (asked again in slices
// of at most a second until its context ends, so that it returns once the
// context is done), Lease.Release to release, Close to close, Cleanup to
// cleanup. The worker's capabilities become the optional interfaces: a
// fence, a TTL (backends.TTLer), a loss notice (backends.LossNotifier).
// Freeze (backends.Freezer) stops the worker's process group with
// SIGSTOP: the library's runtime, its timers and threads stop, as in a GC
// pause or a VM stall.
//
// In a chaos worker process (the suite's worker.Spec in the environment),
// the library's process joins that process's group instead, so that the
// coordinator's SIGSTOP of the worker stops the foreign runtime together
// with the Go code that writes the store.
//
// A worker that breaks the protocol (a line that is not JSON, a reply to
// an id not asked, another protocol version), exits or does not answer in
// time is ended, process group and all, and every call fails with a
// *ProtocolError naming the worker, the line at fault and its last stderr
// lines. A reaper process ends the group should this process die first.
package foreign

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/locksuite/locksuite/backends"
)

// Timeouts of the requests: init and close wait for a runtime to start or
// end; every request's reply is due within its own time plus replyGrace.
const (
	startTimeout = 30 * time.Second
	replyGrace   = 5 * time.Second
	// acquireSlice is the longest timeout_ms of one acquire request.
	acquireSlice = time.Second
	endGrace     = 2 * time.Second
)

// Capabilities a worker may declare in init_ok.
const (
	CapFence   = "fence"
	CapTTL     = "ttl"
	CapLost    = "lost"
	CapCleanup = "cleanup"
)

var knownCaps = []string{CapFence, CapTTL, CapLost, CapCleanup}

// Config says how to start one client's worker and what to tell it.
type Config struct {
	// Command is the worker's command line: the program (looked up in
	// PATH) and its arguments, run without a shell. Required.
	Command []string
	// Dir is the worker's working directory. Default: this process's.
	Dir string
	// Env is added to the worker's environment (this process's).
	Env []string
	// Name is how errors name the worker. Default: Command, joined.
	Name string
	// Client is the client's number (the init request's client).
	Client int
	// Key is the lock's name. Required.
	Key string
	// Lease is the lease to ask for. Required.
	Lease time.Duration
	// Service says what URL is (redis, zookeeper, postgres, etcd, nats,
	// consul, mysql: docs/protocol.md). Required.
	Service string
	// Addrs are the lock servers' host:port. Required.
	Addrs []string
	// URL is the service's address as its clients take it (a redis://
	// URL, a ZooKeeper connect string), naming Addrs; the worker gets it
	// with each of Addrs replaced by its forwarding port. Default: the
	// forwarded Addrs joined by commas.
	URL string
	// Username and Password are the service's credentials, if any.
	Username, Password string
	// Dial connects to the lock servers: the client's fault path
	// (suite.Client.Dial). Default: a plain net.Dialer.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	_    struct{}
}

// Library is what a worker said it is in its init_ok.
type Library struct {
	Name, Version, Runtime string
	Capabilities           []string
}

// String is "redis-py 4.3.4 (CPython 3.11.2 (/usr/bin/python3))".
func (l Library) String() string {
	s := strings.TrimSpace(l.Name + " " + l.Version)
	if l.Runtime != "" {
		s += " (" + l.Runtime + ")"
	}
	return s
}

// Locker is one client of a foreign lock: the worker process behind it.
type Locker struct {
	p       *proc
	fwds    []*forwarder
	lib     Library
	caps    map[string]bool
	ttl     time.Duration
	expiry  time.Duration
	mu      sync.Mutex
	closed  bool
	lost    map[string]*lease // the leases held, for CapLost
	lastErr error
}

var (
	_ backends.Locker  = (*Locker)(nil)
	_ backends.TTLer   = (*Locker)(nil)
	_ backends.Freezer = (*Locker)(nil)
	_ backends.Cleaner = (*Locker)(nil)
)

// inChaosWorker reports whether this process is a chaos worker
// (harness/worker's EnvVar is set), whose process group the coordinator
// stops as a whole.
func inChaosWorker() bool { return os.Getenv("LOCKSUITE_WORKER") != "" }

// New starts the worker and completes its handshake, within ctx and at
// most 30 s.
func New(ctx context.Context, cfg Config) (*Locker, error) { return newWith(ctx, cfg, nil) }

// newWith is New, calling started (if not nil) once the process runs.
func newWith(ctx context.Context, cfg Config, started func(*proc)) (*Locker, error) {
	if cfg.Name == "" {
		cfg.Name = strings.Join(cfg.Command, " ")
	}
	name := fmt.Sprintf("%q (client %d)", cfg.Name, cfg.Client)
	switch {
	case cfg.Key == "":
		return nil, fmt.Errorf("worker %s: Config.Key is empty", name)
	case cfg.Lease <= 0:
		return nil, fmt.Errorf("worker %s: Config.Lease must be positive", name)
	case cfg.Service == "":
		return nil, fmt.Errorf("worker %s: Config.Service is empty: name the kind of lock service (redis, zookeeper, ...)", name)
	case len(cfg.Addrs) == 0:
		return nil, fmt.Errorf("worker %s: Config.Addrs is empty: give the lock servers' host:port", name)
	}
	dial := cfg.Dial
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	l := &Locker{lost: map[string]*lease{}}
	url := cfg.URL
	var local []string
	for _, a := range cfg.Addrs {
		f, err := newForwarder(a, dial)
		if err != nil {
			l.closeForwarders()
			return nil, fmt.Errorf("worker %s: forward %s: %w", name, a, err)
		}
		l.fwds = append(l.fwds, f)
		local = append(local, f.Addr())
		url = strings.ReplaceAll(url, a, f.Addr())
	}
	if cfg.URL == "" {
		url = strings.Join(local, ",")
	}
	p, err := start(name, cfg.Command, cfg.Dir, cfg.Env, inChaosWorker(), l.onNotice)
	if err != nil {
		l.closeForwarders()
		return nil, err
	}
	l.p = p
	if started != nil {
		started(p)
	}
	client := cfg.Client
	req := request{Type: "init", Protocol: Version, Client: &client, Key: cfg.Key, LeaseMS: ms(cfg.Lease),
		Service: cfg.Service, Addrs: local, URL: url, Username: &cfg.Username, Password: &cfg.Password}
	limit := startTimeout
	if dl, ok := ctx.Deadline(); ok {
		limit = min(limit, time.Until(dl))
	}
	m, err := l.do(ctx, req, limit, nil)
	var we *Error
	switch {
	case err == nil:
		err = l.initOK(m)
		if errors.As(err, &we) {
			err = fmt.Errorf("worker %s: init: %w", name, err)
		}
	case ctx.Err() != nil:
		err = l.broke(fmt.Sprintf("did not answer init (id 1) within %v: %v", limit.Round(time.Millisecond), ctx.Err()))
	}
	if err != nil {
		l.end()
		return nil, err
	}
	return l, nil
}

// initOK checks the init reply and takes the worker's description.
func (l *Locker) initOK(m reply) error {
	if err := l.expect(m, "init_ok", "init"); err != nil {
		return err
	}
	l.lib = Library{Name: m.Library, Version: m.Version, Runtime: m.Runtime, Capabilities: m.Capabilities}
	l.caps = map[string]bool{}
	for _, c := range m.Capabilities {
		if !slices.Contains(knownCaps, c) {
			return l.broke(fmt.Sprintf("declared capability %q, which version %d does not have (it has %s): %q", c, Version, strings.Join(knownCaps, ", "), clip(m.line)))
		}
		l.caps[c] = true
	}
	if m.Library == "" {
		return l.broke(fmt.Sprintf("init_ok names no library: %q", clip(m.line)))
	}
	if l.caps[CapTTL] {
		if m.TTLMS <= 0 || m.ExpiryMS < m.TTLMS {
			return l.broke(fmt.Sprintf("declared ttl with ttl_ms %d and expiry_ms %d: need 0 < ttl_ms <= expiry_ms: %q", m.TTLMS, m.ExpiryMS, clip(m.line)))
		}
		l.ttl, l.expiry = time.Duration(m.TTLMS)*time.Millisecond, time.Duration(m.ExpiryMS)*time.Millisecond
	}
	return nil
}

// expect returns m's error if it is one, else checks its type.
func (l *Locker) expect(m reply, want, asked string) error {
	if m.Type == "error" {
		if m.Code == "" {
			return l.broke(fmt.Sprintf("answered %s with an error without a code: %q", asked, clip(m.line)))
		}
		return &Error{Code: m.Code, Definite: m.Definite, Text: m.Text}
	}
	if m.Type != want {
		return l.broke(fmt.Sprintf("answered %s with %q, not %q: %q", asked, m.Type, want, clip(m.line)))
	}
	return nil
}

// broke ends the worker for a protocol problem and returns its error.
func (l *Locker) broke(problem string) error {
	l.p.fail(problem)
	return l.p.failErr
}

// Library is what the worker said it is.
func (l *Locker) Library() Library { return l.lib }

// Has reports whether the worker declared capability c.
func (l *Locker) Has(c string) bool { return l.caps[c] }

// do sends req on a goroutine of its own and waits for its reply or ctx.
// If ctx ends first, do returns its error at once; the request's reply is
// still awaited, and late (if not nil) handles it then, before any other
// request is sent.
func (l *Locker) do(ctx context.Context, req request, limit time.Duration, late func(reply)) (reply, error) {
	type result struct {
		m   reply
		err error
	}
	var (
		mu        sync.Mutex
		abandoned bool
		ch        = make(chan result, 1)
	)
	go func() {
		l.p.callMu.Lock()
		defer l.p.callMu.Unlock()
		m, err := l.p.call(req, limit)
		mu.Lock()
		defer mu.Unlock()
		if abandoned {
			if err == nil && late != nil {
				late(m)
			}
			return
		}
		ch <- result{m, err}
	}()
	select {
	case r := <-ch:
		return r.m, r.err
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		select {
		case r := <-ch:
			return r.m, r.err
		default:
		}
		abandoned = true
		return reply{}, ctx.Err()
	}
}

// Acquire asks the worker for the lock until it grants it or ctx ends.
// Each request's timeout_ms is what is left of ctx, at most a second; a
// timeout or an unavailable service is asked again. A grant that arrives
// after ctx ended is released at once.
func (l *Locker) Acquire(ctx context.Context) (backends.Lease, error) {
	for {
		if l.isClosed() {
			return nil, backends.ErrClosed
		}
		slice := acquireSlice
		if dl, ok := ctx.Deadline(); ok {
			slice = min(slice, time.Until(dl))
		}
		if slice <= 0 {
			<-ctx.Done() // its deadline is now, or a moment away
		}
		if ctx.Err() != nil {
			return nil, l.ctxErr(ctx)
		}
		slice = max(slice, time.Millisecond)
		m, err := l.do(ctx, request{Type: "acquire", TimeoutMS: ms(slice)}, slice+replyGrace, l.releaseLate)
		if err == nil {
			err = l.expect(m, "acquire_ok", "acquire")
		}
		if err == nil {
			return l.grant(m)
		}
		var we *Error
		switch {
		case ctx.Err() != nil:
			return nil, l.ctxErr(ctx)
		case errors.As(err, &we) && (we.Code == "timeout" || we.Code == "unavailable"):
			l.setLastErr(err)
			if we.Code == "unavailable" {
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond):
				}
			}
			continue
		}
		return nil, fmt.Errorf("foreign acquire: %w", err)
	}
}

func (l *Locker) ctxErr(ctx context.Context) error {
	l.mu.Lock()
	last := l.lastErr
	l.mu.Unlock()
	if last != nil {
		return fmt.Errorf("foreign acquire: %w (last: %v)", ctx.Err(), last)
	}
	return fmt.Errorf("foreign acquire: %w", ctx.Err())
}

func (l *Locker) setLastErr(err error) {
	l.mu.Lock()
	l.lastErr = err
	l.mu.Unlock()
}

// grant checks an acquire_ok and makes its Lease.
func (l *Locker) grant(m reply) (backends.Lease, error) {
	if m.Lease == nil || *m.Lease == "" {
		return nil, l.broke(fmt.Sprintf("acquire_ok without a lease: %q", clip(m.line)))
	}
	if l.caps[CapFence] && m.Fence == 0 {
		return nil, l.broke(fmt.Sprintf("declared fence, but acquire_ok's fence is 0: %q", clip(m.line)))
	}
	if !l.caps[CapFence] && m.Fence != 0 {
		return nil, l.broke(fmt.Sprintf("acquire_ok has fence %d, but the worker did not declare fence: %q", m.Fence, clip(m.line)))
	}
	ls := &lease{l: l, id: *m.Lease, fence: m.Fence, lost: make(chan struct{})}
	l.mu.Lock()
	l.lost[ls.id] = ls
	l.lastErr = nil
	l.mu.Unlock()
	if l.caps[CapLost] {
		return &noticeLease{ls}, nil
	}
	return ls, nil
}

// releaseLate releases a grant whose Acquire had already returned.
func (l *Locker) releaseLate(m reply) {
	if m.Type != "acquire_ok" || m.Lease == nil {
		return
	}
	_, _ = l.p.call(request{Type: "release", Lease: *m.Lease}, 10*time.Second+replyGrace)
}

// onNotice handles a lost notice: the lease's Lost channel closes.
func (l *Locker) onNotice(m reply) {
	if m.Lease == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if ls, ok := l.lost[*m.Lease]; ok {
		ls.lostText = m.Text
		close(ls.lost)
		delete(l.lost, *m.Lease)
	}
}

// TTL is the worker's ttl_ms, 0 without the ttl capability.
func (l *Locker) TTL() time.Duration { return l.ttl }

// Expiry is the worker's expiry_ms, 0 without the ttl capability.
func (l *Locker) Expiry() time.Duration { return l.expiry }

// Freeze stops the worker's process group (SIGSTOP) until thaw continues
// it: the library's runtime stops whole, timers and threads included.
// Nothing the worker sent is lost; its connections stay open.
func (l *Locker) Freeze() (thaw func()) { return l.p.freeze() }

// Cleanup sends cleanup when the worker declared it; otherwise there is
// nothing to remove.
func (l *Locker) Cleanup(ctx context.Context) error {
	if !l.caps[CapCleanup] {
		return nil
	}
	m, err := l.do(ctx, request{Type: "cleanup"}, startTimeout, nil)
	if err == nil {
		err = l.expect(m, "cleanup_ok", "cleanup")
	}
	if err != nil {
		return fmt.Errorf("foreign cleanup: %w", err)
	}
	return nil
}

func (l *Locker) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// Close sends close, then ends the worker: its stdin closed, its process
// group killed after 2 s. A second Close returns nil.
func (l *Locker) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	m, err := l.do(ctx, request{Type: "close"}, startTimeout, nil)
	if err == nil {
		err = l.expect(m, "close_ok", "close")
	}
	l.end()
	if err != nil {
		return fmt.Errorf("foreign close: %w", err)
	}
	return nil
}

// end ends the worker and the forwarders.
func (l *Locker) end() {
	l.p.end(endGrace)
	l.closeForwarders()
}

func (l *Locker) closeForwarders() {
	for _, f := range l.fwds {
		f.Close()
	}
}

// lease is one grant of the worker's lock.
type lease struct {
	l     *Locker
	id    string
	fence uint64
	lost  chan struct{}
	mu    sync.Mutex
	done  bool
	held  bool // release_ok's held
	// lostText is the lost notice's text, set before lost closes.
	lostText string
}

// noticeLease is the lease of a worker with the lost capability.
type noticeLease struct{ *lease }

var (
	_ backends.Lease        = (*lease)(nil)
	_ backends.LossNotifier = (*noticeLease)(nil)
)

func (s *lease) Fence() uint64 { return s.fence }

// Lost is closed when the worker sends a lost notice for this lease.
func (s *noticeLease) Lost() <-chan struct{} { return s.lost }

// Release sends release once; a second Release returns nil at once.
func (s *lease) Release(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return nil
	}
	limit := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		limit = min(limit, time.Until(dl))
	}
	m, err := s.l.do(ctx, request{Type: "release", Lease: s.id}, max(limit, time.Millisecond)+replyGrace, nil)
	if err == nil {
		err = s.l.expect(m, "release_ok", "release")
	}
	var we *Error
	if errors.As(err, &we) && we.Code == "not-held" {
		err = nil
	} else if err == nil {
		if m.Held == nil {
			return fmt.Errorf("foreign release: %w", s.l.broke(fmt.Sprintf("release_ok without held: %q", clip(m.line))))
		}
		s.held = *m.Held
	}
	if err != nil {
		return fmt.Errorf("foreign release: %w", err)
	}
	s.done = true
	s.l.mu.Lock()
	delete(s.l.lost, s.id)
	s.l.mu.Unlock()
	return nil
}

func ms(d time.Duration) int64 { return max(int64(d/time.Millisecond), 1) }
