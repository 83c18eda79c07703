package servers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// What a service package (harness/services/...) builds its servers from:
// a single server's Base, a cluster's Group. Its server type embeds the
// interface (BaseMethods, GroupMethods), which shows the methods every
// server of the harness has, and keeps the *Base or *Group itself to set
// the server up, so that the setup methods are not the server's.

// BaseMethods are the methods a single server shares with the others the
// harness starts, as *Base has them: a service package's server type
// embeds it.
type BaseMethods interface {
	Secrets() Secrets
	Log() string
	Pid() int
	Members() []*Member
	Stop() error
	Crasher
}

// Base is a single server of a service package: its directory, its
// process (a Member, which Crash restarts) or, for a server embedded in
// this process, how to shut it down, and its client address and Secrets.
type Base struct{ base }

var _ BaseMethods = (*Base)(nil)

// NewBase is the Base of a server with its directory dir (its data, log
// and configuration, which Stop removes) reached at addr (host:port).
// logName is the log file in dir of a server embedded in this process
// (Log's path until Run starts a process); Stop ends the process with sig,
// then SIGKILL after grace.
func NewBase(dir, addr, logName string, sig syscall.Signal, grace time.Duration) *Base {
	return &Base{base{dir: dir, addr: addr, logName: logName, sig: sig, grace: grace}}
}

// Dir is the server's directory, which Stop removes.
func (b *Base) Dir() string { return b.dir }

// Addr is the server's client address, host:port.
func (b *Base) Addr() string { return b.addr }

// SetSecrets sets what Secrets returns.
func (b *Base) SetSecrets(s Secrets) { b.secrets = s }

// SetShutdown sets what Stop runs after it ends the server's process, if
// any: how an embedded server shuts down, or a client of the server that
// must be closed.
func (b *Base) SetShutdown(f func()) { b.shutdown = f }

// SetEmbedded says that the server runs inside this process: Crash then
// fails, with an error wrapping errors.ErrUnsupported that says why.
func (b *Base) SetEmbedded(why string) { b.cannot = why }

// NewDataDir makes the server's data directory, name in its directory (with
// lazy, a lazyfs mount over name.disk, which Run mounts: see WithLazyFS),
// and returns its path. Stop unmounts it.
func (b *Base) NewDataDir(name string, lazy bool) (string, error) {
	d, err := newDataDir(b.dir, name, lazy, nil)
	if err != nil {
		return "", err
	}
	b.data = d
	return d.path, nil
}

// Run mounts the data directory (if it is a lazyfs one), starts the
// server's process with start (again on Crash) as the Member name, and
// waits until ready succeeds as WaitReady does (up to timeout, at start
// and after a Crash); then it syncs the data directory (Crasher.Sync). Its
// error is the first of these that failed; the caller then stops b.
func (b *Base) Run(ctx context.Context, name string, timeout time.Duration, start func() (*Proc, error), ready func(context.Context) error) error {
	return b.run(ctx, name, timeout, start, ready)
}

// CrashAlso is Crash, for a server that other processes depend on (as
// kube-apiserver on its etcd): it kills the members also at once with the
// server's process, restarts the server as Crash does (dropping what it did
// not sync, with powerLoss), then runs after, which starts the others
// again and returns once they serve; then it sets the report's Serving
// and syncs again. It holds the lock that makes Crashes one at a time
// throughout. Its error is Crash's (the restart's, or one wrapping
// errors.ErrUnsupported when the server cannot crash), or after's as after
// returns it.
func (b *Base) CrashAlso(ctx context.Context, powerLoss bool, also []*Member, after func(context.Context) error) (CrashReport, error) {
	return b.crash(ctx, powerLoss, also, after)
}

// GroupMethods are the methods a cluster shares with the others the
// harness starts, as *Group has them: a service package's cluster type
// embeds it (and may have a Restart and a Stop of its own).
type GroupMethods interface {
	Members() []*Member
	Addrs() []string
	Restart(ctx context.Context) error
	Stop() error
	Crasher
}

// Group is a cluster of a service package: its member processes, each in a
// directory of its own under the cluster's, which Stop removes.
type Group struct{ group }

var _ GroupMethods = (*Group)(nil)

// NewGroup is the Group of a cluster with its directory dir. Its Stop
// ends each member with SIGTERM, then SIGKILL after grace (a cluster with
// a Stop of its own calls StopWith instead).
func NewGroup(dir string, grace time.Duration) *Group {
	return &Group{group{dir: dir, grace: grace}}
}

// Dir is the cluster's directory, which holds its members' and which Stop
// removes.
func (g *Group) Dir() string { return g.dir }

// SetHealthy sets the check Restart waits for (a minute at most): the
// cluster's Healthy.
func (g *Group) SetHealthy(healthy func(context.Context) error) { g.healthy = healthy }

// MemberData makes the directory of member i of a kind ("kind-(i+1)", its
// name) in the cluster's, and in it the member's data directory dataName,
// on lazyfs and mounted if o.Lazy; it returns the member's name and the
// two directories' paths.
func (g *Group) MemberData(kind string, i int, dataName string, o Settings) (name, dir, data string, err error) {
	name, dir, d, err := g.memberData(kind, i, dataName, o)
	if err != nil {
		return "", "", "", err
	}
	return name, dir, d.path, nil
}

// AddOn runs the member name, its files in dir and its client address
// host:port, whose process start starts (again on a restart), and adds it
// to the cluster's Members; its error is start's.
func (g *Group) AddOn(name, dir, host string, port int, start func() (*Proc, error)) (*Member, error) {
	return g.addOn(name, dir, host, port, start)
}

// WaitStarted waits, up to timeout, until healthy returns nil (its last
// error, if it never does), then makes the cluster crashable, Crash
// waiting (a minute at most) for healthy, and syncs the members' data
// directories (Crasher.Sync).
func (g *Group) WaitStarted(ctx context.Context, timeout time.Duration, healthy func(context.Context) error) error {
	return g.waitStarted(ctx, timeout, healthy)
}

// RestartWithin is Restart with its own wait: it runs every killed member
// again and waits, up to timeout, until healthy returns nil.
func (g *Group) RestartWithin(ctx context.Context, timeout time.Duration, healthy func(context.Context) error) error {
	return g.restart(ctx, timeout, healthy)
}

// StopWith is Stop for a cluster with a Stop of its own: once, it runs
// first (if not nil), ends every member (sig, then SIGKILL after grace),
// unmounts their data directories, and removes the cluster's directory.
func (g *Group) StopWith(sig syscall.Signal, grace time.Duration, first func()) {
	g.stop(sig, grace, first)
}

// EachRunning runs check on each running member, in order, and returns its
// first error (or Running's, when a member died or none runs).
func (g *Group) EachRunning(check func(*Member) error) error { return g.eachRunning(check) }

// ServiceDir returns the user to run a service's server as, and a new
// TempDir "locksuite-<name>-*" that user owns: as root, the system user
// named account, which the server's Debian package pkg creates; otherwise
// cred is nil and the directory is this process's. Its errors are
// Unavailable for backend.
func ServiceDir(backend, name, account, pkg string) (cred *syscall.Credential, dir string, err error) {
	return serviceDir(backend, name, account, pkg)
}

// LookPath finds the program bin on PATH or, failing that, in dirs (where
// Debian installs servers outside a user's PATH, /usr/sbin).
func LookPath(bin string, dirs ...string) (string, error) { return lookPath(bin, dirs...) }

// FindBinary finds a server binary that ci/setup.sh builds: $env if set
// (an error if that file does not exist), then cached (the build cache's
// path, "" for none), then bin in PATH; its error says where it looked.
func FindBinary(env, cached, bin string) (string, error) {
	if p := os.Getenv(env); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", env, p, err)
		}
		return p, nil
	}
	if cached != "" {
		if _, err := os.Stat(cached); err == nil {
			return cached, nil
		}
	}
	if p, err := exec.LookPath(bin); err == nil {
		return p, nil
	}
	return "", errors.New("no " + bin + " binary (not in $" + env + ", " + cached + " or PATH)")
}

// BuildCachePath is file in <user cache dir>/locksuite, where ci/setup.sh
// leaves the binaries it builds; "" if there is no user cache directory.
func BuildCachePath(file string) string {
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "locksuite", file)
}
