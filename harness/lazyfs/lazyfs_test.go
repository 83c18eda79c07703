package lazyfs_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/locksuite/locksuite/harness/lazyfs"
	"github.com/locksuite/locksuite/internal/tempdir"
)

// childEnv makes the test binary a process that mounts an FS in a new
// directory of tempdir.New, prints the directory, and waits to be killed
// (TestStaleMountRemoved).
const childEnv = "LAZYFS_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		dir, f, err := newMount()
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println(dir, f.Dir())
		select {}
	}
	os.Exit(m.Run())
}

// newMount makes a directory with tempdir.New holding the backing
// directory and the mount point, and mounts an FS there.
func newMount() (string, *lazyfs.FS, error) {
	dir, err := tempdir.New("", "locksuite-lazyfs-test-")
	if err != nil {
		return "", nil, err
	}
	backing, mnt := filepath.Join(dir, "backing"), filepath.Join(dir, "mnt")
	for _, d := range []string{backing, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			os.RemoveAll(dir)
			return "", nil, err
		}
	}
	f, err := lazyfs.Mount(backing, mnt)
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	return dir, f, nil
}

// mount mounts an FS for the test, skipping where FUSE is not available,
// and unmounts it and removes its directory when the test ends.
func mount(t *testing.T) *lazyfs.FS {
	t.Helper()
	dir, f, err := newMount()
	if errors.Is(err, lazyfs.ErrUnavailable) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Unmount(); err != nil {
			t.Error(err)
		}
		os.RemoveAll(dir)
	})
	return f
}

// mounted reports whether path is a mount point.
func mounted(path string) bool { return slices.Contains(tempdir.Mounts(path), path) }

// openFile opens path (os.OpenFile) or fails the test; the caller closes
// it.
func openFile(t *testing.T, path string, flag int, perm os.FileMode) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, flag, perm)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func write(t *testing.T, path string, data []byte, sync bool) {
	t.Helper()
	f := openFile(t, path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
}

// content is the file's data, or "<absent>".
func content(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "<absent>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func size(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func wantDropped(t *testing.T, got lazyfs.Dropped, bytes int64, files ...string) {
	t.Helper()
	if files == nil {
		files = []string{}
	}
	if got.Files == nil {
		got.Files = []string{}
	}
	if got.Bytes != bytes || !reflect.DeepEqual(got.Files, files) {
		t.Errorf("Crash dropped %d bytes of %q, want %d bytes of %q", got.Bytes, got.Files, bytes, files)
	}
}

// TestCrashDropsUnsyncedData: a file written and not synced loses its data
// (it keeps its name: empty), one synced keeps it; each reads its writes
// (content and size) before the crash.
func TestCrashDropsUnsyncedData(t *testing.T) {
	f := mount(t)
	lost, kept := filepath.Join(f.Dir(), "lost"), filepath.Join(f.Dir(), "kept")
	write(t, lost, []byte("unsynced"), false)
	write(t, kept, []byte("synced"), true)
	if got := content(t, lost); got != "unsynced" {
		t.Errorf("before the crash, lost reads %q, want its write", got)
	}
	if got := size(t, lost); got != 8 {
		t.Errorf("before the crash, lost has size %d, want 8", got)
	}
	wantDropped(t, f.Crash(), 8, "lost")
	if got := content(t, lost); got != "" {
		t.Errorf("after the crash, lost reads %q, want it empty", got)
	}
	if got := content(t, kept); got != "synced" {
		t.Errorf("after the crash, kept reads %q, want %q", got, "synced")
	}
	wantDropped(t, f.Crash(), 0)
}

// TestAppendAfterSync: the data appended after a sync is lost, the data
// before it is kept, and the size goes back to the synced one.
func TestAppendAfterSync(t *testing.T) {
	f := mount(t)
	p := filepath.Join(f.Dir(), "log")
	fd := openFile(t, p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	defer fd.Close()
	first := bytes.Repeat([]byte("a"), 5000)
	if _, err := fd.Write(first); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fdatasync(int(fd.Fd())); err != nil {
		t.Fatal(err)
	}
	if _, err := fd.Write([]byte("bbbb")); err != nil {
		t.Fatal(err)
	}
	if got := size(t, p); got != 5004 {
		t.Errorf("before the crash: size %d, want 5004", got)
	}
	wantDropped(t, f.Crash(), 4, "log")
	if got := content(t, p); got != string(first) {
		t.Errorf("after the crash: %d bytes, want the %d synced", len(got), len(first))
	}
}

// TestSyncThroughAnyDescriptor: fsync through a read-only descriptor
// syncs what another one wrote (Postgres's checkpointer does so).
func TestSyncThroughAnyDescriptor(t *testing.T) {
	f := mount(t)
	p := filepath.Join(f.Dir(), "rel")
	w := openFile(t, p, os.O_CREATE|os.O_WRONLY, 0o644)
	if _, err := w.Write([]byte("page")); err != nil {
		t.Fatal(err)
	}
	w.Close()
	r := openFile(t, p, os.O_RDONLY, 0)
	if err := r.Sync(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	wantDropped(t, f.Crash(), 0)
	if got := content(t, p); got != "page" {
		t.Errorf("after the crash: %q, want %q", got, "page")
	}
}

// TestOSync: each write through a descriptor opened O_DSYNC is synced.
func TestOSync(t *testing.T) {
	f := mount(t)
	p := filepath.Join(f.Dir(), "dsync")
	fd := openFile(t, p, os.O_CREATE|os.O_WRONLY|syscall.O_DSYNC, 0o644)
	defer fd.Close()
	if _, err := fd.Write([]byte("durable")); err != nil {
		t.Fatal(err)
	}
	wantDropped(t, f.Crash(), 0)
	if got := content(t, p); got != "durable" {
		t.Errorf("after the crash: %q, want %q", got, "durable")
	}
}

// TestSync: Sync syncs every file.
func TestSync(t *testing.T) {
	f := mount(t)
	a, b := filepath.Join(f.Dir(), "a"), filepath.Join(f.Dir(), "b")
	write(t, a, []byte("A"), false)
	write(t, b, []byte("B"), false)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	wantDropped(t, f.Crash(), 0)
	if content(t, a)+content(t, b) != "AB" {
		t.Errorf("after Sync and the crash: %q and %q, want A and B", content(t, a), content(t, b))
	}
}

// TestRename: write-temp, fsync, rename keeps the new content without a
// directory fsync; so does write-temp, rename over a file without fsync
// (replace-via-rename syncs); a rename of an unsynced file to a new name
// keeps the name and loses the data (reported under the new name).
func TestRename(t *testing.T) {
	f := mount(t)
	d := f.Dir()
	write(t, filepath.Join(d, "dump.rdb"), []byte("old"), true)
	write(t, filepath.Join(d, "temp-1.rdb"), []byte("new"), true)
	if err := os.Rename(filepath.Join(d, "temp-1.rdb"), filepath.Join(d, "dump.rdb")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(d, "meta.inf"), []byte("v1"), true)
	write(t, filepath.Join(d, "meta.inf.tmp"), []byte("v2"), false)
	if err := os.Rename(filepath.Join(d, "meta.inf.tmp"), filepath.Join(d, "meta.inf")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(d, "temp-2"), []byte("unsynced"), false)
	if err := os.Rename(filepath.Join(d, "temp-2"), filepath.Join(d, "renamed")); err != nil {
		t.Fatal(err)
	}
	wantDropped(t, f.Crash(), 8, "renamed")
	for name, want := range map[string]string{"dump.rdb": "new", "temp-1.rdb": "<absent>", "meta.inf": "v2",
		"meta.inf.tmp": "<absent>", "temp-2": "<absent>", "renamed": ""} {
		if got := content(t, filepath.Join(d, name)); got != want {
			t.Errorf("after the crash, %s: %q, want %q", name, got, want)
		}
	}
}

// TestReplaceViaTruncate: a file truncated to zero and written again is
// synced at its close; one written to at the end is not.
func TestReplaceViaTruncate(t *testing.T) {
	f := mount(t)
	replaced, appended := filepath.Join(f.Dir(), "replaced"), filepath.Join(f.Dir(), "appended")
	write(t, replaced, []byte("old"), true)
	write(t, replaced, []byte("new"), false) // O_TRUNC
	write(t, appended, []byte("a"), true)
	fd := openFile(t, appended, os.O_WRONLY|os.O_APPEND, 0)
	if _, err := fd.Write([]byte("b")); err != nil {
		t.Fatal(err)
	}
	fd.Close()
	wantDropped(t, f.Crash(), 1, "appended")
	if got := content(t, replaced) + "," + content(t, appended); got != "new,a" {
		t.Errorf("after the crash: %q, want %q", got, "new,a")
	}
}

// TestDirectoryFsync: fsync of a directory keeps its names (they are kept
// anyway) and syncs no file's data.
func TestDirectoryFsync(t *testing.T) {
	f := mount(t)
	sub := filepath.Join(f.Dir(), "wal")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(sub, "0001.wal"), []byte("entry"), false)
	dir, err := os.Open(sub)
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.Sync(); err != nil {
		t.Errorf("fsync of a directory: %v", err)
	}
	dir.Close()
	wantDropped(t, f.Crash(), 5, "wal/0001.wal")
	if got := content(t, filepath.Join(sub, "0001.wal")); got != "" {
		t.Errorf("after the crash: %q, want the file empty", got)
	}
}

// TestTruncate: a truncation is kept; what is written after it and not
// synced is lost; a read of the truncated part is zeros.
func TestTruncate(t *testing.T) {
	f := mount(t)
	p := filepath.Join(f.Dir(), "bolt.db")
	write(t, p, bytes.Repeat([]byte("x"), 8192), true)
	fd := openFile(t, p, os.O_RDWR, 0)
	defer fd.Close()
	if _, err := fd.WriteAt([]byte("yy"), 100); err != nil {
		t.Fatal(err)
	}
	if err := fd.Truncate(50); err != nil { // cuts the unsynced write off
		t.Fatal(err)
	}
	if err := fd.Truncate(200); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 200)
	if _, err := fd.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	if want := append(bytes.Repeat([]byte("x"), 50), make([]byte, 150)...); !bytes.Equal(buf, want) {
		t.Errorf("after truncating to 50 and to 200: %q, want 50 x and zeros", buf)
	}
	if _, err := fd.WriteAt([]byte("zz"), 300); err != nil {
		t.Fatal(err)
	}
	wantDropped(t, f.Crash(), 2, "bolt.db")
	if got := size(t, p); got != 200 {
		t.Errorf("after the crash: size %d, want the truncated 200", got)
	}
}

// TestCacheInvalidated: after the crash, neither a descriptor opened
// before it nor a mapping made before it reads the dropped data from the
// kernel's page cache. The mapping reads the written data before.
func TestCacheInvalidated(t *testing.T) {
	f := mount(t)
	p := filepath.Join(f.Dir(), "page")
	old, new := bytes.Repeat([]byte("A"), 4096), bytes.Repeat([]byte("B"), 4096)
	write(t, p, old, true)
	fd := openFile(t, p, os.O_RDWR, 0)
	defer fd.Close()
	if _, err := fd.WriteAt(new, 0); err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(fd.Fd()), 0, 4096, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	if !bytes.Equal(m, new) {
		t.Errorf("before the crash, the mapping reads %q..., want the write", m[:8])
	}
	buf := make([]byte, 4096)
	if _, err := fd.ReadAt(buf, 0); err != nil || !bytes.Equal(buf, new) {
		t.Errorf("before the crash, read %q... (%v), want the write", buf[:8], err)
	}
	wantDropped(t, f.Crash(), 4096, "page")
	if _, err := fd.ReadAt(buf, 0); err != nil || !bytes.Equal(buf, old) {
		t.Errorf("after the crash, the open descriptor reads %q... (%v), want the synced data", buf[:8], err)
	}
	if !bytes.Equal(m, old) {
		t.Errorf("after the crash, the mapping reads %q..., want the synced data", m[:8])
	}
}

// TestUnlinkedFileForgotten: a file removed with unsynced data is not
// reported, and a new file (which may get its inode number) starts clean.
func TestUnlinkedFileForgotten(t *testing.T) {
	f := mount(t)
	p := filepath.Join(f.Dir(), "seg")
	write(t, p, []byte("gone"), false)
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	write(t, p, []byte("x"), true)
	if got := content(t, p); got != "x" {
		t.Errorf("the new file reads %q, want %q", got, "x")
	}
	wantDropped(t, f.Crash(), 0)
}

// TestUnmount: nothing is mounted after Unmount, and a second Unmount is
// harmless.
func TestUnmount(t *testing.T) {
	f := mount(t)
	write(t, filepath.Join(f.Dir(), "x"), []byte("x"), false)
	if !mounted(f.Dir()) {
		t.Fatalf("%s is not in /proc/mounts after Mount", f.Dir())
	}
	if err := f.Unmount(); err != nil {
		t.Fatal(err)
	}
	if err := f.Unmount(); err != nil {
		t.Errorf("second Unmount: %v", err)
	}
	if mounted(f.Dir()) {
		t.Errorf("%s is still mounted after Unmount", f.Dir())
	}
}

// TestUnmountBusy: Unmount detaches a mount a process still has a file
// open on.
func TestUnmountBusy(t *testing.T) {
	f := mount(t)
	p := filepath.Join(f.Dir(), "open")
	write(t, p, []byte("x"), true)
	fd, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Unmount(); err != nil {
		t.Fatal(err)
	}
	if mounted(f.Dir()) {
		t.Errorf("%s is still mounted after Unmount", f.Dir())
	}
	fd.Close()
}

// TestStaleMountRemoved: a process that mounted an FS and was killed
// (SIGKILL) leaves a dead mount, which tempdir.RemoveStale detaches and
// removes with its directory.
func TestStaleMountRemoved(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting FUSE needs root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child: %v", err)
	}
	fields := strings.Fields(line)
	if len(fields) != 2 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child said %q", line)
	}
	dir, mnt := fields[0], fields[1]
	if !mounted(mnt) {
		t.Errorf("%s is not mounted while the child runs", mnt)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if !mounted(mnt) {
		t.Fatalf("%s is not mounted after the child was killed: nothing stale to remove", mnt)
	}
	if _, err := os.Stat(filepath.Join(mnt, "x")); !errors.Is(err, syscall.ENOTCONN) {
		t.Logf("the dead mount answers %v (want ENOTCONN)", err)
	}
	removed := tempdir.RemoveStale()
	found := false
	for _, r := range removed {
		found = found || r == dir
	}
	if !found {
		t.Errorf("RemoveStale removed %q, not %s", removed, dir)
	}
	if mounted(mnt) {
		t.Errorf("%s is still mounted after RemoveStale", mnt)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s after RemoveStale: %v, want it gone", dir, err)
	}
}
