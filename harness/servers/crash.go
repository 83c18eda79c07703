package servers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/lazyfs"
)

// Crasher is an optional capability (by type assertion) of the servers and
// clusters this package starts: crash and restart, and with a power loss.
type Crasher interface {
	// Crash kills every server process of the service at once (SIGKILL:
	// no shutdown of its own); with powerLoss, it then discards what they
	// wrote and did not sync (their data directories are lazyfs mounts:
	// WithLazyFS); then it starts them again, on the same data
	// directories and addresses, and returns once the service serves again
	// (the check its Start function waits for; a cluster's Healthy),
	// with what they wrote since syncing, as if they had run a while (see
	// Sync). A member killed before (a LeaderKill) is restarted with the
	// others. The error wraps errors.ErrUnsupported, with the reason, when
	// the service cannot crash (a server embedded in this process, Consul
	// in -dev mode: start it WithCrash) or lose power (not WithLazyFS).
	Crash(ctx context.Context, powerLoss bool) (CrashReport, error)
	// Sync writes what the service's processes wrote and did not sync
	// to their data directories, as sync(1) would: a power loss after it
	// loses only what they write from then on. It does nothing without
	// WithLazyFS. Start and Crash sync once the service serves: what a
	// server writes while it starts (and a bucket or table a test creates
	// before it calls Sync) is not what a power loss is meant to hit.
	Sync() error
}

// CrashReport is what a Crash did.
type CrashReport struct {
	PowerLoss bool
	// Killed is when the processes were killed; Serving when the service
	// served again after the restart.
	Killed, Serving time.Time
	// Dropped is what the power loss discarded: for a cluster, every
	// member's, with each file's path prefixed by the member's name
	// ("etcd-2/data/member/wal/..."). Zero without a power loss.
	Dropped lazyfs.Dropped
	_       struct{}
}

// Restart is how long the service was down: Serving - Killed.
func (r CrashReport) Restart() time.Duration { return r.Serving.Sub(r.Killed) }

// Durability is how a server this package starts makes acknowledged
// writes durable (WithDurability).
type Durability string

const (
	// DurabilityHarness, the default, is the harness's setting of each
	// server, which no test so far needed durable: Postgres with fsync,
	// synchronous_commit and full_page_writes off, MariaDB with
	// innodb_flush_log_at_trx_commit=0, ZooKeeper with forceSync=no, etcd
	// with --unsafe-no-fsync, Redis without persistence (no RDB, no AOF),
	// NATS at its default sync interval (2 minutes), Consul -dev in memory
	// (a crashable Consul keeps its Raft log on disk, as packaged).
	DurabilityHarness Durability = ""
	// DurabilityPackaged is each server's packaged default: Postgres's and
	// MariaDB's settings as shipped (fsync on, commit flushes the log),
	// ZooKeeper's forceSync=yes, etcd's fsync on commit, Redis's RDB
	// snapshots (save 3600 1 300 100 60 10000) without AOF, NATS's 2
	// minute sync interval, Consul's Raft log on disk.
	DurabilityPackaged Durability = "packaged"
	// DurabilityAppendFsyncEverysec (Redis only): appendonly yes,
	// appendfsync everysec, no RDB snapshots.
	DurabilityAppendFsyncEverysec Durability = "appendfsync-everysec"
	// DurabilityAppendFsyncAlways (Redis only): appendonly yes,
	// appendfsync always, no RDB snapshots.
	DurabilityAppendFsyncAlways Durability = "appendfsync-always"
	// DurabilitySyncAlways (NATS only): JetStream's sync_interval: always
	// (every write is synced before it is acknowledged).
	DurabilitySyncAlways Durability = "sync-always"
)

// WithDurability sets how the server makes writes durable; see Durability.
// A setting the server does not have (appendfsync for Postgres) makes
// Start fail with an *Unavailable saying which it has.
func WithDurability(d Durability) Option { return func(o *Settings) { o.Durability = d } }

// WithCrash makes a server that Crash can kill and restart where the
// default one cannot: etcd and NATS run as a child process (this binary
// run again, as their cluster members are) rather than inside this
// process, kube-apiserver's etcd too, and Consul as a server with its
// Raft log in a data directory rather than in -dev mode (in memory). The
// other servers are crashable as they are.
func WithCrash() Option { return func(o *Settings) { o.Crash = true } }

// WithLazyFS puts the server's data directory (each member's, for a
// cluster) on a lazyfs mount (harness/lazyfs), so that Crash(ctx, true)
// loses what the server did not sync; it implies WithCrash. Start fails
// with an *Unavailable wrapping lazyfs.ErrUnavailable where FUSE cannot be
// mounted (no /dev/fuse, not root).
func WithLazyFS() Option { return func(o *Settings) { o.Lazy, o.Crash = true, true } }

// CheckDurability returns nil when the durability asked for is one the
// server (its backend's name) has: one of has, or DurabilityHarness and
// DurabilityPackaged, which every server has; else an *Unavailable that
// lists them.
func (o Settings) CheckDurability(backend string, has ...Durability) error {
	has = append([]Durability{DurabilityHarness, DurabilityPackaged}, has...)
	for _, d := range has {
		if o.Durability == d {
			return nil
		}
	}
	return &Unavailable{backend, fmt.Errorf("no durability setting %q", o.Durability),
		fmt.Sprintf("ask for one of %q", has)}
}

// dataDir is a server's data directory: dir/name, or WithLazyFS a lazyfs
// mount there over dir/name.disk, the "disk" that survives a power loss.
type dataDir struct {
	// path is where the server finds its data; setup is where its data
	// is written before the server starts (initdb, a myid file): path, or
	// the mount's backing directory, so that it is on disk already.
	path, setup string
	label       string // the member's name, prefixed to Dropped's files ("" for a single server)
	fs          *lazyfs.FS
	lazy        bool
}

// newDataDir makes the data directory (and with lazy its backing
// directory), owned by cred's user (nil: this process's), mode 0700. It
// is mounted by mount.
func newDataDir(dir, name string, lazy bool, cred *syscall.Credential) (*dataDir, error) {
	uid, gid := Owner(cred)
	d := &dataDir{path: filepath.Join(dir, name), lazy: lazy}
	d.setup = d.path
	if lazy {
		d.setup = d.path + ".disk"
	}
	for _, p := range []string{d.path, d.setup} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			return nil, err
		}
		if uid >= 0 {
			if err := os.Chown(p, uid, gid); err != nil {
				return nil, err
			}
		}
	}
	return d, nil
}

// Owner is cred's user and group ids, -1 for nil (this process's: chown
// leaves them).
func Owner(cred *syscall.Credential) (uid, gid int) {
	if cred == nil {
		return -1, -1
	}
	return int(cred.Uid), int(cred.Gid)
}

// mount mounts the lazyfs (once), if the directory is one.
func (d *dataDir) mount() error {
	if d == nil || !d.lazy || d.fs != nil {
		return nil
	}
	fs, err := lazyfs.Mount(d.setup, d.path)
	if err != nil {
		return err
	}
	d.fs = fs
	return nil
}

// unmount unmounts it, if mounted.
func (d *dataDir) unmount() {
	if d != nil && d.fs != nil {
		_ = d.fs.Unmount()
	}
}

// crasher implements Crasher over a service's member processes and their
// data directories.
type crasher struct {
	procs []*Member
	disks []*dataDir
	// ready returns nil once the restarted service serves, within timeout.
	ready   func(context.Context) error
	timeout time.Duration
	// cannot, if not empty, is why the service cannot crash.
	cannot string
	mu     sync.Mutex // one Crash at a time
}

func (c *crasher) Crash(ctx context.Context, powerLoss bool) (CrashReport, error) {
	return c.crash(ctx, powerLoss, nil, nil)
}

// crash is Crash that kills the members also with c's processes and, if
// after is not nil, runs it once c's service serves again, then sets the
// report's Serving and syncs again (Base.CrashAlso).
func (c *crasher) crash(ctx context.Context, powerLoss bool, also []*Member, after func(context.Context) error) (CrashReport, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, err := c.canCrash(powerLoss)
	if err != nil {
		return r, err
	}
	r.Killed = time.Now()
	killAll(append(append([]*Member(nil), also...), c.procs...))
	if err := c.restart(ctx, &r); err != nil || after == nil {
		return r, err
	}
	if err := after(ctx); err != nil {
		return r, err
	}
	r.Serving = time.Now()
	return r, c.Sync()
}

// canCrash is a new report of a crash (with powerLoss), or the error
// wrapping errors.ErrUnsupported that says why the service cannot have
// it. The caller holds c.mu.
func (c *crasher) canCrash(powerLoss bool) (CrashReport, error) {
	r := CrashReport{PowerLoss: powerLoss}
	if c.cannot != "" {
		return r, fmt.Errorf("%w: %s", errors.ErrUnsupported, c.cannot)
	}
	if powerLoss && !c.lazy() {
		return r, fmt.Errorf("%w: its data directory is not on a lazyfs mount, so a power loss cannot drop what it did not sync: start it WithLazyFS", errors.ErrUnsupported)
	}
	return r, nil
}

// restart is the rest of a crash once c's processes are killed (killAll):
// with r.PowerLoss it drops what they did not sync into r.Dropped, then
// starts them again, waits until the service serves (r.Serving) and syncs.
// The caller holds c.mu.
func (c *crasher) restart(ctx context.Context, r *CrashReport) error {
	if r.PowerLoss {
		for _, d := range c.disks {
			dd := d.fs.Crash()
			r.Dropped.Bytes += dd.Bytes
			for _, f := range dd.Files {
				if d.label != "" {
					f = d.label + "/" + filepath.Base(d.path) + "/" + f
				}
				r.Dropped.Files = append(r.Dropped.Files, f)
			}
		}
		sort.Strings(r.Dropped.Files)
	}
	if err := restartKilled(c.procs); err != nil {
		return err
	}
	var died error
	err := faults.WaitHealthy(ctx, c.timeout, func(ctx context.Context) error {
		if _, died = Running(c.procs); died != nil {
			return nil // stop polling: a member died on its own
		}
		return c.ready(ctx)
	})
	if err = errors.Join(died, err); err != nil {
		return fmt.Errorf("after the crash: %w", err)
	}
	r.Serving = time.Now()
	return c.Sync()
}

func (c *crasher) Sync() error {
	var errs []error
	for _, d := range c.disks {
		if d.fs != nil {
			errs = append(errs, d.fs.Sync())
		}
	}
	return errors.Join(errs...)
}

// lazy reports whether every data directory is a lazyfs mount.
func (c *crasher) lazy() bool {
	for _, d := range c.disks {
		if d.fs == nil {
			return false
		}
	}
	return len(c.disks) > 0
}

// FixFUSE is the fix for a Start error err (an *Unavailable's Fix): fix,
// unless err says the data directory could not be mounted on lazyfs.
func FixFUSE(err error, fix string) string {
	if errors.Is(err, lazyfs.ErrUnavailable) {
		return "run as root where /dev/fuse exists, or start the server without WithLazyFS"
	}
	return fix
}
