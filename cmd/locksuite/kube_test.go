package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	rbacv1client "k8s.io/client-go/kubernetes/typed/rbac/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/locksuite/locksuite/harness/kubeimage"
	"github.com/locksuite/locksuite/harness/kuberun"
	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/harness/servers"
)

// TestKubernetesRun runs `locksuite run --kubernetes` on a cluster of two
// nodes that the harness starts (servers.StartKubeCluster): etcd, Redis
// (an image of Debian's redis-server) and NATS as pods under the supervisor that
// crashes them for server-crash and stops them for server-stall, the chaos workers as pods spread over the
// nodes, the driver (the CLI, the
// same static binary as the pods') in node n0's network namespace, outside
// the cluster, with the cluster's kubeconfig in KUBECONFIG. It checks that
// the verdicts are those of the same run on this machine, that the chaos
// rows name the workers' nodes (both nodes), and that no object of the run
// is left in the namespace.
func TestKubernetesRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Kubernetes cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := servers.StartKubeCluster(ctx, 2)
	var u *servers.Unavailable
	if errors.As(err, &u) {
		t.Skipf("no Kubernetes cluster here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()

	dir := t.TempDir()
	const image = "localhost/locksuite/cli:kubernetes-test"
	bin, err := c.ImportProgram(ctx, "github.com/locksuite/locksuite/cmd/locksuite", image)
	if err != nil {
		t.Fatal(err)
	}
	// Redis: Debian's redis-server and its libraries, under the official
	// image's name that the Redis pod runs.
	redis, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skipf("no redis-server (apt-get install redis-server): %v", err)
	}
	files, err := kubeimage.Dynamic(ctx, redis, "/usr/bin/redis-server")
	if err != nil {
		t.Fatal(err)
	}
	redisTar := filepath.Join(dir, "redis.tar")
	if err := kubeimage.WriteTree(redisTar, kuberun.RedisImage, files, "redis-server"); err != nil {
		t.Fatal(err)
	}
	if err := c.ImportImage(ctx, redisTar); err != nil {
		t.Fatal(err)
	}
	kubeconfig := writeKubeconfig(t, c, dir, driverRole(ctx, t, c))

	// One run at a time (--parallel 1): on a small machine, runs beside
	// the pods' start-up (kubelet, containerd, runc) starved Redis's
	// in-process clients past its 200 ms lease in a fault-free baseline
	// (1 lost of 16 writes, 4 overlaps, with six runs at once on 2 cores): a
	// false alarm of the harness's own making.
	args := []string{"run", "--backends", "etcd,redis,nats-kv", "--scenarios", "baseline,deterministic-pause,pause-targeted,server-crash,server-stall",
		"--store", "etcd", "--parallel", "1", "--rows", "--progress", "off", "--keep-broken", "off"}
	// The same run on this machine, then on the cluster.
	localRows, localErr := runKubeCLI(t, bin, dir, "local", nil, args)
	t0 := time.Now()
	kubeRows, kubeErr := runKubeCLI(t, bin, dir, "kube", func(cmd *exec.Cmd) error {
		cmd.Env = append(cmd.Environ(), "KUBECONFIG="+kubeconfig)
		return c.Nodes()[0].Start(cmd) // outside the cluster, on the nodes' network
	}, append(args, "--kubernetes", "--image", image, "--namespace", c.Namespace()))
	t.Logf("the run on the cluster took %v", time.Since(t0).Round(time.Millisecond))
	if (localErr == nil) != (kubeErr == nil) {
		t.Errorf("exit: %v here, %v on the cluster", localErr, kubeErr)
	}
	verdicts := func(rows []report.Row) map[string]report.Verdict {
		m := map[string]report.Verdict{}
		for _, r := range rows {
			m[fmt.Sprintf("%s %s fencing=%v", r.Backend, r.Scenario, r.Fencing)] = r.Verdict
		}
		return m
	}
	if want, got := verdicts(localRows), verdicts(kubeRows); len(want) != 30 || fmt.Sprint(want) != fmt.Sprint(got) {
		t.Errorf("verdicts: %v here, %v on the cluster", want, got)
	}
	for _, r := range kubeRows {
		if (r.Scenario == "server-crash" || r.Scenario == "server-stall") && (r.Verdict == report.Skipped || r.Faults != 1) {
			t.Errorf("%s %s fencing=%v on the cluster: %s, %d faults (%s): want the pod's server crashed or stopped once", r.Backend, r.Scenario, r.Fencing, r.Verdict, r.Faults, r.Reason)
		}
		if r.Scenario != "pause-targeted" {
			if len(r.Nodes) != 0 {
				t.Errorf("%s %s fencing=%v: nodes %v for a run without workers", r.Backend, r.Scenario, r.Fencing, r.Nodes)
			}
			continue
		}
		if len(r.Nodes) != r.Workers || r.Workers == 0 {
			t.Errorf("%s pause-targeted fencing=%v: %d workers on nodes %v", r.Backend, r.Fencing, r.Workers, r.Nodes)
		}
		for _, n := range []string{"n0", "n1"} {
			if !slices.Contains(r.Nodes, n) {
				t.Errorf("%s pause-targeted fencing=%v: no worker on %s (nodes %v): not spread", r.Backend, r.Fencing, n, r.Nodes)
			}
		}
		if r.Faults == 0 {
			t.Errorf("%s pause-targeted fencing=%v: no pause struck", r.Backend, r.Fencing)
		}
	}
	assertNothingLeft(ctx, t, c)

	// Interrupted (SIGINT) while its workers run: nothing left. Killed
	// (SIGKILL): its objects stay until a later run, once their heartbeat
	// is stale, deletes them.
	long := []string{"run", "--kubernetes", "--image", image, "--namespace", c.Namespace(), "--backends", "etcd",
		"--scenarios", "pause-targeted", "--fencing", "off", "--chaos-duration", "60s", "--progress", "off", "--keep-broken", "off"}
	for _, sig := range []os.Signal{os.Interrupt, os.Kill} {
		cmd := exec.Command(bin, long...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "TMPDIR="+dir)
		if err := c.Nodes()[0].Start(cmd); err != nil {
			t.Fatal(err)
		}
		awaitWorkerPods(ctx, t, c)
		if sig == os.Kill {
			// Let the driver renew its heartbeat twice (every 5 s) before
			// it dies, so that its ConfigMap shows the renewal.
			time.Sleep(11 * time.Second)
		}
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		err := cmd.Wait()
		t.Logf("%v: %v\n%s", sig, err, stderr.String())
		if sig == os.Interrupt {
			assertNothingLeft(ctx, t, c)
			continue
		}
		killed, renewed := runsLeft(ctx, t, c)
		if len(killed) != 1 {
			t.Fatalf("after SIGKILL: runs left %v, want one", killed)
		}
		if renewed[0] < 5*time.Second {
			t.Errorf("the killed run's heartbeat was renewed %v after its ConfigMap was made, want at least 5 s (it ran %v)", renewed[0], 11*time.Second)
		}
		time.Sleep(kuberun.StaleAfter)
		next := exec.Command(bin, "run", "--kubernetes", "--image", image, "--namespace", c.Namespace(), "--backends", "etcd",
			"--scenarios", "baseline", "--fencing", "off", "--duration", "500ms", "--progress", "off", "--keep-broken", "off")
		var out bytes.Buffer
		next.Stdout, next.Stderr = &out, &out
		next.Env = cmd.Env
		if err := c.Nodes()[0].Start(next); err != nil {
			t.Fatal(err)
		}
		if err := next.Wait(); err != nil {
			t.Fatalf("the run after SIGKILL: %v\n%s", err, out.String())
		}
		if !bytes.Contains(out.Bytes(), []byte("stale runs (driver gone): "+killed[0])) {
			t.Errorf("the run after SIGKILL did not say it deleted %s:\n%s", killed[0], out.String())
		}
		assertNothingLeft(ctx, t, c)
	}
}

// awaitWorkerPods waits until a worker pod of a run runs in c.
func awaitWorkerPods(ctx context.Context, t *testing.T, c *servers.KubeCluster) {
	t.Helper()
	cs, err := corev1client.NewForConfig(c.RestConfig())
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		pods, err := cs.Pods(c.Namespace()).List(ctx, metav1.ListOptions{LabelSelector: kuberun.RoleLabel + "=worker"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if p.Status.Phase == "Running" {
				return
			}
		}
	}
	t.Fatal("no worker pod running after 2 minutes")
}

// runsLeft are the ids of the runs whose ConfigMap is in c's namespace,
// and how long after its creation each one's heartbeat was last renewed.
func runsLeft(ctx context.Context, t *testing.T, c *servers.KubeCluster) ([]string, []time.Duration) {
	t.Helper()
	cs, err := corev1client.NewForConfig(c.RestConfig())
	if err != nil {
		t.Fatal(err)
	}
	cms, err := cs.ConfigMaps(c.Namespace()).List(ctx, metav1.ListOptions{LabelSelector: kuberun.RunLabel})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	var renewed []time.Duration
	for _, cm := range cms.Items {
		ids = append(ids, cm.Labels[kuberun.RunLabel])
		hb, err := time.Parse(time.RFC3339, cm.Annotations[kuberun.HeartbeatAnnotation])
		if err != nil {
			t.Errorf("run %s: heartbeat %q: %v", cm.Name, cm.Annotations[kuberun.HeartbeatAnnotation], err)
		}
		renewed = append(renewed, hb.Sub(cm.CreationTimestamp.Time))
	}
	return ids, renewed
}

// runKubeCLI runs the CLI bin with args and --json, started with start (nil:
// on this machine), and returns its rows and its exit error.
func runKubeCLI(t *testing.T, bin, dir, name string, start func(*exec.Cmd) error, args []string) ([]report.Row, error) {
	t.Helper()
	out := filepath.Join(dir, name+".json")
	tmp := filepath.Join(dir, name+"-tmp")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append(args, "--json", out)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	if start == nil {
		start = (*exec.Cmd).Start
	}
	if err := start(cmd); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	t.Logf("%s run: %v\n%s\n%s", name, err, stdout.String(), stderr.String())
	b, rerr := os.ReadFile(out)
	if rerr != nil {
		t.Fatalf("%s run wrote no rows: %v", name, rerr)
	}
	var rows []report.Row
	if err := json.Unmarshal(b, &rows); err != nil {
		t.Fatal(err)
	}
	return rows, err
}

// writeKubeconfig writes a kubeconfig of c's user "locksuite" in dir.
func writeKubeconfig(t *testing.T, c *servers.KubeCluster, dir string, rc *rest.Config) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthority: rc.CAFile, TLSServerName: rc.ServerName}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: rc.BearerToken}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u", Namespace: c.Namespace()}
	cfg.CurrentContext = "c"
	p := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// driverRole applies the Role and RoleBinding of docs/kubernetes.md (its
// yaml block, as written) to c as its administrator, after checking that
// servers.KubeDriverUser, whom the binding names, may not list pods before
// it, and returns that user's configuration.
func driverRole(ctx context.Context, t *testing.T, c *servers.KubeCluster) *rest.Config {
	t.Helper()
	rc := c.RestConfigAs(servers.KubeDriverUser)
	driver, err := corev1client.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := driver.Pods(c.Namespace()).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("%s lists pods before the Role is bound: %v, want forbidden (is the cluster's authorization RBAC?)", servers.KubeDriverUser, err)
	}
	doc, err := os.ReadFile("../../docs/kubernetes.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "```yaml\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("docs/kubernetes.md has no yaml block")
	}
	admin, err := rbacv1client.NewForConfig(c.RestConfig())
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, part := range strings.Split(block, "\n---\n") {
		var obj metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(part), &obj); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, obj.Kind)
		switch obj.Kind {
		case "Role":
			var r rbacv1.Role
			if err := yaml.UnmarshalStrict([]byte(part), &r); err != nil {
				t.Fatal(err)
			}
			_, err = admin.Roles(c.Namespace()).Create(ctx, &r, metav1.CreateOptions{})
		case "RoleBinding":
			var b rbacv1.RoleBinding
			if err := yaml.UnmarshalStrict([]byte(part), &b); err != nil {
				t.Fatal(err)
			}
			if len(b.Subjects) != 1 || b.Subjects[0].Name != servers.KubeDriverUser {
				t.Fatalf("the RoleBinding of docs/kubernetes.md binds %v, want the user %s", b.Subjects, servers.KubeDriverUser)
			}
			_, err = admin.RoleBindings(c.Namespace()).Create(ctx, &b, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatalf("apply the %s of docs/kubernetes.md: %v", obj.Kind, err)
		}
	}
	if !slices.Equal(kinds, []string{"Role", "RoleBinding"}) {
		t.Fatalf("docs/kubernetes.md's yaml block has %v, want a Role and a RoleBinding", kinds)
	}
	return rc
}

// assertNothingLeft checks that no pod or ConfigMap of a locksuite run is
// left in c's namespace.
func assertNothingLeft(ctx context.Context, t *testing.T, c *servers.KubeCluster) {
	t.Helper()
	cs, err := corev1client.NewForConfig(c.RestConfig())
	if err != nil {
		t.Fatal(err)
	}
	sel := metav1.ListOptions{LabelSelector: kuberun.ManagedByLabel + "=locksuite"}
	pods, err1 := cs.Pods(c.Namespace()).List(ctx, sel)
	cms, err2 := cs.ConfigMaps(c.Namespace()).List(ctx, sel)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		t.Errorf("pod left: %s (%s)", p.Name, p.Status.Phase)
	}
	for _, cm := range cms.Items {
		t.Errorf("ConfigMap left: %s", cm.Name)
	}
}
