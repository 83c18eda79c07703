package worker

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/internal/roles"
)

// Process is the coordinator's handle on one worker, wherever it runs: a
// process of this machine (Proc, from Start) or one that a supervisor runs
// elsewhere (Remote, from a Hub). Stop and Cont stop and continue the
// worker as a whole (faults.Stopper); Stop returns an error wrapping
// syscall.ESRCH once the worker has exited.
type Process interface {
	faults.Stopper
	// Events decodes the worker's events into ch until it ends (see
	// DecodeEvents).
	Events(ch chan<- Event) error
	// Go starts a ready worker: it begins sections until until (since
	// Spec.Base).
	Go(until time.Duration)
	// Ack answers a worker waiting after a "stall" event.
	Ack()
	// End continues the worker, waits up to grace for it to exit, then
	// kills it; it returns once the worker is gone.
	End(grace time.Duration)
	// Done is closed when the worker has exited.
	Done() <-chan struct{}
	// Log is the tail of the worker's output, for error messages.
	Log() string
}

// Starter starts workers: Start runs the worker of spec with argv (this
// binary and its arguments, as a worker runs it) and env added to its
// environment, its output in logPath if it runs on this machine.
type Starter interface {
	Start(spec Spec, argv, env []string, logPath string) (Process, error)
}

// Local starts workers as processes of this machine (Start).
type Local struct{}

func (Local) Start(spec Spec, argv, env []string, logPath string) (Process, error) {
	return Start(spec, argv, env, logPath)
}

var (
	_ Process = (*Proc)(nil)
	_ Process = (*Remote)(nil)
)

// SupervisorEnv makes a process a worker's supervisor (Supervise, served
// by harness/role's Serve): its value is the coordinator's address
// (host:port) and the worker's token, separated by a space.
const SupervisorEnv = "LOCKSUITE_SUPERVISOR"

// The protocol between a coordinator's Hub and a supervisor, over one TCP
// connection, one line each:
//
//	supervisor → hub: "hello <token> <node>" first; then the worker's events
//	                  as it writes them (JSON objects); "!stopped",
//	                  "!continued" or "!error <text>" answering a stop or a
//	                  cont; "!exit <status>" once the worker has exited.
//	hub → supervisor: "go <until>" and "ok" (passed to the worker's
//	                  descriptor 4); "stop" and "cont" (SIGSTOP, SIGCONT of
//	                  the worker's process group, answered once /proc shows
//	                  the worker stopped or running); "end <grace ns>".
const (
	replyStopped   = "!stopped"
	replyContinued = "!continued"
	replyError     = "!error "
	replyExit      = "!exit "
)

// controlTimeout bounds how long a supervisor may take to answer a stop or
// a cont, and to see its effect in /proc.
const controlTimeout = 5 * time.Second

// A process with SupervisorEnv set is a worker's supervisor: the role that
// harness/role's Serve dispatches.
func init() { roles.Add(SupervisorEnv, superviseRole) }

// superviseRole is the supervisor role, SupervisorEnv's value v: Supervise,
// or the status 2 for a value that is not "host:port token".
func superviseRole(v string) int {
	addr, token, ok := strings.Cut(v, " ")
	if !ok {
		fmt.Fprintf(os.Stderr, "supervisor: bad %s %q: want \"host:port token\"\n", SupervisorEnv, v)
		return 2
	}
	return Supervise(addr, token, os.Getenv("NODE_NAME"))
}

// Supervise is a worker's supervisor, the PID 1 of a worker's container:
// it dials the coordinator's Hub at addr, says hello with token and node
// (the name of the node it runs on, for the rows), runs this binary again
// with its own arguments and environment (without SupervisorEnv) as the
// worker, its events on descriptor 3 and its acks on descriptor 4, and
// relays both over the connection. It stops and continues the worker's
// process group when the coordinator says so, and answers once /proc shows
// the worker in that state: the pause inside the container. When the
// worker exits, Supervise sends its status and returns 0; when the
// connection breaks first (the coordinator is gone), it kills the worker
// and returns 1.
func Supervise(addr, token, node string) int {
	logf := func(format string, a ...any) { fmt.Fprintf(os.Stderr, "supervisor: "+format+"\n", a...) }
	var conn net.Conn
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; {
		if conn, err = net.DialTimeout("tcp", addr, 5*time.Second); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		logf("dial the coordinator: %v", err)
		return 1
	}
	defer conn.Close()
	var wmu sync.Mutex
	send := func(line string) {
		wmu.Lock()
		defer wmu.Unlock()
		_, _ = io.WriteString(conn, line+"\n")
	}
	send(fmt.Sprintf("hello %s %s", token, node))

	exe, err := os.Executable()
	if err != nil {
		logf("%v", err)
		return 1
	}
	evR, evW, err := os.Pipe()
	if err != nil {
		logf("%v", err)
		return 1
	}
	ackR, ackW, err := os.Pipe()
	if err != nil {
		logf("%v", err)
		return 1
	}
	cmd := exec.Command(exe, os.Args[1:]...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, SupervisorEnv+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.ExtraFiles = []*os.File{evW, ackR}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		send(replyError + err.Error())
		logf("start the worker: %v", err)
		return 1
	}
	evW.Close()
	ackR.Close()
	pid := cmd.Process.Pid
	relayed := make(chan struct{})
	go func() { // the worker's events, line by line
		defer close(relayed)
		br := bufio.NewReader(evR)
		for {
			line, err := br.ReadString('\n')
			if line = strings.TrimRight(line, "\n"); line != "" {
				send(line)
			}
			if err != nil {
				return
			}
		}
	}()
	exited := make(chan struct{})
	var reported atomic.Bool // the exit sent: the coordinator may close now
	go func() {
		err := cmd.Wait()
		<-relayed
		status := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			status = ee.ExitCode()
		}
		reported.Store(true)
		send(fmt.Sprintf("%s%d", replyExit, status))
		close(exited)
	}()
	lines := make(chan string)
	go func() {
		defer close(lines)
		br := bufio.NewReader(conn)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			lines <- strings.TrimRight(line, "\n")
		}
	}()
	group := faults.Group(pid)
	for {
		select {
		case <-exited:
			return 0
		case line, ok := <-lines:
			if !ok { // the coordinator is gone
				if reported.Load() {
					<-exited
					return 0
				}
				_ = group.Kill()
				<-exited
				logf("the coordinator closed the connection: worker killed")
				return 1
			}
			switch cmdName, arg, _ := strings.Cut(line, " "); cmdName {
			case "go", "ok":
				_, _ = io.WriteString(ackW, line+"\n")
			case "stop", "cont":
				signal, want := group.Stop, true
				reply := replyStopped
				if cmdName == "cont" {
					signal, want, reply = group.Cont, false, replyContinued
				}
				if err := signal(); err != nil {
					send(replyError + err.Error())
				} else if err := group.Await(want, controlTimeout); err != nil {
					send(replyError + err.Error())
				} else {
					send(reply)
				}
			case "end":
				ns, _ := strconv.ParseInt(arg, 10, 64)
				_ = group.Cont()
				select {
				case <-exited:
				case <-time.After(time.Duration(ns)):
					_ = group.Kill()
					<-exited
				}
				return 0
			default:
				logf("unknown command %q", line)
			}
		}
	}
}

// Hub is the coordinator's end of the supervisors' connections: it accepts
// them on a listener and hands each to the Remote that Expect made for its
// token.
type Hub struct {
	ln      net.Listener
	mu      sync.Mutex
	pending map[string]*Remote
	closed  bool
}

// NewHub accepts supervisors' connections on ln until Close.
func NewHub(ln net.Listener) *Hub {
	h := &Hub{ln: ln, pending: map[string]*Remote{}}
	go h.accept()
	return h
}

func (h *Hub) accept() {
	for {
		conn, err := h.ln.Accept()
		if err != nil {
			return
		}
		go h.hello(conn)
	}
}

// hello reads a supervisor's hello and attaches its connection to the
// Remote of its token; a connection with no hello, or an unknown token, is
// closed.
func (h *Hub) hello(conn net.Conn) {
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	line, err := br.ReadString('\n')
	_ = conn.SetReadDeadline(time.Time{})
	f := strings.Fields(line)
	if err != nil || len(f) < 2 || f[0] != "hello" {
		conn.Close()
		return
	}
	h.mu.Lock()
	r := h.pending[f[1]]
	delete(h.pending, f[1])
	h.mu.Unlock()
	if r == nil {
		conn.Close()
		return
	}
	node := ""
	if len(f) > 2 {
		node = f[2]
	}
	r.attach(conn, br, node)
}

// Addr is the listener's address.
func (h *Hub) Addr() net.Addr { return h.ln.Addr() }

// Expect makes the Remote of worker id, and the token its supervisor says
// hello with (SupervisorEnv). log, if not nil, gives the worker's output
// for error messages (Remote.Log).
func (h *Hub) Expect(id int, log func() string) (*Remote, string) {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	token := hex.EncodeToString(b)
	r := &Remote{id: id, log: log, attached: make(chan struct{}), done: make(chan struct{}), replies: make(chan string, 1)}
	r.evR, r.evW = io.Pipe()
	h.mu.Lock()
	if h.closed {
		close(r.done)
	} else {
		h.pending[token] = r
	}
	h.mu.Unlock()
	return r, token
}

// Close stops accepting connections; the Remotes still pending are done.
func (h *Hub) Close() error {
	h.mu.Lock()
	h.closed = true
	for t, r := range h.pending {
		delete(h.pending, t)
		r.finish()
	}
	h.mu.Unlock()
	return h.ln.Close()
}

// Remote is a worker that a supervisor (Supervise) runs elsewhere, over its
// connection to a Hub. Until the supervisor connects, Events waits and the
// commands are not sent; End before it connects ends the Remote.
type Remote struct {
	id       int
	log      func() string
	node     string
	conn     net.Conn
	attached chan struct{}
	done     chan struct{}
	doneOnce sync.Once
	evR      *io.PipeReader
	evW      *io.PipeWriter
	replies  chan string
	ctl      sync.Mutex // one stop or cont at a time
	wmu      sync.Mutex
}

func (r *Remote) attach(conn net.Conn, br *bufio.Reader, node string) {
	r.conn, r.node = conn, node
	close(r.attached)
	go func() {
		defer r.finish()
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimRight(line, "\n")
			switch {
			case strings.HasPrefix(line, replyExit):
				return
			case strings.HasPrefix(line, "!"):
				select {
				case r.replies <- line:
				default: // an answer nobody waits for any more
				}
			default:
				if _, err := io.WriteString(r.evW, line+"\n"); err != nil {
					return
				}
			}
		}
	}()
}

func (r *Remote) finish() {
	r.doneOnce.Do(func() {
		r.evW.Close()
		close(r.done)
		if r.conn != nil {
			r.conn.Close()
		}
	})
}

// Node is the name of the node the supervisor runs on, as it said hello
// ("" before it connected).
func (r *Remote) Node() string {
	select {
	case <-r.attached:
		return r.node
	default:
		return ""
	}
}

func (r *Remote) Events(ch chan<- Event) error {
	select {
	case <-r.attached:
	case <-r.done:
		return nil
	}
	return DecodeEvents(r.evR, r.id, ch)
}

// send writes one line to the supervisor, once it has connected.
func (r *Remote) send(line string) error {
	select {
	case <-r.attached:
	case <-r.done:
		return fmt.Errorf("worker %d: %w", r.id, syscall.ESRCH)
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	_, err := io.WriteString(r.conn, line+"\n")
	return err
}

func (r *Remote) Go(until time.Duration) { _ = r.send(fmt.Sprintf("go %d", int64(until))) }

func (r *Remote) Ack() { _ = r.send("ok") }

// Stop stops the worker's process group and returns once its supervisor
// saw it stopped; an error if it could not within a bound.
func (r *Remote) Stop() error { return r.control("stop", replyStopped) }

// Cont continues the worker's process group, as Stop.
func (r *Remote) Cont() error { return r.control("cont", replyContinued) }

func (r *Remote) control(cmd, want string) error {
	r.ctl.Lock()
	defer r.ctl.Unlock()
	select { // an answer left by an earlier command that timed out
	case <-r.replies:
	default:
	}
	if err := r.send(cmd); err != nil {
		return fmt.Errorf("worker %d: %s: %w", r.id, cmd, syscall.ESRCH)
	}
	select {
	case got := <-r.replies:
		if got == want {
			return nil
		}
		msg := strings.TrimPrefix(got, replyError)
		if strings.Contains(msg, syscall.ESRCH.Error()) || strings.Contains(msg, "has exited") {
			return fmt.Errorf("worker %d: %s: %s: %w", r.id, cmd, msg, syscall.ESRCH)
		}
		return fmt.Errorf("worker %d: %s: %s", r.id, cmd, msg)
	case <-r.done:
		return fmt.Errorf("worker %d: %s: %w", r.id, cmd, syscall.ESRCH)
	case <-time.After(controlTimeout + 5*time.Second):
		return fmt.Errorf("worker %d: %s: no answer from its supervisor within %v", r.id, cmd, controlTimeout+5*time.Second)
	}
}

// End asks the supervisor to continue the worker, wait up to grace for it
// to exit and kill it then; it returns once the supervisor reported the
// exit or closed the connection (at most grace and 10 s later).
func (r *Remote) End(grace time.Duration) {
	select {
	case <-r.attached:
	default: // never connected: nothing to end
		r.finish()
		return
	}
	if err := r.send(fmt.Sprintf("end %d", int64(grace))); err == nil {
		select {
		case <-r.done:
		case <-time.After(grace + 10*time.Second):
		}
	}
	r.finish()
}

func (r *Remote) Done() <-chan struct{} { return r.done }

func (r *Remote) Log() string {
	if r.log == nil {
		return ""
	}
	return r.log()
}
