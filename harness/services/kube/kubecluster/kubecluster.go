// Package kubecluster starts a real multi-node Kubernetes cluster on this
// machine for tests (Start): its control plane and nodes in network
// namespaces of their own. Its node holders and its etcd are this binary
// run again (see the role in node.go): a binary that starts a cluster
// imports this package, as every binary that uses it does. No adapter's
// test imports it.
package kubecluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/locksuite/locksuite/harness/kubeimage"
	"github.com/locksuite/locksuite/harness/nodes"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/harness/services/etcd"
	"github.com/locksuite/locksuite/harness/services/kube"
	"github.com/locksuite/locksuite/harness/services/kube/internal/apiserver"
	"github.com/locksuite/locksuite/internal/tempdir"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// PauseImage is the pause (sandbox) image of the cluster's pods, built
// from kubeimage.PausePackage and imported by Start.
const PauseImage = "localhost/locksuite/pause:" + kube.Version

// The cluster's well-known ports, on the nodes' own addresses: their
// network namespaces are the run's, so no other process can hold them.
const (
	kubeAPIPort   = 6443
	kubeEtcdPort  = 2379
	kubeletPort   = 10250
	kubeNodeGrace = 10 * time.Second
	// kubeMaxNodes bounds the nodes of a cluster: node i's pods are in
	// 10.78.i.0/24.
	kubeMaxNodes = 16
)

// kubePodNetwork holds every node's pod subnet.
var kubePodNetwork = netip.MustParsePrefix("10.78.0.0/16")

// PodSubnet is the pod network of node i of a Cluster,
// 10.78.i.0/24: the bridge "cni0" in the node's network namespace has its
// first address, the gateway of the node's pods.
func PodSubnet(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 78, byte(i), 0}), 24)
}

// kubeNode is one node of a Cluster.
type kubeNode struct {
	node   *nodes.Node
	dir    string // its directory, in the cluster's
	cgroup string // the cgroup its pods live under, in every hierarchy
	holder *servers.Member
}

// Cluster is a real Kubernetes cluster that Start started
// on this machine: etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler, and nodes whose kubelets run pods with containerd, runc
// and the bridge CNI plugin. Everything is in network namespaces of its own
// (a nodes.Network, one namespace per node): the harness reaches the API
// through the network (RestConfig dials from node n0), and a pod reaches a
// listener the harness opens with Nodes()[i].Listen at Nodes()[i].Addr().
type Cluster struct {
	nw      *nodes.Network
	nodes   []*kubeNode
	dir     string
	token   string
	tokens  map[string]string // each user's
	ca      string
	members []*servers.Member // etcd, kube-apiserver, kube-controller-manager, kube-scheduler, then each node's holder
	once    sync.Once
}

var _ kube.API = (*Cluster)(nil)

// Name is "kubernetes".
func (c *Cluster) Name() string { return "kubernetes" }

// Endpoint is the API's host:port: n0's address, port 6443.
func (c *Cluster) Endpoint() string {
	return netip.AddrPortFrom(c.nodes[0].node.Addr(), kubeAPIPort).String()
}

// Namespace is "locksuite", made at start.
func (c *Cluster) Namespace() string { return apiserver.Namespace }

// Nodes are the cluster's nodes (network namespaces), by index: node i is
// the Kubernetes node named Nodes()[i].Name(), "n<i>". n0 also runs the
// control plane. A pod reaches a listener made with Listen on a node's
// Addr; Dial connects from a node into the cluster.
func (c *Cluster) Nodes() []*nodes.Node {
	out := make([]*nodes.Node, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.node
	}
	return out
}

// Network is the nodes' network, for faults between nodes (Inject).
func (c *Cluster) Network() *nodes.Network { return c.nw }

// Members are the cluster's processes: etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler and, for each node, "node-n<i>",
// its holder (PID 1 of the node, parent of its containerd and kubelet; see
// node.go).
func (c *Cluster) Members() []*servers.Member { return append([]*servers.Member(nil), c.members...) }

// Dir is the cluster's directory, which Stop removes: the logs of its
// processes (<name>.log, and n<i>/containerd.log, n<i>/kubelet.log).
func (c *Cluster) Dir() string { return c.dir }

// DriverUser is a user of every Cluster with no permission until
// a RoleBinding grants it one (RestConfigAs): the least privilege a
// --kubernetes driver needs is checked with it.
const DriverUser = "locksuite-driver"

// RestConfigAs is RestConfig for user, one of DriverUser and the
// cluster's components ("system:kube-scheduler", "system:node:n0", ...), or
// nil for another user.
func (c *Cluster) RestConfigAs(user string) *rest.Config {
	t, ok := c.tokens[user]
	if !ok {
		return nil
	}
	rc := c.RestConfig()
	rc.BearerToken = t
	return rc
}

// RestConfig authenticates as the user "locksuite" (group
// system:masters), trusts the cluster's test CA and dials through the
// network.
func (c *Cluster) RestConfig() *rest.Config {
	return &rest.Config{
		Host:        "https://" + c.Endpoint(),
		BearerToken: c.token,
		// The server's certificate is for 127.0.0.1 (servers.NewPKI).
		TLSClientConfig: rest.TLSClientConfig{CAFile: c.ca, ServerName: "127.0.0.1"},
		UserAgent:       "locksuite",
		Dial:            c.nw.Dial,
	}
}

// kubeNodeTools are the programs a node runs besides kubelet, with the
// Debian package of each.
var kubeNodeTools = []struct{ bin, pkg string }{
	{"containerd", "containerd"}, {"containerd-shim-runc-v2", "containerd"}, {"ctr", "containerd"}, {"runc", "runc"},
}

// kubeCNIPlugins are the CNI plugins the node's network uses.
var kubeCNIPlugins = []string{"bridge", "host-local", "loopback"}

// kubeCNIDir is the directory of the CNI plugins: Debian's
// containernetworking-plugins installs them in /usr/lib/cni, the upstream
// release in /opt/cni/bin.
func kubeCNIDir() (string, error) {
	for _, d := range []string{"/usr/lib/cni", "/opt/cni/bin"} {
		ok := true
		for _, p := range kubeCNIPlugins {
			if _, err := os.Stat(filepath.Join(d, p)); err != nil {
				ok = false
			}
		}
		if ok {
			return d, nil
		}
	}
	return "", fmt.Errorf("no CNI plugins %v in /usr/lib/cni or /opt/cni/bin", kubeCNIPlugins)
}

// kubeClusterBinaries finds every program the cluster runs, or says what is
// missing and how to get it.
func kubeClusterBinaries() (map[string]string, string, error) {
	bins := map[string]string{}
	for _, comp := range kube.Components {
		p, err := kube.Binary(comp)
		if err != nil {
			return nil, "", &servers.Unavailable{Backend: "kubernetes", Err: err, Fix: "run ci/setup.sh (it builds kube-apiserver, kubelet, kube-controller-manager and kube-scheduler " + kube.Version + " in one go build), or set LOCKSUITE_KUBE_APISERVER, LOCKSUITE_KUBELET, LOCKSUITE_KUBE_CONTROLLER_MANAGER and LOCKSUITE_KUBE_SCHEDULER to binaries"}
		}
		bins[comp] = p
	}
	for _, t := range kubeNodeTools {
		p, err := exec.LookPath(t.bin)
		if err != nil {
			return nil, "", &servers.Unavailable{Backend: "kubernetes", Err: err, Fix: "apt-get install " + t.pkg}
		}
		bins[t.bin] = p
	}
	cni, err := kubeCNIDir()
	if err != nil {
		return nil, "", &servers.Unavailable{Backend: "kubernetes", Err: err, Fix: "apt-get install containernetworking-plugins"}
	}
	return bins, cni, nil
}

// Start starts a Kubernetes cluster of n nodes (1 to 16) and
// returns once every node is Ready, has the pause image, and the namespace
// "locksuite" exists. It needs root (namespaces, mounts, cgroups), the
// binaries of kube.Components (ci/setup.sh builds them), Debian's
// containerd, runc and containernetworking-plugins, and the go command (it
// builds the pause program); without one of them it fails with an
// *Unavailable that names the fix. Before it starts, it removes what
// clusters of dead processes left (RemoveStale).
//
// The cluster lives in a nodes.Network of n nodes, n0 … n(n-1). n0's
// network namespace holds the control plane: an etcd process (this binary
// re-run) on 127.0.0.1:2379, kube-apiserver on n0's address, port 6443
// (configured as kube.StartAPIServer's, with one static token per component
// and node and for DriverUser, and authorization by the Node
// authorizer and RBAC instead of AlwaysAllow), kube-controller-manager
// (each controller as its own service account) and kube-scheduler (no
// leader election). Every node i runs a holder: PID 1 of new PID, mount and UTS
// namespaces in the node's network namespace (node.go), parent of a
// containerd of the node's own (config, root, state and socket in the
// cluster's directory; CRI on; overlayfs; runc) and of kubelet (node name
// n<i>, cgroupfs driver under a cgroup /locksuite-kube-… of the node's
// own, failCgroupV1 false, anonymous access to its API allowed, no
// registry pulls: every image is imported). Node i's pods get addresses in
// PodSubnet(i) on the bridge cni0 of its namespace (bridge and
// host-local CNI plugins, no masquerade). A pod's routes lead to the nodes'
// network and to 10.78.0.0/16 through its node's cni0; every node routes
// the other nodes' pod subnets to them over the network, and neither has a
// default route: a pod reaches only the nodes' addresses and other pods. There is no
// kube-proxy and no cluster DNS: pods reach each other by address.
//
// The nodes see fixed values of the kernel settings kubelet would
// otherwise change for the whole machine (vm.overcommit_memory,
// kernel.panic, kernel.panic_on_oops, …): the host's stay as they are.
func Start(ctx context.Context, n int) (*Cluster, error) {
	if n < 1 || n > kubeMaxNodes {
		return nil, fmt.Errorf("kubecluster: Start(%d): a cluster has 1 to %d nodes", n, kubeMaxNodes)
	}
	if err := nodes.Check(); err != nil {
		return nil, &servers.Unavailable{Backend: "kubernetes", Err: err, Fix: "run as root"}
	}
	bins, cniDir, err := kubeClusterBinaries()
	if err != nil {
		return nil, err
	}
	if _, err := RemoveStale(); err != nil {
		return nil, &servers.Unavailable{Backend: "kubernetes", Err: err, Fix: "remove the cgroups locksuite-kube-* of dead runs by hand"}
	}
	dir, err := tempdir.New("", "locksuite-kubecluster-")
	if err != nil {
		return nil, &servers.Unavailable{Backend: "kubernetes", Err: err, Fix: "a writable temporary directory"}
	}
	c := &Cluster{dir: dir, token: servers.RandomSecret()}
	fail := func(err error, fix string) (*Cluster, error) {
		c.Stop()
		return nil, &servers.Unavailable{Backend: "kubernetes", Err: err, Fix: fix}
	}
	pause, err := kubeimage.Static(ctx, dir, kubeimage.PausePackage)
	if err != nil {
		return fail(err, "the go command and locksuite's module (the pause program is built from source)")
	}
	pauseTar := filepath.Join(dir, "pause.tar")
	if err := kubeimage.Write(pauseTar, PauseImage, pause); err != nil {
		return fail(err, "see the error")
	}
	if c.nw, err = nodes.New(ctx, n); err != nil {
		return fail(err, "see the error")
	}
	for _, nd := range c.nw.Nodes() {
		c.nodes = append(c.nodes, &kubeNode{node: nd, dir: filepath.Join(dir, nd.Name())})
	}
	n0 := c.nodes[0].node
	users := []struct{ user, group string }{
		{"locksuite", "system:masters"},
		{"system:kube-controller-manager", ""},
		{"system:kube-scheduler", ""},
		{DriverUser, ""},
	}
	for _, kn := range c.nodes {
		users = append(users, struct{ user, group string }{"system:node:" + kn.node.Name(), "system:nodes"})
	}
	tokens := map[string]string{}
	c.tokens = tokens
	var lines []string
	for _, u := range users {
		t := c.token
		if u.user != "locksuite" {
			t = servers.RandomSecret()
		}
		tokens[u.user] = t
		lines = append(lines, fmt.Sprintf("%s,%s,%s,%q", t, u.user, u.user, u.group))
	}
	f, err := apiserver.NewFiles(dir, lines...)
	if err != nil {
		return fail(err, "a writable temporary directory and a working crypto/rand")
	}
	c.ca = f.Certs.CA
	// kubeconfig writes the kubeconfig of user, for a process on a node.
	kubeconfig := func(user string) (string, error) {
		cfg := clientcmdapi.NewConfig()
		cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://" + c.Endpoint(), CertificateAuthority: c.ca, TLSServerName: "127.0.0.1"}
		cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: tokens[user]}
		cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
		cfg.CurrentContext = "c"
		p := filepath.Join(dir, user+".kubeconfig")
		return p, clientcmd.WriteToFile(*cfg, p)
	}
	add := func(m *servers.Member) error {
		c.members = append(c.members, m)
		return m.Run()
	}
	onN0 := func(name string, argv ...string) (*servers.Member, error) {
		m := servers.NewMember(name, c.Endpoint(), dir, func() (*servers.Proc, error) {
			return servers.Launch(n0.Start, name, dir, nil, nil, argv...)
		})
		return m, add(m)
	}

	// etcd: this binary again, as a one-member cluster (etcd.StartMember).
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", kubeEtcdPort)
	if err := add(servers.NewMember("etcd", fmt.Sprintf("127.0.0.1:%d", kubeEtcdPort), dir, func() (*servers.Proc, error) {
		peer := fmt.Sprintf("http://127.0.0.1:%d", kubeEtcdPort+1)
		return etcd.StartMember(n0.Start, "etcd", dir, etcd.MemberSpec{
			Name: "etcd", Dir: filepath.Join(dir, "etcd"), Client: etcdURL, Peer: peer,
			InitialCluster: "etcd=" + peer, Token: "locksuite-kube"})
	})); err != nil {
		return fail(err, "see the etcd error")
	}
	// The server reaches kubelets (logs, exec) at their InternalIP: its
	// default tries a node's name first, through the host's resolver,
	// which the nodes cannot reach.
	// A cluster's authorization, not the single server's AlwaysAllow: the
	// kubelets by the Node authorizer, the rest by RBAC's bootstrap roles
	// (system:masters for "locksuite").
	api, err := onN0("kube-apiserver", append(apiserver.Argv(bins["kube-apiserver"], etcdURL, n0.Addr().String(), kubeAPIPort, dir, f, "Node,RBAC"),
		"--kubelet-preferred-address-types=InternalIP")...)
	if err != nil {
		return fail(err, "check that "+bins["kube-apiserver"]+" runs")
	}
	hc, err := rest.HTTPClientFor(c.RestConfig())
	if err != nil {
		return fail(err, "a readable test CA")
	}
	defer hc.CloseIdleConnections()
	if err := c.wait(ctx, api.Proc(), 2*time.Minute, func(ctx context.Context) error {
		return apiserver.Ready(ctx, hc, "https://"+c.Endpoint())
	}); err != nil {
		return fail(err, "see the logs in "+dir)
	}
	if err := apiserver.CreateNamespace(ctx, c.RestConfig()); err != nil {
		return fail(err, "see kube-apiserver.log in "+dir)
	}
	kcmConfig, err1 := kubeconfig("system:kube-controller-manager")
	schedConfig, err2 := kubeconfig("system:kube-scheduler")
	if err := errors.Join(err1, err2); err != nil {
		return fail(err, "a writable temporary directory")
	}
	if _, err := onN0("kube-controller-manager", bins["kube-controller-manager"],
		"--kubeconfig="+kcmConfig, "--leader-elect=false",
		"--bind-address=127.0.0.1", "--cert-dir="+filepath.Join(dir, "kcm-certs"),
		"--root-ca-file="+c.ca, "--controllers=*",
		// Each controller as its own service account, with its RBAC role
		// (as kubeadm runs it): the garbage collector may delete pods.
		"--use-service-account-credentials=true", "--service-account-private-key-file="+f.SAKey,
		"--profiling=false"); err != nil {
		return fail(err, "check that "+bins["kube-controller-manager"]+" runs")
	}
	if _, err := onN0("kube-scheduler", bins["kube-scheduler"],
		"--kubeconfig="+schedConfig, "--leader-elect=false",
		"--bind-address=127.0.0.1", "--cert-dir="+filepath.Join(dir, "scheduler-certs"),
		"--profiling=false"); err != nil {
		return fail(err, "check that "+bins["kube-scheduler"]+" runs")
	}

	for i, kn := range c.nodes {
		if err := c.routePods(ctx, i); err != nil {
			return fail(err, "see the error")
		}
		if kn.cgroup, err = newKubeCgroup(); err != nil {
			return fail(fmt.Errorf("make %s's cgroup: %w", kn.node.Name(), err), "root, and cgroups mounted under /sys/fs/cgroup")
		}
		config, err := kubeconfig("system:node:" + kn.node.Name())
		if err != nil {
			return fail(err, "a writable temporary directory")
		}
		spec, err := kn.spec(i, bins, cniDir, config, c.nw.Subnet())
		if err != nil {
			return fail(err, "a writable temporary directory")
		}
		kn.holder = servers.NewMember("node-"+kn.node.Name(), kn.node.Addr().String(), dir, func() (*servers.Proc, error) {
			return servers.StartSelfMember(func(cmd *exec.Cmd) error {
				cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS
				return kn.node.Start(cmd)
			}, "node-"+kn.node.Name(), dir, kubeNodeEnv, spec)
		})
		if err := add(kn.holder); err != nil {
			return fail(err, "root (new PID and mount namespaces)")
		}
	}
	for _, kn := range c.nodes {
		// The node's containerd serves once its kubelet starts: import
		// the pause image before the first pod needs it.
		if err := c.wait(ctx, kn.holder.Proc(), time.Minute, func(ctx context.Context) error {
			if _, err := os.Stat(filepath.Join(kn.dir, "kubelet.log")); err != nil {
				return fmt.Errorf("%s: kubelet not started yet", kn.node.Name())
			}
			return nil
		}); err != nil {
			return fail(err, "see node-"+kn.node.Name()+".log and "+kn.node.Name()+"/containerd.log in "+dir)
		}
		if err := kn.importImage(ctx, pauseTar); err != nil {
			return fail(err, "see "+kn.node.Name()+"/containerd.log in "+dir)
		}
	}
	cs, err := corev1client.NewForConfig(c.RestConfig())
	if err != nil {
		return fail(err, "a readable test CA")
	}
	for _, kn := range c.nodes {
		name := kn.node.Name()
		if err := c.wait(ctx, kn.holder.Proc(), 3*time.Minute, func(ctx context.Context) error {
			n, err := cs.Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady {
					if cond.Status == corev1.ConditionTrue {
						return nil
					}
					return fmt.Errorf("node %s not ready: %s", name, cond.Message)
				}
			}
			return fmt.Errorf("node %s has no Ready condition yet", name)
		}); err != nil {
			return fail(err, "see "+name+"/kubelet.log in "+dir)
		}
	}
	return c, nil
}

// wait is waitReady on p that also ends, with its error, as soon as any of
// the cluster's processes has exited.
func (c *Cluster) wait(ctx context.Context, p *servers.Proc, timeout time.Duration, check func(context.Context) error) error {
	var dead error
	err := servers.WaitReady(ctx, p, timeout, func(ctx context.Context) error {
		for _, m := range c.members {
			if dead = m.Exited(); dead != nil {
				return nil
			}
		}
		return check(ctx)
	})
	if dead != nil {
		return dead
	}
	return err
}

// routePods routes, in node i's namespace, every other node's pod subnet to
// that node, and lets the node forward: the pods of different nodes reach
// each other, and nothing else is routed.
func (c *Cluster) routePods(ctx context.Context, i int) error {
	kn := c.nodes[i]
	cmds := [][]string{{"sysctl", "-q", "-w", "net.ipv4.ip_forward=1"}}
	for j, other := range c.nodes {
		if j != i {
			cmds = append(cmds, []string{"ip", "route", "add", PodSubnet(j).String(), "via", other.node.Addr().String()})
		}
	}
	for _, argv := range cmds {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := kn.node.Start(cmd); err != nil {
			return err
		}
		if err := cmd.Wait(); err != nil {
			return fmt.Errorf("%s: %v: %w: %s", kn.node.Name(), argv, err, bytes.TrimSpace(out.Bytes()))
		}
	}
	return nil
}

// spec writes node i's configuration files (containerd's, the CNI
// network's, kubelet's) into its directory and returns what its holder is
// told.
func (n *kubeNode) spec(i int, bins map[string]string, cniDir, kubeconfig string, nodesSubnet netip.Prefix) (kubeNodeSpec, error) {
	netd := filepath.Join(n.dir, "cni", "net.d")
	if err := os.MkdirAll(netd, 0o755); err != nil {
		return kubeNodeSpec{}, err
	}
	sock := n.containerdSocket()
	// restrict_oom_score_adj: no container's OOM score goes below
	// containerd's own (0). kubelet asks -998 for every pod's sandbox, which
	// needs CAP_SYS_RESOURCE, and some sandboxes and CI runners (this
	// project's machine included) drop it: runc then fails with
	// "failed to update /proc/self/oom_score_adj: Permission denied".
	containerd := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  enable_selinux = false
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = %q
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
    max_conf_num = 1
`, filepath.Join(n.dir, "containerd-root"), filepath.Join(n.dir, "containerd-state"), sock, PauseImage, bins["runc"], cniDir, netd)
	cni := fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "locksuite",
  "plugins": [{
    "type": "bridge",
    "bridge": "cni0",
    "isGateway": true,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "dataDir": %q,
      "routes": [{"dst": %q}, {"dst": %q}]}
  }]
}
`, PodSubnet(i), filepath.Join(n.dir, "cni", "ipam"), nodesSubnet, kubePodNetwork)
	// The kubelet's configuration (KubeletConfiguration v1beta1): JSON is
	// YAML. Images are never collected (they are imported, not pulled)
	// and the eviction thresholds are low, so that a busy disk or memory
	// of the machine does not evict the tests' pods.
	kubelet := fmt.Sprintf(`{
  "apiVersion": "kubelet.config.k8s.io/v1beta1",
  "kind": "KubeletConfiguration",
  "port": %d,
  "readOnlyPort": 0,
  "healthzBindAddress": "127.0.0.1",
  "authentication": {"anonymous": {"enabled": true}, "webhook": {"enabled": false}},
  "authorization": {"mode": "AlwaysAllow"},
  "cgroupDriver": "cgroupfs",
  "cgroupRoot": %q,
  "failCgroupV1": false,
  "failSwapOn": false,
  "containerRuntimeEndpoint": %q,
  "podLogsDir": %q,
  "resolvConf": %q,
  "imageGCHighThresholdPercent": 100,
  "imageGCLowThresholdPercent": 99,
  "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%%", "nodefs.inodesFree": "1%%", "imagefs.available": "1%%"},
  "serializeImagePulls": false,
  "rotateCertificates": false,
  "serverTLSBootstrap": false
}
`, kubeletPort, "/"+n.cgroup, "unix://"+sock, filepath.Join(n.dir, "pods"), filepath.Join(n.dir, "resolv.conf"))
	for name, content := range map[string]string{
		"containerd.toml":                 containerd,
		"cni/net.d/10-locksuite.conflist": cni,
		"kubelet.json":                    kubelet,
		// Pods get no name server: nothing outside the cluster answers.
		"resolv.conf": "",
	} {
		if err := os.WriteFile(filepath.Join(n.dir, name), []byte(content), 0o644); err != nil {
			return kubeNodeSpec{}, err
		}
	}
	return kubeNodeSpec{
		Hostname: n.node.Name(),
		Dir:      n.dir,
		// kubelet sets these for the whole machine unless they already
		// have its values (container_manager_linux.go setupKernelTunables).
		Sysctls: map[string]string{
			"vm/overcommit_memory": "1", "vm/panic_on_oom": "0",
			"kernel/panic": "10", "kernel/panic_on_oops": "1",
			"kernel/keys/root_maxkeys": "1000000", "kernel/keys/root_maxbytes": "25000000",
		},
		Procs: []kubeNodeProc{
			{Name: "containerd", Argv: []string{bins["containerd"], "--config", filepath.Join(n.dir, "containerd.toml")}, Socket: sock},
			{Name: "kubelet", Argv: []string{bins["kubelet"],
				"--config=" + filepath.Join(n.dir, "kubelet.json"),
				"--kubeconfig=" + kubeconfig,
				"--hostname-override=" + n.node.Name(),
				"--node-ip=" + n.node.Addr().String(),
				"--root-dir=" + filepath.Join(n.dir, "kubelet"),
			}},
		},
	}, nil
}

// Stop tears the cluster down: the nodes' holders first (SIGTERM, SIGKILL
// after 10 s; the kernel then kills every process of a node: kubelet,
// containerd, the shims and the containers, and frees the node's mounts
// and its pods' network namespaces), then kube-scheduler,
// kube-controller-manager, kube-apiserver and etcd, the network (the
// nodes' namespaces, with the bridges cni0, the pods' veths and every
// firewall rule made in them), the cgroups, and the directory. It is
// idempotent.
func (c *Cluster) Stop() error {
	var err error
	c.once.Do(func() {
		for i := len(c.members) - 1; i >= 0; i-- {
			c.members[i].End(syscall.SIGTERM, kubeNodeGrace)
		}
		var errs []error
		if c.nw != nil {
			errs = append(errs, c.nw.Close())
		}
		for _, n := range c.nodes {
			if n.cgroup != "" {
				errs = append(errs, removeKubeCgroup(n.cgroup))
			}
		}
		errs = append(errs, os.RemoveAll(c.dir))
		err = errors.Join(errs...)
	})
	return err
}
