package servers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/internal/spawn"
)

// Cluster is a replicated lock service the harness started itself on
// loopback: several server processes, each with its own ports and
// directory. Stop ends every process and removes every directory.
type Cluster interface {
	Server
	// Members are the service's server processes, in a fixed order.
	Members() []*Member
	// Healthy returns nil when the service serves requests: it has a
	// leader (a primary) that every running member agrees on, and every
	// running member answers. A killed member does not count; a stopped
	// (SIGSTOP) one does, and makes the cluster unhealthy.
	Healthy(ctx context.Context) error
	// Leader is the member that leads now (the Raft leader, the primary).
	Leader(ctx context.Context) (*Member, error)
	// Restart starts every killed member again, with its data, and waits
	// until the cluster is healthy with all of them.
	Restart(ctx context.Context) error
}

// Member is one server process of a Cluster. Stop and Cont signal it
// (SIGSTOP, SIGCONT); Kill kills it (SIGKILL) and it stays down until its
// cluster's Restart.
type Member struct {
	name string
	addr string
	dir  string
	// start (re)starts the process; the cluster may change what it runs
	// (a Redis primary comes back as a replica).
	start func() (*proc, error)

	mu     sync.Mutex
	p      *proc
	killed bool
}

// Name says which member this is: "etcd-1", "consul-2", "redis-1".
func (m *Member) Name() string { return m.name }

// Addr is the address clients reach this member on (host:port).
func (m *Member) Addr() string { return m.addr }

// Pid is the member's process id, 0 while it is killed.
func (m *Member) Pid() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.killed || m.p == nil {
		return 0
	}
	return m.p.Pid()
}

func (m *Member) signal(send func(faults.Group) error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.killed || m.p == nil {
		return fmt.Errorf("%s is not running", m.name)
	}
	if err := m.p.exited(); err != nil {
		return err
	}
	return send(faults.Group(m.p.Pid()))
}

// Stop stops the member's process (SIGSTOP).
func (m *Member) Stop() error { return m.signal(faults.Group.Stop) }

// Cont continues it (SIGCONT).
func (m *Member) Cont() error { return m.signal(faults.Group.Cont) }

// Kill kills the process (SIGKILL) and waits until it is gone.
func (m *Member) Kill() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.killed || m.p == nil {
		return nil
	}
	m.killed = true
	_ = faults.Group(m.p.Pid()).Kill()
	<-m.p.done
	return nil
}

// Running reports whether the member is neither killed nor exited.
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.killed && m.p != nil && m.p.exited() == nil
}

// Killed reports whether the member was killed and not restarted.
func (m *Member) Killed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.killed
}

// run starts the process (again).
func (m *Member) run() error {
	p, err := m.start()
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.p, m.killed = p, false
	m.mu.Unlock()
	return nil
}

// end stops the process for good (teardown).
func (m *Member) end(sig syscall.Signal, grace time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.p != nil && !m.killed {
		m.p.stop(sig, grace)
	}
	m.killed = true
}

// exitedErr is the error of a member that died on its own, with its log.
func (m *Member) exitedErr() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.killed || m.p == nil {
		return nil
	}
	return m.p.exited()
}

// running returns the members that are running, and an error naming any
// that died on its own.
func running(ms []*Member) ([]*Member, error) {
	var out []*Member
	for _, m := range ms {
		if err := m.exitedErr(); err != nil {
			return nil, err
		}
		if m.Running() {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no member is running")
	}
	return out, nil
}

// serveMember makes this process a cluster member when it was started as
// one (etcdcluster.go's init says why members re-run this binary): when
// the variable env is set, it decodes the member's spec from it (JSON),
// runs serve and exits with its status (2 for a bad spec). Otherwise it
// returns at once.
func serveMember[S any](env, what string, serve func(S) int) {
	v := os.Getenv(env)
	if v == "" {
		return
	}
	var s S
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		fmt.Fprintf(os.Stderr, "%s member: bad %s: %v\n", what, env, err)
		os.Exit(2)
	}
	os.Exit(serve(s))
}

// startSelfMember starts, with start (spawn.Start, or Node.Start), this
// binary again as the member name of spec (in the variable env; see
// serveMember), its directory and its log in dir (as startMemberProc).
func startSelfMember(start func(*exec.Cmd) error, name, dir, env string, spec any) (*proc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	b, _ := json.Marshal(spec)
	return startMemberProcWith(start, name, dir, []string{env + "=" + string(b)}, exe)
}

// stopSignal receives the SIGTERM (or SIGINT) that ends a member process.
func stopSignal() <-chan os.Signal {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	return sig
}

// startMemberProc is startProc with extra environment: argv[0] is run with env
// added to this process's environment, output in dir/name.log (appended to,
// so that a restarted member's log keeps the earlier run's).
func startMemberProc(name, dir string, env []string, argv ...string) (*proc, error) {
	return startMemberProcWith(spawn.Start, name, dir, env, argv...)
}

// startMemberProcWith is startMemberProc with start in place of
// spawn.Start (Node.Start, for a process on a node).
func startMemberProcWith(start func(*exec.Cmd) error, name, dir string, env []string, argv ...string) (*proc, error) {
	logPath := filepath.Join(dir, name+".log")
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr, cmd.Dir = lf, lf, dir
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// From the spawning thread: Pdeathsig fires when that thread exits.
	if err := start(cmd); err != nil {
		return nil, err
	}
	p := &proc{name: name, cmd: cmd, dir: dir, log: logPath, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

// group is what the clusters share: their member processes, each in its
// own directory under dir, which Stop removes.
type group struct {
	dir     string
	members []*Member
	once    sync.Once
	// healthy is the cluster's Healthy, which Restart waits for; grace is
	// how long Stop lets a member end on SIGTERM before it kills it. A
	// cluster with a Restart and a Stop of its own leaves them unset.
	healthy func(context.Context) error
	grace   time.Duration
}

// Members are the cluster's server processes, in a fixed order.
func (g *group) Members() []*Member { return g.members }

// Addrs are the members' addresses (host:port), in the order of Members.
func (g *group) Addrs() []string {
	var out []string
	for _, m := range g.members {
		out = append(out, m.addr)
	}
	return out
}

// restart runs every killed member again and waits, up to timeout, until
// healthy returns nil.
func (g *group) restart(ctx context.Context, timeout time.Duration, healthy func(context.Context) error) error {
	if err := restartKilled(g.members); err != nil {
		return err
	}
	return faults.WaitHealthy(ctx, timeout, healthy)
}

// Restart runs every killed server again and waits, up to a minute, until
// the cluster is healthy.
func (g *group) Restart(ctx context.Context) error {
	return g.restart(ctx, 60*time.Second, g.healthy)
}

// Stop ends every server and removes the cluster's directory.
func (g *group) Stop() error {
	g.stop(syscall.SIGTERM, g.grace, nil)
	return nil
}

// stop, once: runs first (if not nil), ends every member (sig, then
// SIGKILL after grace), and removes dir.
func (g *group) stop(sig syscall.Signal, grace time.Duration, first func()) {
	g.once.Do(func() {
		if first != nil {
			first()
		}
		for _, m := range g.members {
			m.end(sig, grace)
		}
		os.RemoveAll(g.dir)
	})
}

// restartKilled runs every killed member again.
func restartKilled(ms []*Member) error {
	for _, m := range ms {
		if m.Killed() {
			if err := m.run(); err != nil {
				return fmt.Errorf("restart %s: %w", m.name, err)
			}
		}
	}
	return nil
}

// agree asks each running member of ms for the leader it sees (leaderOf)
// and returns the one they all name, or an error naming the member that
// sees none ("has no " + what) or the two leaders named.
func agree(ms []*Member, what string, leaderOf func(*Member) (string, error)) (string, error) {
	agreed := ""
	for _, m := range ms {
		l, err := leaderOf(m)
		if err != nil {
			return "", err
		}
		switch {
		case l == "":
			return "", fmt.Errorf("%s has no %s", m.name, what)
		case agreed != "" && l != agreed:
			return "", fmt.Errorf("servers disagree on the %s (%s, %s)", what, agreed, l)
		}
		agreed = l
	}
	return agreed, nil
}

// eachRunning runs check on each running member, in order, and returns its
// first error (or running's, when no member runs).
func (g *group) eachRunning(check func(*Member) error) error {
	ms, err := running(g.members)
	if err != nil {
		return err
	}
	for _, m := range ms {
		if err := check(m); err != nil {
			return err
		}
	}
	return nil
}

// memberDir names member i of a kind (kind-1, kind-2, ...) and makes its
// directory in the group's.
func (g *group) memberDir(kind string, i int) (name, dir string, err error) {
	name = fmt.Sprintf("%s-%d", kind, i+1)
	dir = filepath.Join(g.dir, name)
	return name, dir, os.Mkdir(dir, 0o700)
}

// add runs member name (directory dir, client address 127.0.0.1:port),
// which start starts, and adds it to the group.
func (g *group) add(name, dir string, port int, start func() (*proc, error)) (*Member, error) {
	return g.addOn(name, dir, "127.0.0.1", port, start)
}

// addOn is add with the member's client address on host.
func (g *group) addOn(name, dir, host string, port int, start func() (*proc, error)) (*Member, error) {
	m := &Member{name: name, addr: net.JoinHostPort(host, strconv.Itoa(port)), dir: dir, start: start}
	if err := m.run(); err != nil {
		return nil, err
	}
	g.members = append(g.members, m)
	return m, nil
}
