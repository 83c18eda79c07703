package foreign

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/internal/spawn"
)

// Version is the protocol version this package speaks (docs/protocol.md).
const Version = 1

// maxLine is the longest line a worker may print on stdout.
const maxLine = 64 << 10

// request is one message to the worker. Every field but ID and Type
// belongs to one request type and is omitted from the others.
type request struct {
	ID        int64    `json:"id"`
	Type      string   `json:"type"`
	Protocol  int      `json:"protocol,omitempty"`
	Client    *int     `json:"client,omitempty"`
	Key       string   `json:"key,omitempty"`
	LeaseMS   int64    `json:"lease_ms,omitempty"`
	Service   string   `json:"service,omitempty"`
	Addrs     []string `json:"addrs,omitempty"`
	URL       string   `json:"url,omitempty"`
	Username  *string  `json:"username,omitempty"`
	Password  *string  `json:"password,omitempty"`
	TimeoutMS int64    `json:"timeout_ms,omitempty"`
	Lease     string   `json:"lease,omitempty"`
}

// reply is one message from the worker: a reply (InReplyTo set) or a
// notice.
type reply struct {
	InReplyTo    int64    `json:"in_reply_to"`
	Type         string   `json:"type"`
	Code         string   `json:"code"`
	Text         string   `json:"text"`
	Definite     bool     `json:"definite"`
	Library      string   `json:"library"`
	Version      string   `json:"version"`
	Runtime      string   `json:"runtime"`
	Capabilities []string `json:"capabilities"`
	TTLMS        int64    `json:"ttl_ms"`
	ExpiryMS     int64    `json:"expiry_ms"`
	Lease        *string  `json:"lease"`
	Fence        uint64   `json:"fence"`
	Held         *bool    `json:"held"`
	line         string
}

// Error is an error reply of the worker: its code, whether the operation
// certainly did not happen, and its text.
type Error struct {
	Code     string // timeout, unavailable, not-held, unsupported, malformed, crash, or the worker's own
	Definite bool
	Text     string
}

func (e *Error) Error() string {
	d := "indefinite"
	if e.Definite {
		d = "definite"
	}
	return fmt.Sprintf("%s (%s): %s", e.Code, d, e.Text)
}

// ProtocolError is a worker that broke the protocol, exited or hung: the
// worker is ended, and every later call fails with it.
type ProtocolError struct {
	Worker  string // the worker's name and client number
	Problem string // what went wrong, with the line at fault
	Stderr  string // the last lines the worker wrote on stderr
}

func (e *ProtocolError) Error() string {
	s := fmt.Sprintf("worker %s: %s", e.Worker, e.Problem)
	if e.Stderr != "" {
		s += "; its last stderr lines:\n" + e.Stderr
	}
	return s
}

// proc is one worker process and the protocol's state with it.
type proc struct {
	name   string
	cmd    *exec.Cmd
	group  int // the process group to signal: the worker's own, or 0 when it runs in this process's (joined)
	stdin  io.WriteCloser
	stderr *tail
	notice func(reply)

	callMu  sync.Mutex // one request at a time
	nextID  int64
	pending atomic.Int64 // the id awaiting its reply, 0 when none
	replies chan reply

	broken  chan struct{} // closed by fail
	failErr error
	failed  sync.Once
	exited  chan struct{} // closed once Wait returned
	waitErr error

	frozenMu    sync.Mutex
	frozen      bool
	frozenSince time.Time
	frozenTotal time.Duration
}

// start runs argv as a worker. joined: it stays in this process's process
// group (a chaos worker's, which the coordinator stops as a whole);
// otherwise it leads a group of its own, which Freeze stops.
func start(name string, argv []string, dir string, env []string, joined bool, notice func(reply)) (*proc, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, fmt.Errorf("worker %s: empty command: give the worker's command line (program and arguments)", name)
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, fmt.Errorf("worker %s: command %q not found: %w (install it, or give its full path)", name, argv[0], err)
	}
	cmd := exec.Command(path, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	p := &proc{name: name, cmd: cmd, stderr: newTail(4096), notice: notice,
		replies: make(chan reply, 1), broken: make(chan struct{}), exited: make(chan struct{})}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	// Pipes of our own for stdout and stderr: read to their end (every
	// process holding them gone), whatever Wait does meanwhile.
	outR, outW, errR, errW, err := spawn.Pipes()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: !joined, Pdeathsig: syscall.SIGKILL}
	err = spawn.Start(cmd)
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("worker %s: start %s: %w", name, argv[0], err)
	}
	stdout := outR
	go func() { _, _ = io.Copy(p.stderr, errR); errR.Close() }()
	if !joined {
		p.group = cmd.Process.Pid
	}
	reap(p.reaped())
	go func() { p.read(stdout); stdout.Close() }()
	go func() { p.waitErr = cmd.Wait(); close(p.exited) }()
	return p, nil
}

// reaped is the process group the reaper kills should this process die
// first: the worker's own, or this process's when the worker joined it.
func (p *proc) reaped() int {
	if p.group != 0 {
		return p.group
	}
	return syscall.Getpgrp()
}

// read reads the worker's stdout until it ends, handing replies to the
// call that waits for them and notices to p.notice.
func (p *proc) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), maxLine)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		var m reply
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			p.fail(fmt.Sprintf("printed a line that is not a JSON object (%v): %q", err, clip(line)))
			return
		}
		m.line = line
		if m.Type == "" {
			p.fail(fmt.Sprintf("printed a message without a type: %q", clip(line)))
			return
		}
		if m.InReplyTo == 0 {
			if m.Type != "lost" {
				p.fail(fmt.Sprintf("printed a notice of unknown type %q (version %d has only \"lost\"): %q", m.Type, Version, clip(line)))
				return
			}
			p.notice(m)
			continue
		}
		if want := p.pending.Load(); m.InReplyTo != want {
			what := fmt.Sprintf("it waits for the reply to id %d", want)
			if want == 0 {
				what = "it waits for no reply"
			}
			p.fail(fmt.Sprintf("answered id %d, which the suite did not ask (%s): %q", m.InReplyTo, what, clip(line)))
			return
		}
		p.pending.Store(0)
		p.replies <- m
	}
	if err := sc.Err(); err != nil {
		p.fail(fmt.Sprintf("stdout unreadable: %v", err))
	}
}

// fail marks the worker broken with problem and ends its process group.
func (p *proc) fail(problem string) {
	p.failed.Do(func() {
		p.failErr = &ProtocolError{Worker: p.name, Problem: problem, Stderr: p.stderr.String()}
		close(p.broken)
		p.kill()
	})
}

// kill ends the worker's process group (the worker alone when it joined
// this process's).
func (p *proc) kill() {
	if p.group != 0 {
		_ = faults.Group(p.group).Cont()
		_ = faults.Group(p.group).Kill()
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Kill()
}

// call sends req and waits for its reply, for at most limit of the time
// the worker was not frozen. It holds callMu: the caller does.
func (p *proc) call(req request, limit time.Duration) (reply, error) {
	select {
	case <-p.broken:
		return reply{}, p.failErr
	default:
	}
	p.nextID++
	req.ID = p.nextID
	b, err := json.Marshal(req)
	if err != nil {
		return reply{}, err
	}
	p.pending.Store(req.ID)
	frozen0 := p.frozenFor()
	if _, err := p.stdin.Write(append(b, '\n')); err != nil {
		p.settle()
		p.fail(fmt.Sprintf("cannot be sent %s (id %d): %v", req.Type, req.ID, err))
		return reply{}, p.failErr
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	extended := time.Duration(0)
	for {
		select {
		case m := <-p.replies:
			return m, nil
		case <-p.broken:
			return reply{}, p.failErr
		case <-p.exited:
			p.settle()
			p.fail(fmt.Sprintf("exited (%v) before it answered %s (id %d)", p.exitStatus(), req.Type, req.ID))
			return reply{}, p.failErr
		case <-timer.C:
			// Time the suite itself kept the worker stopped does not count.
			if extra := p.frozenFor() - frozen0 - extended; extra > 0 || p.isFrozen() {
				extended += extra
				timer.Reset(max(extra, 100*time.Millisecond))
				continue
			}
			p.fail(fmt.Sprintf("did not answer %s (id %d) within %v", req.Type, req.ID, limit))
			return reply{}, p.failErr
		}
	}
}

// settle waits briefly for the reader to finish with stdout, so that a
// worker that printed a bad line and exited is reported for the line.
func (p *proc) settle() {
	select {
	case <-p.broken:
	case <-time.After(100 * time.Millisecond):
	}
}

func (p *proc) exitStatus() string {
	if p.waitErr == nil {
		return "status 0"
	}
	return p.waitErr.Error()
}

// end closes the worker's stdin, waits up to grace for it to exit, then
// kills its process group, and tells the reaper it is gone.
func (p *proc) end(grace time.Duration) {
	_ = p.stdin.Close()
	p.thawAll()
	select {
	case <-p.exited:
	case <-time.After(grace):
	}
	p.kill() // children it forked, too
	<-p.exited
	if p.group != 0 {
		// A joined worker's group is this process's: it stays listed, so
		// that the reaper ends it once this process is gone.
		unreap(p.group)
	}
}

// freeze stops the worker's process group with SIGSTOP until the returned
// function continues it.
func (p *proc) freeze() (thaw func()) {
	p.frozenMu.Lock()
	p.frozen, p.frozenSince = true, time.Now()
	p.frozenMu.Unlock()
	p.signal(faults.Group.Stop, syscall.SIGSTOP)
	var once sync.Once
	return func() { once.Do(p.thawAll) }
}

func (p *proc) thawAll() {
	p.frozenMu.Lock()
	defer p.frozenMu.Unlock()
	if !p.frozen {
		return
	}
	p.signal(faults.Group.Cont, syscall.SIGCONT)
	p.frozen = false
	p.frozenTotal += time.Since(p.frozenSince)
}

func (p *proc) signal(group func(faults.Group) error, sig syscall.Signal) {
	if p.group != 0 {
		_ = group(faults.Group(p.group))
		return
	}
	_ = p.cmd.Process.Signal(sig)
}

func (p *proc) isFrozen() bool {
	p.frozenMu.Lock()
	defer p.frozenMu.Unlock()
	return p.frozen
}

// frozenFor is the total time the worker was frozen, up to now.
func (p *proc) frozenFor() time.Duration {
	p.frozenMu.Lock()
	defer p.frozenMu.Unlock()
	d := p.frozenTotal
	if p.frozen {
		d += time.Since(p.frozenSince)
	}
	return d
}

// clip shortens a line for an error message.
func clip(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

// tail keeps the last n bytes written to it.
type tail struct {
	mu  sync.Mutex
	n   int
	buf []byte
}

func newTail(n int) *tail { return &tail{n: n} }

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if len(t.buf) > t.n {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-t.n:]...)
	}
	return len(b), nil
}

// String is the last lines kept (the first, cut, line dropped), trimmed.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := string(t.buf)
	if len(t.buf) == t.n {
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
	}
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > 10 {
		lines = lines[len(lines)-10:]
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}
