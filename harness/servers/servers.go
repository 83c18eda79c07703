// Package servers starts the real lock and storage servers the suite runs
// against, each on free loopback ports in a temporary directory, and stops
// them, removing their data, on Stop. Child processes get a parent-death
// signal, so they do not outlive a killed coordinator; they are all forked
// from one OS thread that lives as long as the process (internal/spawn),
// because the signal fires when the forking thread exits.
//
// Or, instead of starting one, the suite connects to a server the user names
// (see Env); such servers are never stopped or cleaned by this package.
//
// It starts the servers that are external binaries (Redis, Sentinel,
// Postgres, PgBouncer, MariaDB, ZooKeeper, Consul), and is the kit (Base,
// Group, Launch, ...) that the servers whose Go code the harness links, or
// whose clients are large, are built from in packages of their own:
// harness/services/etcd, nats and kube. It imports none of those, so that
// a test which starts a server here compiles little.
package servers

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/internal/spawn"
	"github.com/locksuite/locksuite/internal/tempdir"
)

// Server is a running server.
type Server interface {
	// Name is the server's short name: for a server that is one of
	// suite/local's Services, that service's name ("redis", "etcd",
	// "nats", "consul", "postgres", "mysql", "zookeeper"), as
	// local.WithServer looks it up; else what it is ("etcd-cluster",
	// "redis-sentinel", "pgbouncer-transaction", "kubernetes").
	Name() string
	// Endpoint is how a client reaches it: host:port, a URL or a DSN, as the
	// backend's adapter takes it.
	Endpoint() string
	// Stop stops the server (if this package started it) and removes its
	// data. It is idempotent.
	Stop() error
}

// Logger is implemented by the servers this package starts: Log is the
// path of the server's log file, which Stop removes.
type Logger interface {
	Log() string
}

// Unavailable is the error for a server that could not be started or
// reached: it names the backend, what went wrong and how to fix it.
type Unavailable struct {
	Backend string
	Err     error
	Fix     string
}

func (u *Unavailable) Error() string {
	return fmt.Sprintf("%s unavailable: %v; fix: %s", u.Backend, u.Err, u.Fix)
}
func (u *Unavailable) Unwrap() error { return u.Err }

// FreePort returns a loopback TCP port that was free a moment ago (see
// freePorts).
func FreePort() (int, error) {
	ps, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	return ps[0], nil
}

// PortsAndDir reserves n free loopback ports and makes a new temporary
// directory "locksuite-" + name + "-...": what every server the harness
// runs starts with. Its error says which of the two failed.
func PortsAndDir(n int, name string) ([]int, string, error) {
	ports, err := freePorts(n)
	if err != nil {
		return nil, "", fmt.Errorf("free loopback ports: %w", err)
	}
	dir, err := tempdir.New("", "locksuite-"+name+"-")
	if err != nil {
		return nil, "", fmt.Errorf("temporary directory: %w", err)
	}
	return ports, dir, nil
}

// freePorts returns n loopback TCP ports that were free a moment ago, for
// servers to bind: ports below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range), which no outgoing connection takes
// meanwhile (a port the kernel hands out for port 0 is one of those), and
// that this process has not handed out before. With no such range (or
// none of it free), ports the kernel picks.
func freePorts(n int) ([]int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ps []int
	if lo := ephemeralLow(); lo > minPort {
		for tries := 0; len(ps) < n && tries < 1000; tries++ {
			p := minPort + rand.IntN(lo-minPort)
			if portsGiven[p] {
				continue
			}
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				continue
			}
			ls = append(ls, l)
			ps = append(ps, p)
		}
	}
	for len(ps) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ps = append(ps, l.Addr().(*net.TCPAddr).Port)
	}
	for _, p := range ps {
		portsGiven[p] = true
	}
	return ps, nil
}

// minPort is the lowest port freePorts picks: above the well-known and
// most registered services' ports.
const minPort = 10000

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// ephemeralLow is the first port of the kernel's ephemeral range, or 0
// when it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return lo
}

// Proc is a child server process with its own directory and log.
type Proc struct {
	name string
	cmd  *exec.Cmd
	dir  string
	log  string
	done chan struct{}
	err  error
}

// Launch runs argv in dir with start (spawn.Start, or a node's Start), in
// a process group of its own that dies with this process, with env added
// to this process's environment and its output appended to dir/name.log
// (a restarted server's log keeps the earlier run's). cred, if not nil, is
// the user to run as (Postgres refuses to run as root); the log is then
// theirs. It returns the started process, or the error of opening the
// log or of start.
func Launch(start func(*exec.Cmd) error, name, dir string, cred *syscall.Credential, env []string, argv ...string) (*Proc, error) {
	logPath := filepath.Join(dir, name+".log")
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	if cred != nil {
		_ = os.Chown(logPath, int(cred.Uid), int(cred.Gid))
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr, cmd.Dir = lf, lf, dir
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
	// From the spawning thread: Pdeathsig fires when that thread exits.
	if err := start(cmd); err != nil {
		return nil, err
	}
	p := &Proc{name: name, cmd: cmd, dir: dir, log: logPath, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

// Exited is nil while the process runs; once it has ended, an error
// saying so, with its exit status and its log's tail.
func (p *Proc) Exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited (%v): %s", p.name, p.err, p.tail())
	default:
		return nil
	}
}

func (p *Proc) tail() string { return spawn.LogTail(p.log, 600) }

// stop continues the process group (it may be stopped by a fault), asks it
// to end with sig, and kills it after grace.
func (p *Proc) stop(sig syscall.Signal, grace time.Duration) {
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGCONT)
	_ = syscall.Kill(-pgid, sig)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
	// Anything left in the group (forked helpers) goes too.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// Pid is the server's process id, for faults that signal it.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// HTTPURL is http://addr, or https://addr with tls.
func HTTPURL(addr string, tls bool) string {
	if tls {
		return "https://" + addr
	}
	return "http://" + addr
}

// base is what every single server this package starts shares: its
// directory (its data, log and configuration), which Stop removes, its
// process (a Member, restarted by Crash) or, for a server embedded in this
// process, how to shut it down, and its client address and Secrets.
type base struct {
	dir     string
	data    *dataDir // the data directory, if Stop must unmount it
	m       *Member  // the server's process; nil for a server embedded in this process
	sig     syscall.Signal
	grace   time.Duration // Stop ends m with sig, then SIGKILL after grace
	logName string        // an embedded server's log file, in dir
	addr    string        // host:port
	secrets Secrets
	// shutdown ends an embedded server (set once it runs).
	shutdown func()
	crasher
	once sync.Once
}

// Secrets are the user and password the server requires (WithAuth), the
// test CA and a client certificate (WithTLS).
func (s *base) Secrets() Secrets { return s.secrets }

// Log is the server's log file, in the directory Stop removes: copy it
// before Stop to keep it.
func (s *base) Log() string {
	if s.m != nil {
		return s.m.Log()
	}
	return filepath.Join(s.dir, s.logName)
}

// Pid is the server's process id (and process group id), which changes
// when Crash restarts it; 0 for a server embedded in this process.
func (s *base) Pid() int {
	if s.m == nil {
		return 0
	}
	return s.m.Pid()
}

// Members is the server's process, as a Cluster's members are (Stop,
// Cont, Kill; its Pid follows a restart); none for a server embedded in
// this process.
func (s *base) Members() []*Member {
	if s.m == nil {
		return nil
	}
	return []*Member{s.m}
}

// Stop ends the server (with its signal, then SIGKILL after its grace; a
// stopped one is continued first), unmounts its data directory if it is a
// lazyfs mount, and removes its directory. It is idempotent.
func (s *base) Stop() error {
	s.once.Do(func() {
		if s.m != nil {
			s.m.End(s.sig, s.grace)
		}
		if s.shutdown != nil {
			s.shutdown()
		}
		s.data.unmount()
		os.RemoveAll(s.dir)
	})
	return nil
}

// run starts the server's process with start (again, on Crash), as the
// Member name reached at addr, and waits until ready succeeds (as
// WaitReady does); then it syncs the data directory (see Crasher.Sync).
// On error the caller stops s.
func (s *base) run(ctx context.Context, name string, timeout time.Duration, start func() (*Proc, error), ready func(context.Context) error) error {
	if err := s.data.mount(); err != nil {
		return err
	}
	s.m = &Member{name: name, addr: s.addr, dir: s.dir, start: start}
	if err := s.m.Run(); err != nil {
		return err
	}
	s.procs, s.ready, s.timeout = []*Member{s.m}, ready, timeout
	if s.data != nil {
		s.disks = []*dataDir{s.data}
	}
	s.m.mu.Lock()
	p := s.m.p
	s.m.mu.Unlock()
	if err := WaitReady(ctx, p, timeout, ready); err != nil {
		return err
	}
	return s.Sync()
}

// WaitReady polls check as faults.WaitHealthy does until it succeeds (nil),
// the process p exits (p.Exited's error), or timeout or ctx ends (the last
// check's error, naming p, with p's log's tail).
func WaitReady(ctx context.Context, p *Proc, timeout time.Duration, check func(context.Context) error) error {
	var exited error
	err := faults.WaitHealthy(ctx, timeout, func(ctx context.Context) error {
		if exited = p.Exited(); exited != nil {
			return nil // stop polling: the process is gone
		}
		return check(ctx)
	})
	if exited != nil {
		return exited
	}
	if err != nil {
		return fmt.Errorf("%s %w; log: %s", p.name, err, p.tail())
	}
	return nil
}

func lookPath(bin string, dirs ...string) (string, error) {
	if p, err := exec.LookPath(bin); err == nil {
		return p, nil
	}
	for _, d := range dirs {
		matches, _ := filepath.Glob(filepath.Join(d, bin))
		if len(matches) > 0 {
			return matches[len(matches)-1], nil
		}
	}
	return "", fmt.Errorf("%s not found in PATH or %s", bin, strings.Join(dirs, ", "))
}

// external is a server the user named; Stop leaves it alone.
type external struct{ name, endpoint string }

func (e external) Name() string     { return e.name }
func (e external) Endpoint() string { return e.endpoint }
func (e external) Stop() error      { return nil }

// External wraps a server the user runs. Stop does nothing.
func External(name, endpoint string) Server { return external{name, endpoint} }
