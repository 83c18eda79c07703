// Package owner names a process in a way that survives pid reuse, so that
// a later run can tell whether what an earlier run left behind (a temporary
// directory, a network link) still belongs to a live process.
package owner

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Self is this process's record: "<pid> <start time in clock ticks since
// boot>". The start time tells the live owner from a later process that
// reuses its pid.
func Self() (string, error) {
	pid := os.Getpid()
	start, err := startTime(pid)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d %d", pid, start), nil
}

// Gone reports whether the process a record from Self names no longer
// runs. ok is false if rec is not such a record (it then names nobody, and
// callers leave the thing it came with alone).
func Gone(rec string) (gone, ok bool) {
	var pid int
	var start uint64
	if _, err := fmt.Sscanf(rec, "%d %d", &pid, &start); err != nil {
		return false, false
	}
	s, err := startTime(pid)
	return err != nil || s != start, true
}

// startTime is field 22 of /proc/<pid>/stat: when the process started.
func startTime(pid int) (uint64, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}
