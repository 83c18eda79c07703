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

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	batchv1client "k8s.io/client-go/kubernetes/typed/batch/v1"
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
	"github.com/locksuite/locksuite/harness/services/kube/kubecluster"
	"github.com/locksuite/locksuite/internal/docblock"
)

// TestKubernetesRun runs `locksuite run --kubernetes` on a cluster of two
// nodes that the harness starts (kubecluster.Start): etcd, Redis
// (an image of Debian's redis-server) and NATS as pods under the supervisor that
// crashes them for server-crash and stops them for server-stall, the chaos workers as pods spread over the
// nodes, the driver (the CLI, the
// same static binary as the pods') in node n0's network namespace, outside
// the cluster, with the cluster's kubeconfig in KUBECONFIG. It checks that
// the verdicts are those of the same run on this machine, that the chaos
// rows name the workers' nodes (both nodes), and that no object of the run
// is left in the namespace.
func TestKubernetesRun(t *testing.T) {
	ctx, c, bin, image := startKubeTest(t, 10*time.Minute)
	dir := t.TempDir()
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
func awaitWorkerPods(ctx context.Context, t *testing.T, c *kubecluster.Cluster) {
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
func runsLeft(ctx context.Context, t *testing.T, c *kubecluster.Cluster) ([]string, []time.Duration) {
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
func writeKubeconfig(t *testing.T, c *kubecluster.Cluster, dir string, rc *rest.Config) string {
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
// kubecluster.DriverUser, whom the binding names, may not list pods before
// it, and returns that user's configuration.
func driverRole(ctx context.Context, t *testing.T, c *kubecluster.Cluster) *rest.Config {
	t.Helper()
	rc := c.RestConfigAs(kubecluster.DriverUser)
	driver, err := corev1client.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := driver.Pods(c.Namespace()).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("%s lists pods before the Role is bound: %v, want forbidden (is the cluster's authorization RBAC?)", kubecluster.DriverUser, err)
	}
	block := docblock.Find(t, "../../docs/kubernetes.md", "", "yaml")
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
			if len(b.Subjects) != 1 || b.Subjects[0].Name != kubecluster.DriverUser {
				t.Fatalf("the RoleBinding of docs/kubernetes.md binds %v, want the user %s", b.Subjects, kubecluster.DriverUser)
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
func assertNothingLeft(ctx context.Context, t *testing.T, c *kubecluster.Cluster) {
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

// TestIndexedJobShards applies the Indexed Job and the merge pod of
// docs/kubernetes.md ("The matrix in shards") to a cluster of two nodes
// that the harness starts, as written there but for the image, the results
// volume (a hostPath: the nodes are on this machine, and the cluster has no
// volume provisioner) and a shorter list of scenarios, then checks that
// each pod ran its own shard, that the merge pod's verdicts and exit status
// are those of the same run unsharded on this machine, and that nothing of
// them is left once they are deleted.
func TestIndexedJobShards(t *testing.T) {
	ctx, c, bin, image := startKubeTest(t, 8*time.Minute)
	job, merger := shardManifests(t)

	// What the test changes: the image, the volume, the scenarios.
	results := filepath.Join(t.TempDir(), "results")
	if err := os.Mkdir(results, 0o755); err != nil {
		t.Fatal(err)
	}
	scenarios := []string{"--scenarios", "baseline,control,deterministic-pause,release-after-expiry,contract", "--duration", "500ms"}
	for _, spec := range []*corev1.PodSpec{&job.Spec.Template.Spec, &merger.Spec} {
		for i := range spec.Volumes {
			if spec.Volumes[i].Name == "results" {
				spec.Volumes[i].VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: results}}
			}
		}
		spec.Containers[0].Image = image
		spec.Containers[0].ImagePullPolicy = corev1.PullNever
	}
	shard := &job.Spec.Template.Spec.Containers[0]
	shard.Args = append(shard.Args, scenarios...)
	n := int(*job.Spec.Completions)
	if i := slices.Index(shard.Args, "--shard"); i < 0 || shard.Args[i+1] != fmt.Sprintf("job/%d", n) {
		t.Fatalf("the Job's args %q: want --shard job/%d, its completions", shard.Args, n)
	}

	jobs, err := batchv1client.NewForConfig(c.RestConfig())
	if err != nil {
		t.Fatal(err)
	}
	pods, err := corev1client.NewForConfig(c.RestConfig())
	if err != nil {
		t.Fatal(err)
	}
	ns := c.Namespace()
	t0 := time.Now()
	if _, err := jobs.Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatalf("apply the Job of docs/kubernetes.md: %v", err)
	}
	defer func() {
		bg := metav1.DeletePropagationBackground
		jobs.Jobs(ns).Delete(context.Background(), job.Name, metav1.DeleteOptions{PropagationPolicy: &bg})
		pods.Pods(ns).Delete(context.Background(), merger.Name, metav1.DeleteOptions{})
	}()
	var finished string
	for finished == "" {
		if ctx.Err() != nil {
			t.Fatalf("the Job did not finish: %v", ctx.Err())
		}
		time.Sleep(time.Second)
		j, err := jobs.Jobs(ns).Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, cond := range j.Status.Conditions {
			if (cond.Type == batchv1.JobComplete || cond.Type == batchv1.JobFailed) && cond.Status == corev1.ConditionTrue {
				finished = string(cond.Type)
			}
		}
	}
	t.Logf("the Job: %s in %v", finished, time.Since(t0).Round(time.Millisecond))
	shardPods, err := pods.Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job.Name})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range shardPods.Items {
		t.Logf("pod %s (index %s) on %s: %s", p.Name, p.Labels["batch.kubernetes.io/job-completion-index"], p.Spec.NodeName, p.Status.Phase)
	}
	if len(shardPods.Items) != n {
		t.Errorf("%d pods of the Job, want %d (one per shard, none run again)", len(shardPods.Items), n)
	}
	for i := range n {
		rows := readRowsFile(t, filepath.Join(results, fmt.Sprintf("shard-%d.json", i)))
		for _, r := range rows {
			if want := fmt.Sprintf("%d/%d", i+1, n); r.Shard != want {
				t.Errorf("pod %d wrote a row of shard %q, want %s", i, r.Shard, want)
			}
		}
	}

	if _, err := pods.Pods(ns).Create(ctx, merger, metav1.CreateOptions{}); err != nil {
		t.Fatalf("apply the merge pod of docs/kubernetes.md: %v", err)
	}
	var phase corev1.PodPhase
	for phase != corev1.PodSucceeded && phase != corev1.PodFailed {
		if ctx.Err() != nil {
			t.Fatalf("the merge pod did not end: %v", ctx.Err())
		}
		time.Sleep(500 * time.Millisecond)
		p, err := pods.Pods(ns).Get(ctx, merger.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		phase = p.Status.Phase
	}
	log, err := pods.Pods(ns).GetLogs(merger.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	t.Logf("merge pod: %s (%v)\n%s", phase, err, log)

	// The same run, unsharded, on this machine.
	args := append([]string{"run", "--backends", "etcd", "--progress", "off", "--keep-broken", "off"}, scenarios...)
	localRows, localErr := runKubeCLI(t, bin, t.TempDir(), "local", nil, args)
	if (localErr == nil) != (phase == corev1.PodSucceeded) {
		t.Errorf("exit: %v here, merge pod %s", localErr, phase)
	}
	if (localErr == nil) != (finished == string(batchv1.JobComplete)) {
		t.Errorf("exit: %v here, the Job %s", localErr, finished)
	}
	verdicts := func(rows []report.Row) string {
		var v []string
		for _, r := range rows {
			v = append(v, fmt.Sprintf("%s %s fencing=%v: %s", r.Backend, r.Scenario, r.Fencing, r.Verdict))
		}
		slices.Sort(v)
		return strings.Join(v, "\n")
	}
	merged := readRowsFile(t, filepath.Join(results, "merged.json"))
	if a, b := verdicts(merged), verdicts(localRows); a != b || len(merged) == 0 {
		t.Errorf("merged on the cluster:\n%s\nhere:\n%s", a, b)
	}
	if _, err := os.Stat(filepath.Join(results, "report", "index.html")); err != nil {
		t.Errorf("the merge pod wrote no report: %v", err)
	}

	// kubectl delete -f: the Job, its pods and the merge pod go.
	bg := metav1.DeletePropagationBackground
	err1 := jobs.Jobs(ns).Delete(ctx, job.Name, metav1.DeleteOptions{PropagationPolicy: &bg})
	err2 := pods.Pods(ns).Delete(ctx, merger.Name, metav1.DeleteOptions{})
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	for {
		left, err := pods.Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(left.Items) == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%d pods left after the Job and the merge pod were deleted", len(left.Items))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// shardManifests are the Job and the Pod of docs/kubernetes.md's block
// after "<!-- manifest: shards", parsed strictly.
func shardManifests(t *testing.T) (*batchv1.Job, *corev1.Pod) {
	t.Helper()
	parts := strings.Split(docblock.Find(t, "../../docs/kubernetes.md", "<!-- manifest: shards", "yaml"), "\n---\n")
	if len(parts) != 2 {
		t.Fatal(`docs/kubernetes.md: no yaml block of a Job and a Pod after "<!-- manifest: shards"`)
	}
	var job batchv1.Job
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict([]byte(parts[0]), &job); err != nil || job.Kind != "Job" {
		t.Fatalf("docs/kubernetes.md's shards Job (%s): %v", job.Kind, err)
	}
	if err := yaml.UnmarshalStrict([]byte(parts[1]), &pod); err != nil || pod.Kind != "Pod" {
		t.Fatalf("docs/kubernetes.md's merge Pod (%s): %v", pod.Kind, err)
	}
	return &job, &pod
}

// startKubeTest starts a cluster of two nodes for a test (skipped with
// the reason where it cannot run, and with -short), stopped at the test's
// end, and imports the CLI as image into its nodes; bin is the same static
// CLI, to run here. ctx ends timeout after the image is imported, or with
// the test: the static build, minutes long on a cold build cache (a new
// machine), is bounded by go test's -timeout only.
func startKubeTest(t *testing.T, timeout time.Duration) (ctx context.Context, c *kubecluster.Cluster, bin, image string) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a Kubernetes cluster")
	}
	start, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := kubecluster.Start(start, 2)
	var u *servers.Unavailable
	if errors.As(err, &u) {
		t.Skipf("no Kubernetes cluster here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	image = "localhost/locksuite/cli:kubernetes-test"
	t0 := time.Now()
	if bin, err = c.ImportProgram(context.Background(), "github.com/locksuite/locksuite/cmd/locksuite", image); err != nil {
		t.Fatal(err)
	}
	t.Logf("the CLI built statically and imported in %v", time.Since(t0).Round(time.Millisecond))
	ctx, cancel = context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return ctx, c, bin, image
}
