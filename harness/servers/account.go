package servers

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/locksuite/locksuite/internal/spawn"
	"github.com/locksuite/locksuite/internal/tempdir"
)

// serviceDir returns the user to run backend's server as, and a new TempDir
// "locksuite-<name>-*" that user owns. As root, that is the system user
// named account, which the server's Debian package creates (PostgreSQL and
// MariaDB refuse to run as root); otherwise cred is nil and the directory
// is this process's. A private TMPDIR (mode 0700 somewhere on its path)
// would keep another user out, so as root the directory goes in /tmp then.
func serviceDir(backend, name, account, pkg string) (cred *syscall.Credential, dir string, err error) {
	if os.Geteuid() == 0 {
		u, err := user.Lookup(account)
		if err != nil {
			return nil, "", &Unavailable{backend, fmt.Errorf("running as root and no %s user: %w", account, err),
				fmt.Sprintf("create a %s user (apt-get install %s does), or run as another user", account, pkg)}
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	parent := ""
	if cred != nil && !traversable(os.TempDir()) {
		parent = "/tmp"
	}
	if dir, err = tempdir.New(parent, "locksuite-"+name+"-"); err != nil {
		return nil, "", err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return nil, "", err
		}
	}
	return cred, dir, nil
}

// serviceDataDir is serviceDir's directory with the data directory "data"
// in it, owned by cred's user (newDataDir, lazy as there); an error leaves
// nothing behind.
func serviceDataDir(backend, name, account, pkg string, lazy bool) (cred *syscall.Credential, dir string, dd *dataDir, err error) {
	if cred, dir, err = serviceDir(backend, name, account, pkg); err != nil {
		return nil, "", nil, err
	}
	if dd, err = newDataDir(dir, "data", lazy, cred); err != nil {
		os.RemoveAll(dir)
		return nil, "", nil, &Unavailable{backend, err, FixFUSE(err, "a writable temporary directory")}
	}
	return cred, dir, dd, nil
}

// RunAs runs a server's one-off setup program (initdb,
// mariadb-install-db) as cred (nil: this process's user) in dir, killed if
// this process dies, and returns its output, stdout and stderr together.
func RunAs(ctx context.Context, cred *syscall.Credential, dir, prog string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := spawn.Start(cmd)
	if err == nil {
		err = cmd.Wait()
	}
	return out.String(), err
}

// traversable reports whether every directory on path's way from / lets
// others through (o+x), as a server running as another user needs.
func traversable(path string) bool {
	for p := filepath.Clean(path); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		if p == "/" || p == "." {
			return true
		}
	}
}
