// Package lazyfs is a FUSE filesystem that loses the writes a program has
// not synced, on demand: a power loss for the servers the harness runs on
// it, as Jepsen's LazyFS (github.com/dsrhaslab/lazyfs) simulates one.
//
// An FS passes every operation through to a backing directory, except
// file data: what a program writes to a file stays in this process's
// memory until the program syncs that file (fsync, fdatasync, msync, a
// write through a descriptor opened with O_SYNC or O_DSYNC), which writes
// it to the backing file. Reads and sizes (stat, lseek) see the written
// data at once, synced or not, as reads through the page cache do. Crash
// discards every write not yet synced, as the page cache's contents are
// lost when the power goes, and invalidates the kernel's own cache of the
// files it touched, so that nothing dropped is read again.
//
// Metadata is kept, as LazyFS keeps it: creating, renaming, linking and
// removing files and directories, truncation (ftruncate, O_TRUNC),
// fallocate, chmod and chown take effect on the backing directory at once
// and survive Crash, as if ext4's journal committed each at once. ext4
// commits its journal at every fsync and at least every 5 seconds, so this
// differs from ext4 only for names and sizes changed within the last
// commit, which ext4 may lose and an FS keeps. What a program must sync to
// keep its data is what ext4 (data=ordered, auto_da_alloc: its defaults)
// asks:
//
//   - A file's data survives Crash once that file is synced, through any
//     descriptor of it (a read-only one included).
//   - fsync of a directory syncs no file data: a file created, written and
//     not synced is there after Crash, with the data it had at its last
//     sync (none: empty).
//   - rename moves a file's unsynced data with it, and loses it on Crash,
//     unless it replaces an existing file: then the renamed file is synced
//     first (ext4's auto_da_alloc writes a file renamed over another before
//     the rename commits; LazyFS's sync_after_rename), so that
//     write-temp-rename without fsync (NATS's metadata files at its default
//     sync interval) keeps the old content or the new, never an empty file.
//     write-temp, fsync, rename (Redis's RDB and AOF manifest, etcd's and
//     ZooKeeper's snapshots) keeps the new content in every case.
//   - truncation is kept; the data written after it until the next sync is
//     not, except that a file truncated to zero from a larger size is
//     synced at the next close (ext4's replace-via-truncate).
//
// A sync writes the data to the backing file and does not fsync the
// backing file itself: the backing filesystem never loses power, only an
// FS does (Crash), and a real fsync per sync would cost the shared
// machine a disk flush each time and change nothing a Crash can observe.
// Sync syncs every file, as sync(2) does.
//
// Mounting needs /dev/fuse and root (the mount(2) system call; fusermount
// is not used). An FS serves from this process: when the process dies, its
// mount stays, dead (every access fails with ENOTCONN), until it is
// detached. Put the backing directory and the mount point in a directory
// made by internal/tempdir: a later run's tempdir.RemoveStale detaches the
// mount and removes both.
package lazyfs

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// ErrUnavailable is wrapped by Mount's error when this process cannot
// mount a FUSE filesystem (no /dev/fuse, not root): callers skip what
// needs a power loss, with the error's text as the reason.
var ErrUnavailable = errors.New("FUSE is not available")

// Dropped is what Crash discarded.
type Dropped struct {
	// Bytes counts the file data written and not synced that Crash
	// discarded: for each 4 KiB page of a file, the bytes from the first
	// to the last one written since its last sync (a byte overwritten
	// counts once).
	Bytes int64
	// Files are the files whose data was lost, by their path relative to
	// the mount point (the last one known, for a file renamed since),
	// sorted.
	Files []string
}

// FS is a mounted lazy filesystem; see the package doc.
type FS struct {
	dir     string // the mount point
	backing string
	srv     *fuse.Server

	mu    sync.Mutex
	files map[uint64]*file // backing inode number → its unsynced state

	once   sync.Once
	umount error
}

// Mount mounts an FS at mountpoint over backing (both existing
// directories) and returns once it serves. The mount point's owner and
// mode are backing's; other users (a server run as postgres or mysql)
// reach it with the usual permission checks (allow_other,
// default_permissions), and what they create is theirs. The error wraps
// ErrUnavailable when FUSE cannot be mounted here.
func Mount(backing, mountpoint string) (*FS, error) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return nil, fmt.Errorf("%w: %v (load the fuse module, or give the container /dev/fuse)", ErrUnavailable, err)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: mounting without fusermount needs root (this process runs as uid %d)", ErrUnavailable, os.Geteuid())
	}
	rootOps, err := fs.NewLoopbackRoot(backing)
	if err != nil {
		return nil, fmt.Errorf("lazyfs: backing directory: %w", err)
	}
	f := &FS{dir: mountpoint, backing: backing, files: map[uint64]*file{}}
	root := &node{LoopbackNode: rootOps.(*fs.LoopbackNode), fs: f}
	// Names and attributes may be cached for a second: Crash invalidates
	// what it changes itself (file sizes and data).
	sec, zero := time.Second, time.Duration(0)
	// go-fuse v2.12.1's direct mount opens /dev/fuse without O_CLOEXEC and
	// returns before it sets it: a server this process starts afterwards
	// inherited the descriptor, and, killed with the harness, could hang
	// for good in its own exit, flushing a file of a mount whose
	// connection its own descriptor kept open. No fork while the
	// descriptor is open without the flag (os/exec takes ForkLock too).
	syscall.ForkLock.Lock()
	defer syscall.ForkLock.Unlock()
	defer closeOnExecFuse()
	f.srv, err = fs.Mount(mountpoint, root, &fs.Options{
		EntryTimeout: &sec, AttrTimeout: &sec, NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{
			AllowOther:        true,
			DirectMountStrict: true,
			FsName:            backing,
			Name:              "lazyfs",
			Options:           []string{"default_permissions"},
		},
	})
	if err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.ENODEV) {
			return nil, fmt.Errorf("%w: mount %s: %v (needs root and the fuse module)", ErrUnavailable, mountpoint, err)
		}
		return nil, fmt.Errorf("lazyfs: mount %s: %w", mountpoint, err)
	}
	return f, nil
}

// Dir is the mount point.
func (f *FS) Dir() string { return f.dir }

// Crash discards every write not synced, as a power loss would, and
// reports what it discarded. Files keep their names, sizes set by
// truncation and the data of their last sync. The kernel's cached pages
// and sizes of those files are invalidated, so that a process (a running
// one included) reads what survived. A power loss kills the programs
// first: call Crash once every process writing to the FS is gone.
func (f *FS) Crash() Dropped {
	var d Dropped
	var stale []*fs.Inode
	f.mu.Lock()
	for ino, fl := range f.files {
		fl.mu.Lock()
		if len(fl.pages) > 0 {
			// A removed file's data went with its last name, not with the
			// crash: its state stays here only until the kernel's release
			// of its last descriptor, which comes after close(2) returned.
			if !fl.unlinked {
				d.Bytes += fl.dirtyBytes()
				d.Files = append(d.Files, fl.name())
			}
			clear(fl.pages)
			if fl.inode != nil {
				stale = append(stale, fl.inode)
			}
		}
		if fl.open == 0 {
			fl.closeFD()
			delete(f.files, ino)
		}
		fl.mu.Unlock()
	}
	f.mu.Unlock()
	// Outside the locks: the kernel may wait for a read in flight, which
	// waits for them.
	for _, in := range stale {
		_ = in.NotifyContent(0, 0) // ENOENT: the kernel no longer has it, nor its pages
	}
	sort.Strings(d.Files)
	return d
}

// Sync writes every file's unsynced data to its backing file, as sync(2)
// does: a Crash after it loses nothing written before it.
func (f *FS) Sync() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var errs []error
	for ino, fl := range f.files {
		fl.mu.Lock()
		if err := fl.flush(); err != nil {
			errs = append(errs, fmt.Errorf("lazyfs: sync %s: %w", fl.name(), err))
		}
		if fl.open == 0 && len(fl.pages) == 0 {
			fl.closeFD()
			delete(f.files, ino)
		}
		fl.mu.Unlock()
	}
	return errors.Join(errs...)
}

// Unmount unmounts the FS, lazily (MNT_DETACH) if a process still uses it,
// and forgets what was not synced (the backing directory has only what
// was). It is idempotent; it does not remove the directories.
func (f *FS) Unmount() error {
	f.once.Do(func() {
		if err := f.srv.Unmount(); err != nil {
			// Busy: detach it now; the kernel ends the connection once
			// the last file on it is closed.
			if derr := unix.Unmount(f.dir, unix.MNT_DETACH); derr != nil && !errors.Is(derr, unix.EINVAL) {
				f.umount = fmt.Errorf("lazyfs: unmount %s: %v; lazy unmount: %w", f.dir, err, derr)
			}
		}
		f.mu.Lock()
		for ino, fl := range f.files {
			fl.mu.Lock()
			fl.closeFD()
			fl.mu.Unlock()
			delete(f.files, ino)
		}
		f.mu.Unlock()
	})
	return f.umount
}

// file returns the state of the backing inode ino, making it if needed.
func (f *FS) file(ino uint64) *file {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.files[ino]
	if fl == nil {
		fl = &file{pages: map[int64]*page{}, wfd: -1}
		f.files[ino] = fl
	}
	return fl
}

// lookup returns the state of ino, or nil when it has none.
func (f *FS) lookup(ino uint64) *file {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.files[ino]
}

// gone is told that the last name of the backing inode ino was removed
// (unlink, or a rename over it): its unsynced data is dropped now if no
// descriptor has it open, else at the last close. Its inode number may be
// reused for a new file afterwards.
func (f *FS) gone(ino uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.files[ino]
	if fl == nil {
		return
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.open > 0 {
		fl.unlinked = true
		return
	}
	fl.closeFD()
	delete(f.files, ino)
}

// release is told that a descriptor of ino (state fl) was closed.
func (f *FS) release(ino uint64, fl *file) {
	f.forget(ino, fl, true)
}

// tidy forgets the state fl of ino if no descriptor has it open and it
// has no unsynced data.
func (f *FS) tidy(ino uint64, fl *file) {
	f.forget(ino, fl, false)
}

// forget forgets fl, the state of ino, after a close (closed) if no
// descriptor has it open and it has no unsynced data or no name left.
func (f *FS) forget(ino uint64, fl *file, closed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if closed {
		fl.open--
	}
	if fl.open > 0 || (len(fl.pages) > 0 && !fl.unlinked) {
		return
	}
	fl.closeFD()
	if f.files[ino] == fl {
		delete(f.files, ino)
	}
}

// closeOnExecFuse sets close-on-exec on every descriptor of this process
// that is open on /dev/fuse.
func closeOnExecFuse() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if t, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && t == "/dev/fuse" {
			if fd, err := strconv.Atoi(e.Name()); err == nil {
				syscall.CloseOnExec(fd)
			}
		}
	}
}
