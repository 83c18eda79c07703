package servers

import (
	"bytes"
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
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/internal/roles"
	"github.com/locksuite/locksuite/internal/spawn"
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
	start func() (*Proc, error)

	mu     sync.Mutex
	p      *Proc
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
	if err := m.p.Exited(); err != nil {
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
	killAll([]*Member{m})
	return nil
}

// Log is the path of the member's log file (its process's, as Launch
// names it), in the directory its cluster's Stop removes.
func (m *Member) Log() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.p.log
}

// Running reports whether the member is neither killed nor exited.
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.killed && m.p != nil && m.p.Exited() == nil
}

// Killed reports whether the member was killed and not restarted.
func (m *Member) Killed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.killed
}

// NewMember is a member name, reached at addr (host:port), with its files
// in dir, whose process start starts (again, on a restart). It is not
// running until Run.
func NewMember(name, addr, dir string, start func() (*Proc, error)) *Member {
	return &Member{name: name, addr: addr, dir: dir, start: start}
}

// Proc is the member's current process (the last one Run started), nil
// before the first Run.
func (m *Member) Proc() *Proc {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.p
}

// Run starts the member's process (again) with its start function, and
// returns that function's error; the member is then running, no longer
// killed.
func (m *Member) Run() error {
	p, err := m.start()
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.p, m.killed = p, false
	m.mu.Unlock()
	return nil
}

// End stops the member for good (teardown): a running process is
// continued, sent sig and, if still there after grace, killed with its
// process group; the member then counts as killed.
func (m *Member) End(sig syscall.Signal, grace time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.p != nil && !m.killed {
		m.p.stop(sig, grace)
	}
	m.killed = true
}

// Exited is the error of a member whose process died on its own, with its
// log's tail; nil while it runs, when it was killed or ended, or before
// its first Run.
func (m *Member) Exited() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.killed || m.p == nil {
		return nil
	}
	return m.p.Exited()
}

// Running returns the members of ms that are running; its error is the
// first one's that died on its own (Member.Exited), or says that none
// runs.
func Running(ms []*Member) ([]*Member, error) {
	var out []*Member
	for _, m := range ms {
		if err := m.Exited(); err != nil {
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

// StartSelfMember starts, with start (spawn.Start, or Node.Start), this
// binary again as the member name of spec, its directory and its log in dir
// (as Launch). The spec is a file in dir (mode 0600: it may hold a
// password), named by the variable env: the role that the package serving
// the member adds (harness/role dispatches it). It refuses, before
// starting anything, in a binary whose main or TestMain did not call
// role.Serve: the member would run the tests, or the command, again.
func StartSelfMember(start func(*exec.Cmd) error, name, dir, env string, spec any) (*Proc, error) {
	if !roles.Dispatched() {
		return nil, fmt.Errorf("%s: this binary cannot run its members: its TestMain (or main) must call role.Serve first (harness/role; in TestMain, os.Exit(role.Main(m)))", name)
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, name+".spec.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, err
	}
	return Launch(start, name, dir, nil, []string{env + "=@" + path}, exe)
}

// StopSignal returns a channel that receives the SIGTERM (or SIGINT) that
// ends a member process (a member's serve waits for it).
func StopSignal() <-chan os.Signal {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	return sig
}

// startMemberProc runs argv[0] with env added to this process's
// environment (as Launch does).
func startMemberProc(name, dir string, env []string, argv ...string) (*Proc, error) {
	return Launch(spawn.Start, name, dir, nil, env, argv...)
}

// group is what the clusters share: their member processes, each in its
// own directory under dir, which Stop removes, and Crash.
type group struct {
	dir     string
	members []*Member
	crasher // procs: members, once started
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
// SIGKILL after grace), unmounts their data directories, and removes dir.
func (g *group) stop(sig syscall.Signal, grace time.Duration, first func()) {
	g.once.Do(func() {
		if first != nil {
			first()
		}
		for _, m := range g.members {
			m.End(sig, grace)
		}
		for _, d := range g.disks {
			d.unmount()
		}
		os.RemoveAll(g.dir)
	})
}

// dataDir makes the data directory name of member label in its
// directory mdir (see newDataDir); the caller writes its setup and mounts
// it before the member starts.
func (g *group) dataDir(mdir, label, name string, o Settings) (*dataDir, error) {
	d, err := newDataDir(mdir, name, o.Lazy, nil)
	if err != nil {
		return nil, err
	}
	d.label = label
	g.disks = append(g.disks, d)
	return d, nil
}

// started makes the cluster crashable, Crash waiting (a minute at most)
// for healthy, and syncs the members' data directories: what the cluster
// wrote while it formed is not what a power loss is meant to hit.
func (g *group) started(healthy func(context.Context) error) error {
	g.procs, g.ready, g.timeout = g.members, healthy, time.Minute
	return g.Sync()
}

// waitStarted waits, up to timeout, until healthy returns nil, then makes
// the cluster started (see started).
func (g *group) waitStarted(ctx context.Context, timeout time.Duration, healthy func(context.Context) error) error {
	if err := faults.WaitHealthy(ctx, timeout, healthy); err != nil {
		return err
	}
	return g.started(healthy)
}

// ClusterSettings are the Settings of opts for a cluster of backend: an
// *Unavailable error for WithAuth or WithTLS (the clusters have neither),
// or CheckDurability's error for a durability setting not in has.
func ClusterSettings(backend string, opts []Option, has ...Durability) (Settings, error) {
	o := Apply(opts)
	if o.Auth || o.TLS {
		return o, &Unavailable{backend, errors.New("WithAuth and WithTLS are for single servers"), "start the cluster without them"}
	}
	return o, o.CheckDurability(backend, has...)
}

// restartKilled runs every killed member again.
func restartKilled(ms []*Member) error {
	for _, m := range ms {
		if m.Killed() {
			if err := m.Run(); err != nil {
				return fmt.Errorf("restart %s: %w", m.name, err)
			}
		}
	}
	return nil
}

// Agree asks each running member of ms for the leader it sees (leaderOf)
// and returns the one they all name, or an error naming the member that
// sees none ("has no " + what) or the two leaders named.
func Agree(ms []*Member, what string, leaderOf func(*Member) (string, error)) (string, error) {
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
	ms, err := Running(g.members)
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

// memberData makes member i's directory (memberDir) and in it the member's
// data directory dataName (dataDir), mounted: for a member whose data
// directory needs no setup before the mount.
func (g *group) memberData(kind string, i int, dataName string, o Settings) (name, dir string, data *dataDir, err error) {
	if name, dir, err = g.memberDir(kind, i); err != nil {
		return "", "", nil, err
	}
	if data, err = g.dataDir(dir, name, dataName, o); err != nil {
		return "", "", nil, err
	}
	return name, dir, data, data.mount()
}

// add runs member name (directory dir, client address 127.0.0.1:port),
// which start starts, and adds it to the group.
func (g *group) add(name, dir string, port int, start func() (*Proc, error)) (*Member, error) {
	return g.addOn(name, dir, "127.0.0.1", port, start)
}

// addOn is add with the member's client address on host.
func (g *group) addOn(name, dir, host string, port int, start func() (*Proc, error)) (*Member, error) {
	m := &Member{name: name, addr: net.JoinHostPort(host, strconv.Itoa(port)), dir: dir, start: start}
	if err := m.Run(); err != nil {
		return nil, err
	}
	g.members = append(g.members, m)
	return m, nil
}

// killAll kills every running member, every process of it: its process
// group and every descendant in another one (Postgres's backends each lead
// a group of their own), first stopping the group (SIGSTOP) so that it
// forks nothing while its tree is read. The SIGKILLs go to every member
// first, so that none outlives another by more than their delivery; then
// killAll waits until every process is gone (a Postgres backend still
// exiting holds the shared memory a new postmaster refuses to start
// beside, and files open on the data directory), 10 s at most. The members
// stay down until restarted.
func killAll(ms []*Member) {
	var procs []*Proc
	var pids []int
	for _, m := range ms {
		m.mu.Lock()
		if !m.killed && m.p != nil {
			m.killed = true
			g := faults.Group(m.p.Pid())
			_ = g.Stop()
			tree := descendants(m.p.Pid())
			_ = g.Kill()
			for _, pid := range tree {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			procs, pids = append(procs, m.p), append(pids, tree...)
		}
		m.mu.Unlock()
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range procs {
		<-p.done
		for syscall.Kill(-p.Pid(), 0) == nil && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	for _, pid := range pids {
		for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// descendants are the processes descended from pid, from /proc.
func descendants(pid int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	for queue := children[pid]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, children[queue[0]]...)
	}
	return out
}
