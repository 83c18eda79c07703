package lazyfs

import (
	"context"
	"sort"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// pageSize is the unit in which unsynced data is kept: a page holds the
// whole of its 4 KiB of the file (what the backing file had, with the
// writes over it), so that a read needs no merge of its own.
const pageSize = 4096

type page struct {
	data   [pageSize]byte
	lo, hi int // the bytes written since the last sync: data[lo:hi]
}

// file is what an FS knows of one backing inode while a descriptor has it
// open or it has unsynced data: the unsynced pages and the size they give
// it. With no pages, the backing file is the file.
type file struct {
	mu       sync.Mutex
	pages    map[int64]*page // page index → page
	size     int64           // the file's size, while it has pages
	wfd      int             // a read-write descriptor of the backing file, -1 before the first write
	open     int             // descriptors open on the FS
	unlinked bool            // its last name was removed while open
	// syncOnClose: truncated to zero from a larger size; the next close
	// syncs (ext4's replace-via-truncate, see the package doc).
	syncOnClose bool
	inode       *fs.Inode // the kernel's inode of it, last seen: Crash invalidates its cache
	path        string    // its path on the FS, last seen (for Dropped)
}

// name is the file's path on the FS, for Dropped: the inode's current one
// if the kernel still knows it, else the last seen.
func (fl *file) name() string {
	if fl.inode != nil {
		if p := fl.inode.Path(nil); p != "" {
			return p
		}
	}
	return fl.path
}

// seen records the kernel's inode of the file and its path.
func (fl *file) seen(in *fs.Inode) {
	if in == nil {
		return
	}
	fl.inode = in
	if p := in.Path(nil); p != "" {
		fl.path = p
	}
}

func (fl *file) dirtyBytes() int64 {
	var n int64
	for _, p := range fl.pages {
		n += int64(p.hi - p.lo)
	}
	return n
}

// useFD makes fd (read-write) the descriptor the file's data is synced
// through, keeping a duplicate of it: the file may be synced after that
// descriptor is closed (Sync, or fsync through another one).
func (fl *file) useFD(fd int) syscall.Errno {
	if fl.wfd >= 0 {
		return 0
	}
	d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fs.ToErrno(err)
	}
	fl.wfd = d
	return 0
}

func (fl *file) closeFD() {
	if fl.wfd >= 0 {
		unix.Close(fl.wfd)
		fl.wfd = -1
	}
}

// backingSize is the backing file's size.
func backingSize(fd int) (int64, syscall.Errno) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, fs.ToErrno(err)
	}
	return st.Size, 0
}

// write keeps data, written at off through fd, in the file's pages.
func (fl *file) write(fd int, data []byte, off int64) syscall.Errno {
	if errno := fl.useFD(fd); errno != 0 {
		return errno
	}
	if len(fl.pages) == 0 {
		sz, errno := backingSize(fl.wfd)
		if errno != 0 {
			return errno
		}
		fl.size = sz
	}
	for done := 0; done < len(data); {
		pos := off + int64(done)
		idx, in := pos/pageSize, int(pos%pageSize)
		n := min(pageSize-in, len(data)-done)
		p := fl.pages[idx]
		if p == nil {
			p = &page{lo: in, hi: in + n}
			if n < pageSize {
				// The rest of the page is the backing file's (zeros past
				// its end).
				if _, err := unix.Pread(fl.wfd, p.data[:], idx*pageSize); err != nil {
					return fs.ToErrno(err)
				}
			}
			fl.pages[idx] = p
		} else {
			p.lo, p.hi = min(p.lo, in), max(p.hi, in+n)
		}
		copy(p.data[in:in+n], data[done:done+n])
		done += n
	}
	fl.size = max(fl.size, off+int64(len(data)))
	return 0
}

// read reads into buf at off through fd: the backing file, with the
// file's pages over it.
func (fl *file) read(fd int, buf []byte, off int64) (int, syscall.Errno) {
	if len(fl.pages) == 0 {
		n, err := unix.Pread(fd, buf, off)
		if err != nil {
			return 0, fs.ToErrno(err)
		}
		return n, 0
	}
	if off >= fl.size {
		return 0, 0
	}
	buf = buf[:min(int64(len(buf)), fl.size-off)]
	n, err := unix.Pread(fd, buf, off)
	if err != nil {
		return 0, fs.ToErrno(err)
	}
	clear(buf[n:])
	end := off + int64(len(buf))
	for idx := off / pageSize; idx*pageSize < end; idx++ {
		p := fl.pages[idx]
		if p == nil {
			continue
		}
		start := idx * pageSize
		lo, hi := max(start, off), min(start+pageSize, end)
		copy(buf[lo-off:hi-off], p.data[lo-start:hi-start])
	}
	return len(buf), 0
}

// flush writes the file's pages to the backing file and forgets them.
func (fl *file) flush() error {
	if len(fl.pages) == 0 {
		return nil
	}
	idxs := make([]int64, 0, len(fl.pages))
	for idx := range fl.pages {
		idxs = append(idxs, idx)
	}
	sort.Slice(idxs, func(i, j int) bool { return idxs[i] < idxs[j] })
	for _, idx := range idxs {
		start := idx * pageSize
		n := min(pageSize, fl.size-start)
		if n <= 0 {
			continue
		}
		if _, err := unix.Pwrite(fl.wfd, fl.pages[idx].data[:n], start); err != nil {
			return err
		}
	}
	clear(fl.pages)
	return nil
}

// truncate sets the file's size, on the backing file at once (through fd,
// or path when fd is -1), and cuts its pages to it.
func (fl *file) truncate(fd int, path string, size int64) syscall.Errno {
	if size == 0 {
		var st unix.Stat_t
		if fd >= 0 {
			_ = unix.Fstat(fd, &st)
		} else {
			_ = unix.Lstat(path, &st)
		}
		fl.syncOnClose = fl.syncOnClose || st.Size > 0 || len(fl.pages) > 0
	}
	var err error
	if fd >= 0 {
		err = unix.Ftruncate(fd, size)
	} else {
		err = unix.Truncate(path, size)
	}
	if err != nil {
		return fs.ToErrno(err)
	}
	if len(fl.pages) == 0 {
		return 0
	}
	for idx, p := range fl.pages {
		start := idx * pageSize
		switch {
		case start >= size:
			delete(fl.pages, idx)
		case start+pageSize > size:
			cut := int(size - start)
			clear(p.data[cut:])
			p.hi = min(p.hi, cut)
			if p.hi <= p.lo {
				// Nothing written is left in it, and its data is the
				// backing file's, cut there as well.
				delete(fl.pages, idx)
			}
		}
	}
	fl.size = size
	return 0
}

// handle is an open descriptor of a regular file on the FS.
type handle struct {
	fs   *FS
	ino  uint64
	fl   *file
	fd   int  // the backing file, opened read-write
	sync bool // opened O_SYNC or O_DSYNC: each write is synced
	node *node
}

var (
	_ fs.FileReader    = (*handle)(nil)
	_ fs.FileWriter    = (*handle)(nil)
	_ fs.FileFsyncer   = (*handle)(nil)
	_ fs.FileFlusher   = (*handle)(nil)
	_ fs.FileReleaser  = (*handle)(nil)
	_ fs.FileLseeker   = (*handle)(nil)
	_ fs.FileAllocater = (*handle)(nil)
)

func (h *handle) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.fl.mu.Lock()
	defer h.fl.mu.Unlock()
	h.fl.seen(h.node.EmbeddedInode())
	n, errno := h.fl.read(h.fd, buf, off)
	if errno != 0 {
		return nil, errno
	}
	return fuse.ReadResultData(buf[:n]), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	h.fl.mu.Lock()
	defer h.fl.mu.Unlock()
	h.fl.seen(h.node.EmbeddedInode())
	if errno := h.fl.write(h.fd, data, off); errno != 0 {
		return 0, errno
	}
	if h.sync {
		if err := h.fl.flush(); err != nil {
			return 0, fs.ToErrno(err)
		}
	}
	return uint32(len(data)), 0
}

// Fsync writes the file's unsynced data, whichever descriptor wrote it.
func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	h.fl.mu.Lock()
	defer h.fl.mu.Unlock()
	return fs.ToErrno(h.fl.flush())
}

// Flush (a close of a descriptor, which the kernel sends after the
// descriptor's cached writes and waits for) syncs the file if it was
// truncated to zero since the last close (see the package doc), and
// nothing otherwise, as close does not. It is done here and not in
// Release, which the kernel sends after close(2) has returned: a crash
// right after the close would race it.
func (h *handle) Flush(ctx context.Context) syscall.Errno {
	h.fl.mu.Lock()
	defer h.fl.mu.Unlock()
	if !h.fl.syncOnClose {
		return 0
	}
	h.fl.syncOnClose = false
	return fs.ToErrno(h.fl.flush())
}

// Release closes the descriptor.
func (h *handle) Release(ctx context.Context) syscall.Errno {
	h.fs.release(h.ino, h.fl)
	return fs.ToErrno(unix.Close(h.fd))
}

// Lseek answers SEEK_DATA and SEEK_HOLE (the kernel does the others): a
// file with unsynced data is data from start to end.
func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	h.fl.mu.Lock()
	defer h.fl.mu.Unlock()
	if len(h.fl.pages) == 0 {
		n, err := unix.Seek(h.fd, int64(off), int(whence))
		return uint64(n), fs.ToErrno(err)
	}
	if int64(off) >= h.fl.size {
		return 0, syscall.ENXIO
	}
	if whence == unix.SEEK_HOLE {
		return uint64(h.fl.size), 0
	}
	return off, 0
}

// Allocate passes fallocate through to the backing file (metadata: kept
// at once) for the modes that only reserve space or extend the file;
// punching and zeroing ranges are not supported (EOPNOTSUPP: callers fall
// back to writing zeros).
func (h *handle) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	if mode&^unix.FALLOC_FL_KEEP_SIZE != 0 {
		return syscall.EOPNOTSUPP
	}
	h.fl.mu.Lock()
	defer h.fl.mu.Unlock()
	if err := unix.Fallocate(h.fd, mode, int64(off), int64(size)); err != nil {
		return fs.ToErrno(err)
	}
	if len(h.fl.pages) > 0 && mode&unix.FALLOC_FL_KEEP_SIZE == 0 {
		h.fl.size = max(h.fl.size, int64(off+size))
	}
	return 0
}
