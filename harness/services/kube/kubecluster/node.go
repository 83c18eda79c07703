package kubecluster

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/internal/owner"
	"github.com/locksuite/locksuite/internal/roles"
	"golang.org/x/sys/unix"
)

// kubeNodeEnv makes a process the holder of a Kubernetes node: see init.
const kubeNodeEnv = "LOCKSUITE_KUBE_NODE"

// kubeNodeSpec is what a node's holder is told.
type kubeNodeSpec struct {
	Hostname string `json:"hostname"`
	// Dir is the node's directory, in the cluster's: the holder's files
	// and the logs of the processes it starts.
	Dir string `json:"dir"`
	// Sysctls are files under /proc/sys (a path relative to it) that the
	// node sees with the given value, whatever the host's is.
	Sysctls map[string]string `json:"sysctls"`
	// Procs are started in order, each once the previous one's Socket
	// accepts connections.
	Procs []kubeNodeProc `json:"procs"`
}

// kubeNodeProc is a process of a node: its output goes to Dir/<Name>.log.
type kubeNodeProc struct {
	Name string   `json:"name"`
	Argv []string `json:"argv"`
	// Socket, if set, is a Unix socket the process serves: the next
	// process starts once it accepts a connection.
	Socket string `json:"socket,omitempty"`
}

// kubeNodePrivate are the directories a node gets an empty tmpfs of its own
// on: what containerd, runc, the CNI plugins and kubelet keep in their
// fixed places (/run/netns for the pods' network namespaces, /run/containerd,
// /var/lib/cni for the CNI cache, /var/log/containers for kubelet's links)
// lives and dies with the node's mount namespace and is never seen by the
// host.
var kubeNodePrivate = []string{"/run", "/var/lib", "/var/log"}

// A node's holder is this same binary run again with LOCKSUITE_KUBE_NODE set
// (harness/services/etcd's cluster.go says why the harness re-runs its
// binary; harness/role's Serve dispatches it), started
// by Start with new PID, mount and UTS namespaces in the node's
// network namespace. It is PID 1 there: it makes the node's private
// mounts, starts containerd and kubelet as its children, reaps the orphans
// (containerd's shims) and, on SIGTERM, ends them. When it dies, by any
// signal, the kernel kills every process of its PID namespace (kubelet,
// containerd, the shims, the containers) and, with the last of them, frees
// the mount namespace: the containers' overlay mounts, the pods' volume
// mounts and network namespaces. Nothing of a node outlives its holder but
// empty cgroups and its directory.
func init() { roles.Member(kubeNodeEnv, "kube node", serveKubeNode) }

func serveKubeNode(s kubeNodeSpec) int {
	logf := func(format string, a ...any) { fmt.Fprintf(os.Stderr, "kube node: "+format+"\n", a...) }
	if err := kubeNodeMounts(s); err != nil {
		logf("%v", err)
		return 1
	}
	if s.Hostname != "" {
		if err := unix.Sethostname([]byte(s.Hostname)); err != nil {
			logf("hostname: %v", err)
			return 1
		}
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	procs := map[int]string{} // pid → name, of the processes in Procs
	var order []int
	end := func() {
		for _, pid := range slices.Backward(order) {
			_ = syscall.Kill(pid, syscall.SIGTERM)
		}
		deadline := time.Now().Add(5 * time.Second)
		for len(procs) > 0 && time.Now().Before(deadline) {
			reapKubeNode(procs)
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, p := range s.Procs {
		pid, err := startKubeNodeProc(s.Dir, p)
		if err != nil {
			logf("start %s: %v", p.Name, err)
			end()
			return 1
		}
		procs[pid] = p.Name
		order = append(order, pid)
		logf("started %s (pid %d in the node)", p.Name, pid)
		for p.Socket != "" {
			if c, err := net.DialTimeout("unix", p.Socket, time.Second); err == nil {
				c.Close()
				break
			}
			if died := reapKubeNode(procs); len(died) > 0 {
				logf("%s exited before serving %s", strings.Join(died, ", "), p.Socket)
				end()
				return 1
			}
			select {
			case <-stop:
				end()
				return 0
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	for {
		select {
		case <-stop:
			end()
			return 0
		case <-chld:
			if died := reapKubeNode(procs); len(died) > 0 {
				logf("%s exited: the node is down", strings.Join(died, ", "))
				end()
				return 1
			}
		}
	}
}

// reapKubeNode reaps every child that has exited (the shims, reparented to
// PID 1, included) and returns the names of those that were node
// processes, removing them from procs.
func reapKubeNode(procs map[int]string) []string {
	var died []string
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return died
		}
		if name, ok := procs[pid]; ok {
			died = append(died, fmt.Sprintf("%s (%v)", name, ws))
			delete(procs, pid)
		}
	}
}

// startKubeNodeProc starts p with its output in dir/<name>.log, in the
// holder's environment without its spec.
func startKubeNodeProc(dir string, p kubeNodeProc) (int, error) {
	lf, err := os.OpenFile(filepath.Join(dir, p.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	defer lf.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		return 0, err
	}
	defer null.Close()
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, kubeNodeEnv+"=") })
	proc, err := os.StartProcess(p.Argv[0], p.Argv, &os.ProcAttr{Dir: dir, Env: env, Files: []*os.File{null, lf, lf}})
	if err != nil {
		return 0, err
	}
	return proc.Pid, nil
}

// kubeNodeMounts makes the holder's mount namespace the node's: private
// (nothing propagates to the host), a /proc of the node's PID namespace,
// an empty tmpfs on each of kubeNodePrivate, and the Sysctls bound over
// their /proc/sys files.
func kubeNodeMounts(s kubeNodeSpec) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	for _, d := range kubeNodePrivate {
		if strings.HasPrefix(s.Dir+"/", d+"/") {
			return fmt.Errorf("the node's directory %s is under %s, which the node covers with a tmpfs of its own: set TMPDIR elsewhere", s.Dir, d)
		}
		if err := unix.Mount("tmpfs", d, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=755"); err != nil {
			return fmt.Errorf("mount a tmpfs on %s: %w", d, err)
		}
	}
	keys := make([]string, 0, len(s.Sysctls))
	for k := range s.Sysctls {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		f := filepath.Join(s.Dir, "sysctl-"+strconv.Itoa(i))
		if err := os.WriteFile(f, []byte(s.Sysctls[k]+"\n"), 0o444); err != nil {
			return err
		}
		target := filepath.Join("/proc/sys", k)
		if err := unix.Mount(f, target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s over %s: %w", f, target, err)
		}
	}
	return nil
}

// kubeCgroupPrefix starts the name of the cgroup a cluster's pods live
// under, in every hierarchy: "locksuite-kube-<pid>-<start time>-<random>",
// its owner's record (internal/owner) in the name, since a cgroup holds no
// file of ours.
const kubeCgroupPrefix = "locksuite-kube-"

// cgroupHierarchies are the directories where this machine's cgroup
// hierarchies are mounted (v1 controllers, a v2 tree), from
// /proc/self/mountinfo.
func cgroupHierarchies() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var dirs []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		i := slices.Index(fields, "-")
		if i < 0 || i+1 >= len(fields) || len(fields) < 5 {
			continue
		}
		if t := fields[i+1]; t == "cgroup" || t == "cgroup2" {
			dirs = append(dirs, fields[4])
		}
	}
	return dirs, sc.Err()
}

// newKubeCgroup makes the cgroup /<name> in every hierarchy, name being
// kubeCgroupPrefix, this process's owner record and a random suffix, and
// returns name. In the cpuset hierarchy it gets its parent's CPUs and
// memory nodes (a new cpuset has none).
func newKubeCgroup() (string, error) {
	rec, err := owner.Self()
	if err != nil {
		return "", err
	}
	name := kubeCgroupPrefix + strings.ReplaceAll(rec, " ", "-") + "-" + servers.RandomSecret()[:8]
	hs, err := cgroupHierarchies()
	if err != nil {
		return "", err
	}
	if len(hs) == 0 {
		return "", errors.New("no cgroup hierarchy is mounted")
	}
	for _, h := range hs {
		d := filepath.Join(h, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			removeKubeCgroup(name)
			return "", err
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if b, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				if err := os.WriteFile(filepath.Join(d, f), b, 0o644); err != nil {
					removeKubeCgroup(name)
					return "", fmt.Errorf("%s: %w", filepath.Join(d, f), err)
				}
			}
		}
	}
	return name, nil
}

// removeKubeCgroup removes /<name> and every cgroup under it from every
// hierarchy, killing (SIGKILL) the processes still in them, and waiting up
// to 10 s for them to be gone (the cgroup of a dying process cannot be
// removed yet).
func removeKubeCgroup(name string) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hs {
		root := filepath.Join(h, name)
		if _, err := os.Stat(root); err != nil {
			continue
		}
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for _, d := range slices.Backward(dirs) { // children first
			deadline := time.Now().Add(10 * time.Second)
			for {
				err := os.Remove(d)
				if err == nil || os.IsNotExist(err) {
					break
				}
				if time.Now().After(deadline) {
					errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
					break
				}
				if b, rerr := os.ReadFile(filepath.Join(d, "cgroup.procs")); rerr == nil {
					for _, f := range strings.Fields(string(b)) {
						if pid, perr := strconv.Atoi(f); perr == nil {
							_ = syscall.Kill(pid, syscall.SIGKILL)
						}
					}
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	return errors.Join(errs...)
}

// RemoveStale removes what a Kubernetes cluster (Start) of a
// process that no longer runs left behind, and returns it: its cgroups
// (locksuite-kube-* in every hierarchy, killing any process still in them).
// Its processes, mounts, network namespaces, links and firewall rules
// died with its namespaces; its directory is tempdir.RemoveStale's. The
// cgroups of live processes are left alone.
func RemoveStale() ([]string, error) {
	hs, err := cgroupHierarchies()
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var removed []string
	var errs []error
	for _, h := range hs {
		matches, _ := filepath.Glob(filepath.Join(h, kubeCgroupPrefix+"*"))
		for _, m := range matches {
			name := filepath.Base(m)
			if seen[name] {
				continue
			}
			seen[name] = true
			f := strings.Split(strings.TrimPrefix(name, kubeCgroupPrefix), "-")
			if len(f) != 3 {
				continue
			}
			if gone, ok := owner.Gone(f[0] + " " + f[1]); !ok || !gone {
				continue
			}
			if err := removeKubeCgroup(name); err != nil {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, "cgroup /"+name)
		}
	}
	return removed, errors.Join(errs...)
}
