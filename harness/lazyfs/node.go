package lazyfs

import (
	"context"
	"path/filepath"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is go-fuse's loopback node with file data kept by the FS: it opens
// regular files with a handle of its own, reports their sizes with the
// unsynced data, and tells the FS when a file's last name goes. What
// would bypass the handles (copy_file_range, O_TMPFILE, statx) is refused
// with an error on which the kernel or the caller falls back.
type node struct {
	*fs.LoopbackNode
	fs *FS
}

var (
	_ fs.NodeWrapChilder    = (*node)(nil)
	_ fs.NodeLookuper       = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeGetattrer      = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeTmpfiler       = (*node)(nil)
	_ fs.NodeStatxer        = (*node)(nil)
	_ fs.NodeCopyFileRanger = (*node)(nil)
)

// WrapChild makes every node of the tree a node.
func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*fs.LoopbackNode), fs: n.fs}
}

// backingPath is the node's path in the backing directory.
func (n *node) backingPath() string {
	return filepath.Join(n.RootData.Path, n.Path(nil))
}

// fixAttr gives a file with unsynced data its size, and notes the
// kernel's inode of it.
func (n *node) fixAttr(a *fuse.Attr, in *fs.Inode) {
	fl := n.fs.lookup(a.Ino)
	if fl == nil {
		return
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	fl.seen(in)
	if len(fl.pages) > 0 {
		a.Size = uint64(fl.size)
		a.Blocks = max(a.Blocks, (a.Size+511)/512)
	}
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ch, errno := n.LoopbackNode.Lookup(ctx, name, out)
	if errno == 0 {
		n.fixAttr(&out.Attr, ch)
	}
	return ch, errno
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if n.StableAttr().Mode&syscall.S_IFMT != syscall.S_IFREG {
		return n.LoopbackNode.Open(ctx, flags)
	}
	h, errno := n.open(n.backingPath(), flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return h, 0, 0
}

// open opens the regular file, whose backing file is path, read-write
// whatever the flags ask (the kernel has checked them; the handle may
// need to read a page around a write, and to sync), and applies O_TRUNC.
func (n *node) open(path string, flags uint32) (*handle, syscall.Errno) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fs.ToErrno(err)
	}
	fl := n.fs.file(st.Ino)
	fl.mu.Lock()
	fl.open++
	fl.seen(n.EmbeddedInode())
	var errno syscall.Errno
	if flags&unix.O_TRUNC != 0 {
		errno = fl.truncate(fd, "", 0)
	}
	fl.mu.Unlock()
	h := &handle{fs: n.fs, ino: st.Ino, fl: fl, fd: fd, node: n,
		sync: flags&(unix.O_SYNC|unix.O_DSYNC) != 0}
	if errno != 0 {
		h.Release(context.Background())
		return nil, errno
	}
	return h, 0
}

// Create makes the file as the loopback does (owned by the caller) and
// opens it with a handle of the FS.
func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	ch, lf, _, errno := n.LoopbackNode.Create(ctx, name, flags&^unix.O_TRUNC, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	if r, ok := lf.(fs.FileReleaser); ok {
		r.Release(ctx)
	}
	// Not yet in the tree: the child's path is the parent's and name.
	h, errno := ch.Operations().(*node).open(filepath.Join(n.backingPath(), name), flags)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	n.fixAttr(&out.Attr, ch)
	return ch, h, 0, 0
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if h, ok := f.(*handle); ok {
		var st syscall.Stat_t
		if err := syscall.Fstat(h.fd, &st); err != nil {
			return fs.ToErrno(err)
		}
		out.FromStat(&st)
	} else if errno := n.LoopbackNode.Getattr(ctx, nil, out); errno != 0 {
		return errno
	}
	n.fixAttr(&out.Attr, n.EmbeddedInode())
	return 0
}

// Setattr truncates through the file's state (see file.truncate) and
// passes the other attributes through.
func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if size, ok := in.GetSize(); ok && n.StableAttr().Mode&syscall.S_IFMT == syscall.S_IFREG {
		fd := -1
		if h, ok := f.(*handle); ok {
			fd = h.fd
		}
		var st unix.Stat_t
		if fd < 0 {
			if err := unix.Lstat(n.backingPath(), &st); err != nil {
				return fs.ToErrno(err)
			}
		} else if err := unix.Fstat(fd, &st); err != nil {
			return fs.ToErrno(err)
		}
		fl := n.fs.file(st.Ino)
		fl.mu.Lock()
		errno := fl.truncate(fd, n.backingPath(), int64(size))
		fl.mu.Unlock()
		n.fs.tidy(st.Ino, fl)
		if errno != 0 {
			return errno
		}
		in.Valid &^= fuse.FATTR_SIZE
	}
	if in.Valid&(fuse.FATTR_MODE|fuse.FATTR_UID|fuse.FATTR_GID|fuse.FATTR_ATIME|fuse.FATTR_MTIME|fuse.FATTR_SIZE) != 0 {
		if errno := n.LoopbackNode.Setattr(ctx, nil, in, out); errno != 0 {
			return errno
		}
	}
	return n.Getattr(ctx, f, out)
}

// Unlink tells the FS when the file's last name goes.
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	var st unix.Stat_t
	lerr := unix.Lstat(filepath.Join(n.backingPath(), name), &st)
	if errno := n.LoopbackNode.Unlink(ctx, name); errno != 0 {
		return errno
	}
	if lerr == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink == 1 {
		n.fs.gone(st.Ino)
	}
	return 0
}

// Rename syncs a file renamed over another first (ext4's
// replace-via-rename, see the package doc), and tells the FS when it
// replaces a file's last name.
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	var src, dst unix.Stat_t
	var derr error = unix.ENOENT
	if np, ok := newParent.(*node); ok && flags&unix.RENAME_EXCHANGE == 0 {
		derr = unix.Lstat(filepath.Join(np.backingPath(), newName), &dst)
	}
	replaces := derr == nil && dst.Mode&unix.S_IFMT == unix.S_IFREG
	if replaces && unix.Lstat(filepath.Join(n.backingPath(), name), &src) == nil {
		if fl := n.fs.lookup(src.Ino); fl != nil {
			fl.mu.Lock()
			err := fl.flush()
			fl.mu.Unlock()
			n.fs.tidy(src.Ino, fl)
			if err != nil {
				return fs.ToErrno(err)
			}
		}
	}
	if errno := n.LoopbackNode.Rename(ctx, name, newParent, newName, flags); errno != 0 {
		return errno
	}
	if replaces && dst.Nlink == 1 {
		n.fs.gone(dst.Ino)
	}
	return 0
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ch, errno := n.LoopbackNode.Link(ctx, target, name, out)
	if errno == 0 {
		n.fixAttr(&out.Attr, ch)
	}
	return ch, errno
}

// Tmpfile is refused: a file without a name is not worth the code here.
func (n *node) Tmpfile(ctx context.Context, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EOPNOTSUPP
}

// Statx is refused with ENOSYS: the kernel then asks Getattr, which knows
// the unsynced sizes.
func (n *node) Statx(ctx context.Context, f fs.FileHandle, flags, mask uint32, out *fuse.StatxOut) syscall.Errno {
	return syscall.ENOSYS
}

// CopyFileRange is refused with ENOSYS: the kernel then copies through
// Read and Write.
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, size uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.ENOSYS
}
