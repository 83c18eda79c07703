package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/locksuite/locksuite/harness/worker"
)

// output is one path the user asked a result to be written to.
type output struct {
	flag, path string
	dir        bool // a directory (made if missing) rather than a file
}

// checkOutputs tells, before any server starts, whether every output path
// can be written: a file's directory must take a new file, or be makeable
// under its nearest existing parent (the run makes it, as it makes a
// missing --artifacts directory); the file itself, if it exists, must be a
// writable file; a directory must be one, or be makeable under its nearest
// existing parent. Nothing is left behind: the probe file is removed, and
// no directory is made. The error,
// a usageError, names the flag, the path and the fix. A chaos worker
// (the CLI run again by the suite) checks nothing: it writes none of them.
func checkOutputs(outs []output) error {
	if _, ok, _ := worker.FromEnv(); ok {
		return nil
	}
	for _, o := range outs {
		if o.path == "" {
			continue
		}
		if err := checkOutput(o); err != nil {
			return &usageError{fmt.Sprintf("--%s %s: %v", o.flag, o.path, err)}
		}
	}
	return nil
}

func checkOutput(o output) error {
	st, err := os.Stat(o.path)
	switch {
	case err == nil && o.dir && !st.IsDir():
		return errors.New("exists and is not a directory: choose a directory")
	case err == nil && o.dir:
		return probeDir(o.path)
	case err == nil && st.IsDir():
		return errors.New("is a directory: give a file name")
	case err == nil:
		f, err := os.OpenFile(o.path, os.O_WRONLY, 0) // no O_TRUNC: the old file stays until the run writes
		if err != nil {
			return fmt.Errorf("cannot be written (%v): choose another path", unwrapPath(err))
		}
		f.Close()
		return probeDir(filepath.Dir(o.path))
	case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR): // ENOTDIR: a parent is a file, said below
		return fmt.Errorf("%v: choose another path", unwrapPath(err))
	case o.dir:
		// Made by the run: its nearest existing ancestor must take it.
		return probeAncestor(o.path)
	default:
		return probeAncestor(filepath.Dir(o.path))
	}
}

// probeAncestor checks that dir, made by the run if it is missing, can be:
// dir itself if it exists, else its nearest existing ancestor, must be a
// writable directory.
func probeAncestor(dir string) error {
	p := filepath.Clean(dir)
	for {
		st, err := os.Stat(p)
		if err == nil {
			if !st.IsDir() {
				return fmt.Errorf("%s is not a directory: choose another path", p)
			}
			return probeDir(p)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return fmt.Errorf("no existing parent directory: choose another path")
		}
		p = parent
	}
}

// probeDir creates and removes a file in dir: the one sure test that the
// run can write there (permissions, read-only mounts, ACLs).
func probeDir(dir string) error {
	f, err := os.CreateTemp(dir, ".locksuite-probe-*")
	if err != nil {
		return fmt.Errorf("directory %s is not writable (%v): choose another path", dir, unwrapPath(err))
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// writeAtomic writes path through a temporary file in its directory (made
// if missing), renamed over it: a reader, or a run killed mid-write, sees
// the old file or the new one, never a part.
func writeAtomic(path string, write func(io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
