// Package workers ships locksuite's workers for the lock libraries of other
// languages (docs/protocol.md), each in its language's own conventions, and
// prepares them to run: Python's redis-py and kazoo locks (Debian's
// python3-redis and python3-kazoo, for /usr/bin/python3), Node's redlock
// and redis-semaphore (npm, pinned by the committed package-lock.json),
// and Apache Curator's InterProcessMutex (Java 17, Debian's jars).
//
// The files are embedded in the binary. Prepare writes a worker's files
// into ${XDG_CACHE_HOME:-~/.cache}/locksuite/workers/, in a directory
// named by their content, and installs what they need there once (npm ci;
// javac): a later Prepare, from this process or another, finds it done.
package workers

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

//go:embed python/*.py node/*.js node/package.json node/package-lock.json java/classpath java/src
var files embed.FS

// Python is the interpreter of the Python workers: Debian's, which
// python3-redis and python3-kazoo serve (another python3 may come first
// in PATH and not see them).
const Python = "/usr/bin/python3"

// Worker is one shipped worker.
type Worker struct {
	// Name is its backend's name (redis-py, kazoo, redlock-js,
	// redis-semaphore, curator).
	Name string
	// Service is the lock service it runs on: "redis" or "zookeeper", as
	// docs/protocol.md's init names it.
	Service string
	// Lang is the directory of its language: python, node or java.
	Lang string
	// Main is the worker's program: a file of Lang's directory, or a Java
	// class.
	Main string
	// Needs are what it needs besides its runtime, for the error that
	// says what is missing: Python modules, a Debian package.
	Needs []string
	// Package is what installs the pieces it needs (ci/setup.sh's item).
	Package string
}

// All are the shipped workers, in report order.
var All = []Worker{
	{Name: "redis-py", Service: "redis", Lang: "python", Main: "redis_py_worker.py", Needs: []string{"redis"}, Package: "python3-redis"},
	{Name: "kazoo", Service: "zookeeper", Lang: "python", Main: "kazoo_worker.py", Needs: []string{"kazoo"}, Package: "python3-kazoo"},
	{Name: "redlock-js", Service: "redis", Lang: "node", Main: "redlock.js", Package: "nodejs"},
	{Name: "redis-semaphore", Service: "redis", Lang: "node", Main: "redis-semaphore.js", Package: "nodejs"},
	{Name: "curator", Service: "zookeeper", Lang: "java", Main: "locksuite.CuratorWorker", Package: "libcurator-recipes-java"},
}

// Lookup returns the worker named n.
func Lookup(n string) (Worker, bool) {
	for _, w := range All {
		if w.Name == n {
			return w, true
		}
	}
	return Worker{}, false
}

// Missing is Prepare's error when this machine lacks what a worker needs:
// What is missing, Fix how to install it.
type Missing struct {
	Worker, What, Fix string
}

func (m *Missing) Error() string {
	return fmt.Sprintf("worker %s: %s is missing; fix: %s", m.Worker, m.What, m.Fix)
}

// Prepared is a worker ready to start: its command line and directory.
type Prepared struct {
	Command []string
	Dir     string
}

var (
	mu       sync.Mutex
	prepared = map[string]Prepared{} // by Lang, in this process
	checked  = map[string]bool{}     // by Name: check passed in this process
)

// Prepare makes w ready to start and returns how to start it. The first
// Prepare of a language on a machine installs (npm ci: up to a few
// minutes; javac: seconds); its error is a *Missing when a runtime or
// package is not there.
func (w Worker) Prepare(ctx context.Context) (Prepared, error) {
	mu.Lock()
	defer mu.Unlock()
	if !checked[w.Name] { // once per process: an interpreter's start is 50 ms
		if err := w.check(); err != nil {
			return Prepared{}, err
		}
		checked[w.Name] = true
	}
	dir, ok := prepared[w.Lang]
	if !ok {
		d, err := install(ctx, w)
		if err != nil {
			return Prepared{}, fmt.Errorf("worker %s: %w", w.Name, err)
		}
		dir = Prepared{Dir: d}
		prepared[w.Lang] = dir
	}
	p := Prepared{Dir: dir.Dir}
	switch w.Lang {
	case "python":
		p.Command = []string{Python, filepath.Join(dir.Dir, w.Main)}
	case "node":
		p.Command = []string{"node", filepath.Join(dir.Dir, w.Main)}
	case "java":
		p.Command = []string{"java", "-XX:TieredStopAtLevel=1", "-Xshare:auto", "-cp", filepath.Join(dir.Dir, "classes") + ":" + strings.Join(jars(), ":"), w.Main}
	}
	return p, nil
}

// check looks for w's runtime and packages.
func (w Worker) check() error {
	miss := func(what string) error {
		return &Missing{Worker: w.Name, What: what, Fix: "install it (apt install " + w.Package + "), or run ci/setup.sh " + w.Name}
	}
	switch w.Lang {
	case "python":
		if _, err := os.Stat(Python); err != nil {
			return miss(Python)
		}
		for _, m := range w.Needs {
			if err := exec.Command(Python, "-c", "import "+m).Run(); err != nil {
				return miss("the Python module " + m + " of " + Python)
			}
		}
	case "node":
		for _, b := range []string{"node", "npm"} {
			if _, err := exec.LookPath(b); err != nil {
				return &Missing{Worker: w.Name, What: b, Fix: "install Node 20 and npm (apt install nodejs npm gives Debian's), or run ci/setup.sh " + w.Name}
			}
		}
	case "java":
		for _, b := range []string{"java", "javac"} {
			if _, err := exec.LookPath(b); err != nil {
				return &Missing{Worker: w.Name, What: b, Fix: "install a JDK 17 (apt install openjdk-17-jdk-headless), or run ci/setup.sh " + w.Name}
			}
		}
		for _, j := range jars() {
			if _, err := os.Stat(j); err != nil {
				return miss(j)
			}
		}
	}
	return nil
}

// jars is java/classpath's list.
func jars() []string {
	b, _ := files.ReadFile("java/classpath")
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// CacheDir is where Prepare writes the workers:
// ${XDG_CACHE_HOME:-~/.cache}/locksuite/workers.
func CacheDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "locksuite", "workers"), nil
}

// install writes w.Lang's files into the cache, in a directory named by
// their hash, and installs their dependencies there, unless that is done:
// into a temporary directory first, renamed when complete, so that
// processes preparing at once end with one complete directory.
func install(ctx context.Context, w Worker) (string, error) {
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	var names []string
	err = fs.WalkDir(files, w.Lang, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := files.ReadFile(p)
			fmt.Fprintf(h, "%s %d\n", p, len(b))
			h.Write(b)
			names = append(names, p)
		}
		return err
	})
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, w.Lang+"-"+hex.EncodeToString(h.Sum(nil))[:12])
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(cache, "."+w.Lang+"-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	for _, p := range names {
		b, _ := files.ReadFile(p)
		out := filepath.Join(tmp, strings.TrimPrefix(p, w.Lang+"/"))
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(out, b, 0o644); err != nil {
			return "", err
		}
	}
	switch w.Lang {
	case "node":
		// npm ci installs exactly package-lock.json's versions.
		err = run(ctx, tmp, 10*time.Minute, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	case "java":
		srcs, _ := filepath.Glob(filepath.Join(tmp, "src", "locksuite", "*.java"))
		err = run(ctx, tmp, 5*time.Minute, "javac", append([]string{"-d", filepath.Join(tmp, "classes"), "-cp", strings.Join(jars(), ":")}, srcs...)...)
	}
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), nil, 0o644); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, ".complete")); serr == nil {
			return dir, nil // another process finished first
		}
		return "", err
	}
	return dir, nil
}

// run runs name in dir within limit; its error has the command's output.
func run(ctx context.Context, dir string, limit time.Duration, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = errors.Join(err, ctx.Err())
		}
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, tail(out.String(), 20))
	}
	return nil
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
