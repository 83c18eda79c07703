// Package tempdir makes temporary directories with an owner record, so that a
// later run can remove those whose owner was killed before it could.
package tempdir

import (
	"bufio"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/locksuite/locksuite/internal/owner"
)

// ownerFile, in each directory New makes, names the process that made
// it: "<pid> <start time in clock ticks since boot>", the start time telling
// a live owner from a later process that reuses its pid.
const ownerFile = ".locksuite-owner"

// New makes a directory for a server or a run, like os.MkdirTemp(parent,
// pattern) (parent "" is os.TempDir()), and records this process as its
// owner. A coordinator killed with SIGKILL cannot remove it; RemoveStale, in
// the next run, does.
func New(parent, pattern string) (string, error) {
	dir, err := os.MkdirTemp(parent, pattern)
	if err != nil {
		return "", err
	}
	rec, err := owner.Self()
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, ownerFile), []byte(rec+"\n"), 0o644)
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// Disown removes dir's owner record: RemoveStale will not remove it once
// its owner is gone (a directory of results kept for the user).
func Disown(dir string) error {
	if err := os.Remove(filepath.Join(dir, ownerFile)); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// RemoveStale removes the directories "locksuite-*" in os.TempDir() and
// /tmp that New made for a process that no longer runs, and returns
// them. Directories of live processes, and any without an owner record (not
// made by New), are left alone. A filesystem mounted inside a stale
// directory (a FUSE mount whose serving process died with it, see
// harness/lazyfs) is lazily detached first (umount MNT_DETACH), so that
// what it hid can be removed.
func RemoveStale() []string {
	var removed []string
	seen := map[string]bool{}
	for _, parent := range []string{os.TempDir(), "/tmp"} {
		matches, _ := filepath.Glob(filepath.Join(parent, "locksuite-*"))
		for _, dir := range matches {
			if seen[dir] {
				continue
			}
			seen[dir] = true
			b, err := os.ReadFile(filepath.Join(dir, ownerFile))
			if err != nil {
				continue
			}
			if gone, ok := owner.Gone(string(b)); !ok || !gone {
				continue // no record, or its owner runs
			}
			detachMounts(dir)
			if os.RemoveAll(dir) == nil {
				removed = append(removed, dir)
			}
		}
	}
	return removed
}

// detachMounts lazily unmounts every mount at or below dir, deepest first.
func detachMounts(dir string) {
	mps := Mounts(dir)
	sort.Sort(sort.Reverse(sort.StringSlice(mps)))
	for _, mp := range mps {
		_ = unix.Unmount(mp, unix.MNT_DETACH)
	}
}

// Mounts lists the mount points at or below dir (this process's mount
// namespace: /proc/self/mountinfo), for a test that checks nothing was
// left mounted.
func Mounts(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	dir = filepath.Clean(dir)
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		// "36 35 98:0 /root /mount/point rw,noatime ... - fstype source opts"
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out
}

// unescapeMount undoes the octal escapes (\040 for a space, ...) of a
// path in /proc/self/mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
