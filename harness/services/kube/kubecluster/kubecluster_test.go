package kubecluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/locksuite/locksuite/harness/nodes"
	"github.com/locksuite/locksuite/harness/role"
	"github.com/locksuite/locksuite/harness/services/kube"
	"github.com/locksuite/locksuite/internal/servercheck"
	"github.com/locksuite/locksuite/internal/tempdir"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// TestMain serves the roles this test binary is run again in (a cluster
// member, a Kubernetes node: harness/role) before any test.
func TestMain(m *testing.M) { os.Exit(role.Main(m)) }

// startKubeCluster starts a cluster for a test, or skips the test with the
// reason when a part is missing (root, a binary, a package).
func startKubeCluster(t *testing.T, ctx context.Context, n int) *Cluster {
	t.Helper()
	skipWithoutKubeCluster(t)
	t0 := time.Now()
	c, err := Start(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster of %d nodes started, every node Ready, in %v", n, time.Since(t0).Round(time.Millisecond))
	t.Cleanup(func() { c.Stop() })
	t.Cleanup(func() {
		if t.Failed() {
			logTails(t, c)
		}
	})
	return c
}

// logTails logs the end of each of c's logs, before Stop removes them.
func logTails(t *testing.T, c *Cluster) {
	logs, _ := filepath.Glob(filepath.Join(c.Dir(), "*.log"))
	more, _ := filepath.Glob(filepath.Join(c.Dir(), "n*", "*.log"))
	pods, _ := filepath.Glob(filepath.Join(c.Dir(), "n*", "pods", "*", "*", "*.log"))
	for _, l := range slices.Concat(logs, more, pods) {
		b, _ := os.ReadFile(l)
		if len(b) > 3000 {
			b = b[len(b)-3000:]
		}
		t.Logf("%s:\n%s", l, b)
	}
}

// skipWithoutKubeCluster skips t under -short, and with the reason when a
// part of the cluster is missing (root, a binary, a package).
func skipWithoutKubeCluster(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real Kubernetes cluster (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd, kubelet)")
	}
	if err := nodes.Check(); err != nil {
		t.Skip(err)
	}
	if _, _, err := kubeClusterBinaries(); err != nil {
		t.Skip(err)
	}
}

// probePod imports the image of testdata/podprobe into c and runs it on
// node on as the pod "probe-<on>-<to>", which dials a listener of this
// process on node to's address. It returns once the listener heard the
// pod's greeting from the pod's address and the pod Succeeded, with what
// the pod logged.
func probePod(t *testing.T, ctx context.Context, c *Cluster, on, to int) string {
	t.Helper()
	const image = "localhost/locksuite/podprobe:test"
	if _, err := c.ImportProgram(ctx, "./testdata/podprobe", image); err != nil {
		t.Fatal(err)
	}
	node := c.Nodes()[to]
	ln, err := node.Listen("tcp", net.JoinHostPort(node.Addr().String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cs, err := corev1client.NewForConfig(c.RestConfig())
	if err != nil {
		t.Fatal(err)
	}
	pods := cs.Pods(c.Namespace())
	name := fmt.Sprintf("probe-%d-%d", on, to)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName:      c.Nodes()[on].Name(),
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "probe", Image: image, ImagePullPolicy: corev1.PullNever,
				Args: []string{ln.Addr().String()},
			}},
		},
	}
	t0 := time.Now()
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	heard := make(chan string, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			heard <- "accept: " + err.Error()
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(time.Minute))
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil {
			heard <- "read: " + err.Error()
			return
		}
		fmt.Fprintf(conn, "ok %s\n", conn.RemoteAddr())
		heard <- strings.TrimSpace(line) + " from " + conn.RemoteAddr().String()
	}()
	logs := func() string {
		b, err := pods.GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			return "(logs: " + err.Error() + ")"
		}
		return string(b)
	}
	var got string
	deadline := time.After(3 * time.Minute)
	for got == "" {
		select {
		case got = <-heard:
		case <-deadline:
			p, _ := pods.Get(ctx, name, metav1.GetOptions{})
			t.Fatalf("the pod did not reach the listener on %s in 3 minutes; pod status: %+v", ln.Addr(), p.Status)
		case <-time.After(200 * time.Millisecond):
			if p, err := pods.Get(ctx, name, metav1.GetOptions{}); err == nil && p.Status.Phase == corev1.PodFailed {
				t.Fatalf("the pod failed before it reached the listener on %s; its logs: %s", ln.Addr(), logs())
			}
		}
	}
	t.Logf("the listener on %s heard %q, %v after the pod was created", ln.Addr(), got, time.Since(t0).Round(time.Millisecond))
	if sub := PodSubnet(on); !strings.HasPrefix(got, "hello from "+name+" from "+strings.TrimSuffix(sub.Addr().String(), "0")) {
		t.Errorf("heard %q: want the pod's greeting (hostname %s) from an address of node %s's pod subnet %s", got, name, c.Nodes()[on].Name(), sub)
	}
	var phase corev1.PodPhase
	for phase != corev1.PodSucceeded {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if phase = p.Status.Phase; phase == corev1.PodFailed {
			t.Fatalf("pod failed: %+v", p.Status)
		}
		if ctx.Err() != nil {
			t.Fatalf("pod phase %s: %v", phase, ctx.Err())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("pod Succeeded %v after it was created", time.Since(t0).Round(time.Millisecond))
	out := logs()
	if !strings.Contains(out, `got "ok `) {
		t.Errorf("pod logs %q: want the reply the listener sent", out)
	}
	return out
}

// sleeper runs a pod of the pause image on node i and returns once it
// runs and its processes are seen (the shim, and pause in the node's
// cgroup): what Stop must end.
func sleeper(t *testing.T, ctx context.Context, c *Cluster, i int) {
	t.Helper()
	cs, err := corev1client.NewForConfig(c.RestConfig())
	if err != nil {
		t.Fatal(err)
	}
	pods := cs.Pods(c.Namespace())
	name := fmt.Sprintf("sleeper-%d", i)
	_, err = pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{NodeName: c.Nodes()[i].Name(), Containers: []corev1.Container{{
			Name: "sleep", Image: PauseImage, ImagePullPolicy: corev1.PullNever}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ps := kubeProcesses(c.Dir(), c.nodes[i].cgroup)
		if p.Status.Phase == corev1.PodRunning && slices.ContainsFunc(ps, func(p string) bool { return strings.HasSuffix(p, " containerd-shim") }) &&
			slices.ContainsFunc(ps, func(p string) bool { return strings.HasSuffix(p, " pause") }) {
			t.Logf("pod %s runs; the cluster's processes: %q", name, ps)
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("pod %s: phase %s, the cluster's processes %q: want Running, with a containerd-shim and pause", name, p.Status.Phase, ps)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// hostState is what a cluster could leave in the host's namespaces: a
// line per thing, compared before and after.
type hostState struct {
	links, mounts, rules, paths, sysctls, cgroups []string
}

// kubeHostPaths are the places where containerd, kubelet and the CNI
// plugins keep things by default.
var kubeHostPaths = []string{"/var/lib/cni", "/var/lib/kubelet", "/var/lib/containerd", "/var/log/pods",
	"/var/log/containers", "/run/containerd", "/run/netns", "/opt/containerd", "/opt/cni", "/etc/cni", "/etc/kubernetes"}

func snapshotHost(t *testing.T) hostState {
	t.Helper()
	var s hostState
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		s.links = append(s.links, l.Attrs().Name)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(mi)), "\n") {
		f := strings.Fields(l)
		s.mounts = append(s.mounts, f[4]) // the mount point
	}
	for _, cmd := range [][]string{{"iptables-save"}, {"ip6tables-save"}, {"nft", "list", "ruleset"}} {
		if _, err := exec.LookPath(cmd[0]); err != nil {
			continue
		}
		out, err := exec.Command(cmd[0], cmd[1:]...).Output()
		if err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if !strings.HasPrefix(l, "#") { // iptables-save's dated comments
				s.rules = append(s.rules, cmd[0]+": "+l)
			}
		}
	}
	for _, p := range kubeHostPaths {
		if ents, err := os.ReadDir(p); err == nil {
			s.paths = append(s.paths, fmt.Sprintf("%s (%d entries)", p, len(ents)))
		} else if !os.IsNotExist(err) {
			s.paths = append(s.paths, p)
		}
	}
	top, _ := filepath.Glob("/sys/fs/cgroup/*/*/cgroup.procs")
	for _, p := range top {
		s.cgroups = append(s.cgroups, filepath.Dir(p))
	}
	for _, k := range []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
		"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "net/ipv4/ip_forward"} {
		b, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			t.Fatal(err)
		}
		s.sysctls = append(s.sysctls, k+"="+strings.TrimSpace(string(b)))
	}
	return s
}

// added is what after has and before had not.
func added(before, after []string) []string {
	var out []string
	for _, a := range after {
		if !slices.Contains(before, a) {
			out = append(out, a)
		}
	}
	return out
}

// checkLeftovers fails t for everything of the cluster (its directory dir,
// its cgroup) still on the machine: processes, cgroups, the directory, and
// links, mounts, firewall rules, files in the runtimes' default places
// and kernel settings that differ from before.
func checkLeftovers(t *testing.T, before hostState, dir, cgroup string) {
	t.Helper()
	after := snapshotHost(t)
	for what, d := range map[string][]string{
		"links": added(before.links, after.links), "mounts": added(before.mounts, after.mounts),
		"firewall rules": added(before.rules, after.rules), "paths": added(before.paths, after.paths),
		"kernel settings": added(before.sysctls, after.sysctls), "cgroups": added(before.cgroups, after.cgroups),
	} {
		if len(d) > 0 {
			t.Errorf("new %s after Stop: %q", what, d)
		}
	}
	if ps := kubeProcesses(dir, cgroup); len(ps) > 0 {
		t.Errorf("processes of the cluster after Stop: %q", ps)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the cluster's directory %s is still there (%v)", dir, err)
	}
	if m, _ := filepath.Glob("/sys/fs/cgroup/*/" + cgroup); len(m) > 0 {
		t.Errorf("the cluster's cgroups are still there: %q", m)
	}
}

// kubeProcesses are the processes whose command line or environment names
// dir, or whose cgroups are under cgroup: "pid command".
func kubeProcesses(dir, cgroup string) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		pid := e.Name()
		if pid == fmt.Sprint(os.Getpid()) || strings.Trim(pid, "0123456789") != "" {
			continue
		}
		var hit bool
		for _, f := range []string{"cmdline", "environ", "cgroup"} {
			b, _ := os.ReadFile(filepath.Join("/proc", pid, f))
			hit = hit || strings.Contains(string(b), dir) || strings.Contains(string(b), cgroup)
		}
		if hit {
			comm, _ := os.ReadFile(filepath.Join("/proc", pid, "comm"))
			out = append(out, pid+" "+strings.TrimSpace(string(comm)))
		}
	}
	return out
}

// TestKubeCluster starts the single-node cluster, runs a pod from an
// imported image of a static program of this repository that reaches a
// listener of the test over the pod network, reads the pod's logs through
// the API, and checks that Stop leaves nothing behind.
func TestKubeCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	before := snapshotHost(t)
	c := startKubeCluster(t, ctx, 1)
	logs := probePod(t, ctx, c, 0, 0)
	t.Logf("pod logs: %s", strings.TrimSpace(logs))
	sleeper(t, ctx, c, 0)
	dir, cgroup := c.Dir(), c.nodes[0].cgroup
	t0 := time.Now()
	if err := c.Stop(); err != nil {
		t.Error(err)
	}
	t.Logf("Stop took %v", time.Since(t0).Round(time.Millisecond))
	checkLeftovers(t, before, dir, cgroup)
}

// TestKubeClusterNodes starts a cluster of two nodes (two kubelets, each
// with its containerd, in network namespaces of their own) and runs a
// pod on each that reaches a listener on the other node over the pod
// networks and the nodes' routes; Stop leaves nothing behind.
func TestKubeClusterNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	before := snapshotHost(t)
	c := startKubeCluster(t, ctx, 2)
	probePod(t, ctx, c, 1, 0)
	probePod(t, ctx, c, 0, 1)
	sleeper(t, ctx, c, 0)
	sleeper(t, ctx, c, 1)
	dir := c.Dir()
	if err := c.Stop(); err != nil {
		t.Error(err)
	}
	for _, n := range c.nodes {
		checkLeftovers(t, before, dir, n.cgroup)
	}
}

// kubeHelperEnv makes TestKubeClusterHelper start a cluster, run the probe
// pod, print "ready <dir> <cgroup>" and wait to be killed.
const kubeHelperEnv = "LOCKSUITE_TEST_KUBE_HELPER"

func TestKubeClusterHelper(t *testing.T) {
	if os.Getenv(kubeHelperEnv) == "" {
		t.Skip("the process TestKubeClusterKilled kills")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	c := startKubeCluster(t, ctx, 1)
	probePod(t, ctx, c, 0, 0)
	sleeper(t, ctx, c, 0)
	fmt.Printf("ready %s %s\n", c.Dir(), c.nodes[0].cgroup)
	time.Sleep(time.Hour)
}

// TestKubeClusterKilled SIGKILLs a process that runs a cluster with a
// finished pod, and checks that the kernel ended everything the cluster
// ran and that a later run's sweep (tempdir.RemoveStale, RemoveStale)
// removes what is left: nothing of the cluster remains.
func TestKubeClusterKilled(t *testing.T) {
	skipWithoutKubeCluster(t)
	before := snapshotHost(t)
	cmd, out := servercheck.StartSelf(t, kubeHelperEnv, "-test.run=^TestKubeClusterHelper$", "-test.v")
	var dir, cgroup string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "ready" {
			dir, cgroup = f[1], f[2]
			break
		}
		t.Log(sc.Text())
	}
	if dir == "" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("the helper exited without a cluster")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, out)
	cmd.Wait()
	// The kernel ends the node's processes when its holder dies (by its
	// Pdeathsig); give it a moment, as a later run would have.
	deadline := time.Now().Add(10 * time.Second)
	for len(kubeProcesses(dir, cgroup)) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if ps := kubeProcesses(dir, cgroup); len(ps) > 0 {
		t.Errorf("processes of the killed run's cluster still run: %q", ps)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("the killed run's directory %s: %v (want it there, for the sweep to remove)", dir, err)
	}
	removed := tempdir.RemoveStale()
	stale, err := RemoveStale()
	if err != nil {
		t.Error(err)
	}
	t.Logf("the sweep removed %q and %q", removed, stale)
	if !slices.Contains(stale, "cgroup /"+cgroup) {
		t.Errorf("RemoveStale removed %q: want the killed run's cgroup /%s among them", stale, cgroup)
	}
	checkLeftovers(t, before, dir, cgroup)
}

// TestKubeBadInput: a node count out of range and an unknown component are
// refused with errors that say what is accepted, before anything starts.
func TestKubeBadInput(t *testing.T) {
	for _, n := range []int{0, kubeMaxNodes + 1} {
		if _, err := Start(context.Background(), n); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("1 to %d nodes", kubeMaxNodes)) {
			t.Errorf("Start(%d): %v, want an error naming the range", n, err)
		}
	}
	if _, err := kube.Binary("kube-proxy"); err == nil || !strings.Contains(err.Error(), "kubelet") {
		t.Errorf("kube.Binary(kube-proxy): %v, want an error listing the components", err)
	}
}
