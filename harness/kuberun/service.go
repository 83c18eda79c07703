package kuberun

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/internal/roles"
)

// ServiceEnv makes this binary a lock service's supervisor (serviceRole),
// the PID 1 of the service's container: its value is a JSON serviceSpec.
// CopySelfEnv makes it copy itself to the path it names and exit: the init
// container that puts the supervisor into an image that does not have it
// (Redis's).
const (
	ServiceEnv  = "LOCKSUITE_SERVICE"
	CopySelfEnv = "LOCKSUITE_COPY_SELF"
)

// controlPort is the port a service's supervisor listens on for the
// driver's commands.
const controlPort = 7070

// controlTimeout bounds a supervisor's answer to a command, and the time
// it waits for /proc to show a stop or a cont.
const controlTimeout = 10 * time.Second

// serviceSpec is a supervisor's ServiceEnv.
type serviceSpec struct {
	Control int    `json:"control"` // the port it listens on
	Token   string `json:"token"`   // what every command starts with
	// Env is added to the server's environment (the container's, without
	// ServiceEnv).
	Env []string `json:"env,omitempty"`
}

// A process with CopySelfEnv or ServiceEnv set is what it asks for: the
// roles that harness/role's Serve dispatches (copySelfRole, serviceRole).
func init() {
	roles.Add(CopySelfEnv, copySelfRole)
	roles.Add(ServiceEnv, serviceRole)
}

// copySelfRole is the init container's role: it copies this binary to
// path, and returns 0, or 1 when it could not.
func copySelfRole(path string) int {
	if err := copySelf(path); err != nil {
		fmt.Fprintf(os.Stderr, "locksuite: copy to %s: %v\n", path, err)
		return 1
	}
	return 0
}

// serviceRole is a lock service's supervisor, its ServiceEnv the JSON
// serviceSpec v (the status 2 when it is not). It runs its arguments
// (none: this binary again) as the server, in a process group of its own,
// and on its control port obeys, from a connection whose line starts with
// the token:
//
//	"<token> stop", "<token> cont": SIGSTOP, SIGCONT of the server's group,
//	   answered once /proc shows the server stopped or running;
//	"<token> kill": SIGKILL of the group, answered once the server has exited;
//	"<token> crash": SIGKILL of the group and, once the server has exited, the
//	   same command started again at once: the same address and data;
//
// each answered by "ok" or "error <text>". A server that exits on its own
// ends the supervisor with status 1, so that the pod's status shows it;
// SIGTERM kills the server and ends it with status 0.
func serviceRole(v string) int {
	var s serviceSpec
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		fmt.Fprintf(os.Stderr, "supervisor: bad %s %q: %v\n", ServiceEnv, v, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return superviseService(ctx, s, os.Args[1:], os.Stderr)
}

// copySelf copies this binary to path, executable.
func copySelf(path string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	in, err := os.Open(exe)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// superviseService is serviceRole's supervisor, until ctx ends.
func superviseService(ctx context.Context, s serviceSpec, argv []string, logw io.Writer) int {
	logf := func(format string, a ...any) { fmt.Fprintf(logw, "supervisor: "+format+"\n", a...) }
	if len(argv) == 0 {
		exe, err := os.Executable()
		if err != nil {
			logf("%v", err)
			return 1
		}
		argv = []string{exe}
	}
	env := s.Env
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, ServiceEnv+"=") {
			env = append(env, kv)
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(s.Control)))
	if err != nil {
		logf("listen for the driver: %v", err)
		return 1
	}
	defer ln.Close()
	sv := &server{argv: argv, env: env, out: logw, died: make(chan error, 1)}
	if err := sv.start(); err != nil {
		logf("start %s: %v", argv[0], err)
		return 1
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go sv.serve(c, s.Token, logf)
		}
	}()
	select {
	case <-ctx.Done():
		sv.kill()
		return 0
	case err := <-sv.died:
		logf("%s exited on its own: %v", argv[0], err)
		return 1
	}
}

// server is the process a supervisor runs.
type server struct {
	argv, env []string
	out       io.Writer
	died      chan error // an exit nobody asked for

	mu     sync.Mutex // one command at a time
	pid    int
	exited chan struct{} // closed when the current process has exited
	killed bool          // its exit was asked for
}

// start starts the server's process. The caller holds mu, or is the
// supervisor before it accepts commands.
func (s *server) start() error {
	cmd := exec.Command(s.argv[0], s.argv[1:]...)
	cmd.Env = s.env
	cmd.Stdout, cmd.Stderr = s.out, s.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	s.pid, s.exited, s.killed = cmd.Process.Pid, exited, false
	go func() {
		err := cmd.Wait()
		s.mu.Lock()
		asked := s.killed && s.exited == exited
		s.mu.Unlock()
		close(exited)
		if !asked {
			select {
			case s.died <- err:
			default:
			}
		}
	}()
	return nil
}

// kill kills the server's group and waits until its process has exited.
func (s *server) kill() {
	s.mu.Lock()
	s.killed = true
	pid, exited := s.pid, s.exited
	s.mu.Unlock()
	_ = faults.Group(pid).Kill()
	<-exited
}

// serve answers one connection's command.
func (s *server) serve(c net.Conn, token string, logf func(string, ...any)) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(controlTimeout + 5*time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return
	}
	tok, cmd, _ := strings.Cut(strings.TrimSpace(line), " ")
	if tok != token {
		logf("a command without the run's token, from %v", c.RemoteAddr())
		_, _ = io.WriteString(c, "error wrong token\n")
		return
	}
	if err := s.do(cmd); err != nil {
		_, _ = io.WriteString(c, "error "+err.Error()+"\n")
		return
	}
	_, _ = io.WriteString(c, "ok\n")
}

// do carries out cmd.
func (s *server) do(cmd string) error {
	if addr, ok := strings.CutPrefix(cmd, "dial "); ok {
		// A probe from this pod: does a connection to addr go through?
		c, err := net.DialTimeout("tcp", addr, dialProbe)
		if err != nil {
			return fmt.Errorf("dial %s from the pod: %w", addr, err)
		}
		c.Close()
		return nil
	}
	switch cmd {
	case "stop", "cont":
		s.mu.Lock()
		defer s.mu.Unlock()
		g := faults.Group(s.pid)
		signal := g.Stop
		if cmd == "cont" {
			signal = g.Cont
		}
		if err := signal(); err != nil {
			return err
		}
		return g.Await(cmd == "stop", controlTimeout)
	case "kill", "crash":
		s.kill()
		if cmd == "kill" {
			return nil
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.start()
	}
	return fmt.Errorf("unknown command %q", cmd)
}

// command sends cmd to the supervisor at addr with token and waits for its
// answer.
func command(ctx context.Context, addr, token, cmd string) error {
	ctx, cancel := context.WithTimeout(ctx, controlTimeout+10*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("the supervisor at %s: %w", addr, err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := io.WriteString(c, token+" "+cmd+"\n"); err != nil {
		return fmt.Errorf("the supervisor at %s: %w", addr, err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("the supervisor at %s: no answer to %s: %w", addr, cmd, err)
	}
	switch line = strings.TrimSpace(line); {
	case line == "ok":
		return nil
	case strings.HasPrefix(line, "error "):
		return fmt.Errorf("the supervisor at %s: %s: %s", addr, cmd, strings.TrimPrefix(line, "error "))
	}
	return fmt.Errorf("the supervisor at %s: answer %q to %s", addr, line, cmd)
}

var errNoPower = errors.New("a pod's volume cannot lose power here: power-loss needs the harness's lazyfs under the server's data, which only servers this machine starts have")

// Service is a lock service's pod of a Run (StartEtcd, StartRedis,
// StartNATS). It is
// a harness/servers Server (Name; Endpoint, the URL its clients use; Stop
// deletes the pod), and for the server faults a faults.Service
// (suite.Servers) of one member, the server process, which the pod's
// supervisor stops, continues and kills (serviceRole), and a
// faults.Crasher (suite.Crasher): Crash has the supervisor SIGKILL the
// server and start it again at once in the same pod, on the same address
// and the same emptyDir data, as the server-crash scenario asks. (A pod
// deleted and created again would get another address and an empty
// emptyDir: it would need a Service's virtual address, kube-proxy, and a
// persistent volume.) A power loss is not supported: CanCrash says why.
type Service struct {
	run           *Run
	name, process string // "etcd", "etcd"; "redis", "redis-server"; "nats", "nats-server"
	pod, url      string
	control       string // the supervisor's host:port
	token         string
	ready         func(context.Context) error
	mu            sync.Mutex // one crash at a time
}

var (
	_ faults.Service = (*Service)(nil)
	_ faults.Crasher = (*Service)(nil)
)

// Name is the service's short name, as harness/servers names it: "etcd",
// "redis", "nats".
func (s *Service) Name() string { return s.name }

// Endpoint is the URL the service's clients use (the pod's address).
func (s *Service) Endpoint() string { return s.url }

// Pod is the name of the service's pod.
func (s *Service) Pod() string { return s.pod }

// Stop deletes the service's pod (grace period 0). It is idempotent; the
// Run's Close deletes it too.
func (s *Service) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	zero := int64(0)
	if err := s.run.cs.Pods(s.run.ns).Delete(ctx, s.pod, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("kubernetes: delete the %s pod: %w", s.name, err)
	}
	return nil
}

// Members is the server process in the pod.
func (s *Service) Members() []faults.Member { return []faults.Member{podMember{s}} }

// Healthy returns nil when the server answers (etcd's /health, Redis's
// PING), within 5 s.
func (s *Service) Healthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.ready(ctx); err != nil {
		return fmt.Errorf("%s pod %s: %w", s.name, s.pod, err)
	}
	return nil
}

// CanCrash returns nil without powerLoss; a power loss is not supported.
func (s *Service) CanCrash(powerLoss bool) error {
	if powerLoss {
		return fmt.Errorf("%w: %v", errors.ErrUnsupported, errNoPower)
	}
	return nil
}

// Crash has the pod's supervisor SIGKILL the server and start it again,
// and returns once it answers (Healthy), up to a minute.
func (s *Service) Crash(ctx context.Context, powerLoss bool) (faults.CrashReport, error) {
	r := faults.CrashReport{PowerLoss: powerLoss}
	if err := s.CanCrash(powerLoss); err != nil {
		return r, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r.Killed = time.Now() // the command's sending: the kill follows within a round trip
	if err := command(ctx, s.control, s.token, "crash"); err != nil {
		return r, fmt.Errorf("kubernetes: crash the %s pod %s: %w", s.name, s.pod, err)
	}
	if err := faults.WaitHealthy(ctx, time.Minute, s.ready); err != nil {
		return r, fmt.Errorf("kubernetes: the %s pod %s after the crash: %w; its log: %s", s.name, s.pod, err, s.run.podLog(s.pod))
	}
	r.Serving = time.Now()
	return r, nil
}

// dialProbe bounds a supervisor's probe connection (Reaches).
const dialProbe = 2 * time.Second

// Reaches returns nil when a TCP connection from the service's pod to
// addr (host:port) goes through within 2 s, and the error otherwise: the
// evidence a Partition's Probe needs that the pod is, or is not, cut off.
func (s *Service) Reaches(ctx context.Context, addr string) error {
	return command(ctx, s.control, s.token, "dial "+addr)
}

// Sync does nothing: the pod's data cannot lose power (CanCrash).
func (s *Service) Sync() error { return nil }

// podMember is the server process in a Service's pod.
type podMember struct{ s *Service }

func (m podMember) Name() string { return m.s.process }
func (m podMember) Stop() error  { return m.do("stop") }
func (m podMember) Cont() error  { return m.do("cont") }
func (m podMember) Kill() error  { return m.do("kill") }

func (m podMember) do(cmd string) error {
	if err := command(context.Background(), m.s.control, m.s.token, cmd); err != nil {
		return fmt.Errorf("kubernetes: %s pod %s: %w", m.s.name, m.s.pod, err)
	}
	return nil
}

// etcdReady is nil once etcd at url says it is healthy (GET /health).
func etcdReady(url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/health", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"health":"true"`) {
			return fmt.Errorf("etcd /health: %s %s", resp.Status, bytes.TrimSpace(b))
		}
		return nil
	}
}

// redisReady is nil once the Redis server at addr answers PING.
func redisReady(addr string) func(context.Context) error {
	return lineReady(addr, "PING\r\n", "+PONG")
}

// natsReady is nil once the NATS server at addr greets a client (INFO).
func natsReady(addr string) func(context.Context) error { return lineReady(addr, "", "INFO ") }

// lineReady is nil once the server at addr, sent send, answers a line
// that starts with want.
func lineReady(addr, send, want string) func(context.Context) error {
	return func(ctx context.Context) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		if dl, ok := ctx.Deadline(); ok {
			_ = c.SetDeadline(dl)
		}
		if _, err := io.WriteString(c, send); err != nil {
			return err
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return err
		}
		if !strings.HasPrefix(line, want) {
			return fmt.Errorf("%s: answered %.40q, want %q", addr, line, want)
		}
		return nil
	}
}
