package servers

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// libfaketimeGlobs are where Debian's libfaketime package (apt-get install
// faketime) puts the multi-threaded library.
var libfaketimeGlobs = []string{"/usr/lib/*/faketime/libfaketimeMT.so.1", "/usr/lib/faketime/libfaketimeMT.so.1"}

// mallocDebugGlobs find glibc's libc_malloc_debug.so.0 (glibc 2.34 and
// later, part of libc6).
var mallocDebugGlobs = []string{"/lib/*/libc_malloc_debug.so.0", "/usr/lib/*/libc_malloc_debug.so.0"}

func glob(gs []string) string {
	for _, g := range gs {
		if m, _ := filepath.Glob(g); len(m) > 0 {
			return m[0]
		}
	}
	return ""
}

// LibFaketime returns the path of libfaketimeMT.so.1, or "" when the
// faketime package is not installed.
func LibFaketime() string { return glob(libfaketimeGlobs) }

// fakeTimePreload is the LD_PRELOAD that runs a server under libfaketime,
// or "" when it cannot. glibc's libc_malloc_debug.so.0 comes first: its
// malloc, free and malloc_usable_size (glibc's allocator) then take the
// place of jemalloc's, which Debian's redis-server links and which
// libfaketime cannot run with (jemalloc calls clock_gettime while
// libfaketime initializes: wolfcw/libfaketime#130).
func fakeTimePreload() string {
	lib, dbg := LibFaketime(), glob(mallocDebugGlobs)
	if lib == "" || dbg == "" {
		return ""
	}
	return dbg + " " + lib
}

// FakeClock is the wall clock of a server process started under
// libfaketime: LD_PRELOAD with FAKETIME_TIMESTAMP_FILE, re-read on every
// time call (FAKETIME_NO_CACHE=1), and the monotonic clock left alone
// (FAKETIME_DONT_FAKE_MONOTONIC=1), so that a jump moves CLOCK_REALTIME only,
// as an NTP step does. The offset starts at 0.
type FakeClock struct {
	file   string
	mu     sync.Mutex
	offset time.Duration
}

// NewFakeClock prepares a clock file in dir (owned by uid, gid when not
// -1) and returns the environment to start the server with; nil and no
// error when libfaketime (or glibc's libc_malloc_debug) is not installed.
func NewFakeClock(dir string, uid, gid int) (*FakeClock, []string, error) {
	preload := fakeTimePreload()
	if preload == "" {
		return nil, nil, nil
	}
	c := &FakeClock{file: filepath.Join(dir, "faketime")}
	if err := c.write(0); err != nil {
		return nil, nil, err
	}
	if uid >= 0 {
		_ = os.Chown(c.file, uid, gid)
	}
	return c, []string{"LD_PRELOAD=" + preload, "FAKETIME_TIMESTAMP_FILE=" + c.file, "FAKETIME_NO_CACHE=1", "FAKETIME_DONT_FAKE_MONOTONIC=1"}, nil
}

// write replaces the clock file atomically, so that a reader never sees it
// half written.
func (c *FakeClock) write(offset time.Duration) error {
	tmp := c.file + ".tmp"
	if err := os.WriteFile(tmp, []byte("+"+strconv.FormatFloat(offset.Seconds(), 'f', 3, 64)+"\n"), 0o644); err != nil {
		return err
	}
	if fi, err := os.Stat(c.file); err == nil {
		_ = os.Chmod(tmp, fi.Mode())
	}
	return os.Rename(tmp, c.file)
}

// Jump moves the server's wall clock forward by d (backward if d is
// negative), from its next time call on.
func (c *FakeClock) Jump(d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.write(c.offset + d); err != nil {
		return fmt.Errorf("servers: moving the clock: %w", err)
	}
	c.offset += d
	return nil
}

// Offset is how far the server's wall clock is ahead of the real one.
func (c *FakeClock) Offset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset
}

// withFakeClock starts Postgres under libfaketime too (Redis always runs
// under it when it is installed): for the test that measures whether
// idle_session_timeout follows the wall clock.
func withFakeClock() Option { return func(o *Settings) { o.fakeClock = true } }
