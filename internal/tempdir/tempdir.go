// Package tempdir makes temporary directories with an owner record, so that a
// later run can remove those whose owner was killed before it could.
package tempdir

import (
	"os"
	"path/filepath"

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
// made by New), are left alone.
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
			if os.RemoveAll(dir) == nil {
				removed = append(removed, dir)
			}
		}
	}
	return removed
}
