// Package kuberun runs a locksuite run's lock service and chaos workers as
// pods of a Kubernetes cluster, for locksuite run --kubernetes: the driver
// (this process, the one Ginkgo process that schedules the faults and
// checks the invariant) stays outside the cluster and reaches the pods by
// their addresses.
//
// Every object a Run creates is in its namespace, labelled
// app.kubernetes.io/managed-by=locksuite and locksuite.dev/run=<its id>, and
// owned (metadata.ownerReferences) by the Run's ConfigMap, whose annotation
// locksuite.dev/heartbeat the Run renews every few seconds. Close deletes
// them all; a driver killed before its Close leaves them to the next
// Start, which deletes every run whose heartbeat is older than StaleAfter
// (Sweep).
package kuberun

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"

	"github.com/locksuite/locksuite/harness/faults"
	"github.com/locksuite/locksuite/harness/worker"
	"github.com/locksuite/locksuite/internal/wait"
)

// The labels and annotation of a Run's objects.
const (
	ManagedByLabel      = "app.kubernetes.io/managed-by" // = "locksuite"
	RunLabel            = "locksuite.dev/run"            // = the Run's id
	RoleLabel           = "locksuite.dev/role"           // "etcd", "worker"
	GroupLabel          = "locksuite.dev/workers"        // the workers of one chaos run
	HeartbeatAnnotation = "locksuite.dev/heartbeat"      // RFC 3339, on the Run's ConfigMap
)

// StaleAfter is how old a Run's heartbeat must be for Sweep to delete it:
// a live Run renews it every heartbeatEvery, four times as often.
const (
	StaleAfter     = 20 * time.Second
	heartbeatEvery = 5 * time.Second
)

// The services' ports.
const (
	etcdPort  = 2379
	redisPort = 6379
	natsPort  = 4222
)

// RedisImage is the image of the Redis pod (StartRedis): the official
// image's name, whose redis-server is on PATH. The harness's test imports
// an image of Debian's redis-server under that name (kubeimage.Dynamic).
const RedisImage = "docker.io/library/redis:7"

// Run is one run's objects in a cluster: its ConfigMap (the owner of the
// rest), the lock service's pod, the workers' pods, and the Hub that the
// workers' supervisors connect to.
type Run struct {
	cs        *corev1client.CoreV1Client
	ns, image string
	id        string
	owner     metav1.OwnerReference
	hub       *worker.Hub
	advertise string // host:port the pods dial
	seq       atomic.Int64
	swept     []string
	stop      chan struct{}
	stopped   sync.WaitGroup
	once      sync.Once
}

// Start makes a Run in namespace ns of the cluster cfg reaches, whose pods
// run image (the locksuite image of this binary's version: the pods run
// this binary's etcd and worker, and speak its protocol). It first deletes
// the stale runs of ns (Sweep), then creates the Run's ConfigMap and
// listens for the workers' supervisors on every address of this machine,
// telling the pods the address this machine reaches the API server from.
func Start(ctx context.Context, cfg *rest.Config, ns, image string) (*Run, error) {
	cs, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	swept, err := Sweep(ctx, cs, ns)
	if err != nil {
		return nil, err
	}
	ip, err := sourceIP(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
	if err != nil {
		return nil, fmt.Errorf("kubernetes: listen for the workers: %w", err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	r := &Run{cs: cs, ns: ns, image: image, id: "locksuite-" + hex.EncodeToString(b), swept: swept, stop: make(chan struct{})}
	cm, err := cs.ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: r.id, Labels: r.labels(""), Annotations: map[string]string{HeartbeatAnnotation: now()},
	}}, metav1.CreateOptions{})
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("kubernetes: create the run's ConfigMap in namespace %q: %w", ns, err)
	}
	r.owner = metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: cm.Name, UID: cm.UID}
	r.hub = worker.NewHub(ln)
	r.advertise = net.JoinHostPort(ip.String(), strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	r.stopped.Add(1)
	go r.heartbeat()
	return r, nil
}

// ID is the Run's id: its ConfigMap's name and its objects' RunLabel.
func (r *Run) ID() string { return r.id }

// Swept are the ids of the stale runs Start deleted (Sweep).
func (r *Run) Swept() []string { return r.swept }

// Namespace is the Run's namespace.
func (r *Run) Namespace() string { return r.ns }

// now is the heartbeat's value.
func now() string { return time.Now().UTC().Format(time.RFC3339) }

func (r *Run) heartbeat() {
	defer r.stopped.Done()
	t := time.NewTicker(heartbeatEvery)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), heartbeatEvery)
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, HeartbeatAnnotation, now())
			_, _ = r.cs.ConfigMaps(r.ns).Patch(ctx, r.id, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{})
			cancel()
		}
	}
}

// labels are the labels of the Run's objects of role ("" for its
// ConfigMap).
func (r *Run) labels(role string) map[string]string {
	l := map[string]string{ManagedByLabel: "locksuite", RunLabel: r.id}
	if role != "" {
		l[RoleLabel] = role
	}
	return l
}

// sourceIP is the address of this machine that reaches cfg's API server:
// the pods reach the driver there (the driver is outside the cluster).
func sourceIP(cfg *rest.Config) (net.IP, error) {
	u, err := url.Parse(cfg.Host)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("kubernetes: the API server's address %q: not a URL", cfg.Host)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "443")
	}
	// A UDP "connection" sends nothing: the kernel picks the source
	// address of the route to the server.
	c, err := net.Dial("udp", host)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: no route to the API server %s: %w", host, err)
	}
	defer c.Close()
	ip := c.LocalAddr().(*net.UDPAddr).IP
	if ip.IsLoopback() {
		return nil, fmt.Errorf("kubernetes: this machine reaches the API server %s from a loopback address (%v), which pods cannot dial: run the driver where it reaches the API server over the network the pods reach", host, ip)
	}
	return ip, nil
}

// pod is a pod of the Run: its labels, its owner, the image, no restarts,
// /tmp and /data as emptyDir volumes, NODE_NAME and POD_IP from the
// downward API, then env.
func (r *Run) pod(name, role string, env []corev1.EnvVar, args []string) *corev1.Pod {
	dirs := []string{"tmp", "data"}
	var vols []corev1.Volume
	var mounts []corev1.VolumeMount
	for _, d := range dirs {
		vols = append(vols, corev1.Volume{Name: d, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		mounts = append(mounts, corev1.VolumeMount{Name: d, MountPath: "/" + d})
	}
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	zero := int64(0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: r.labels(role), OwnerReferences: []metav1.OwnerReference{r.owner}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &zero,
			AutomountServiceAccountToken:  new(bool),
			Volumes:                       vols,
			Containers: []corev1.Container{{
				Name: role, Image: r.image, ImagePullPolicy: corev1.PullIfNotPresent,
				Args:         args,
				Env:          append([]corev1.EnvVar{field("NODE_NAME", "spec.nodeName"), field("POD_IP", "status.podIP"), {Name: "TMPDIR", Value: "/tmp"}}, env...),
				VolumeMounts: mounts,
			}},
		},
	}
}

// StartPod starts the service pod named name: "etcd" (StartEtcd), "redis"
// (StartRedis) or "nats" (StartNATS), the names a service's descriptor
// gives (harness/services.Service.Pod).
func (r *Run) StartPod(ctx context.Context, name string) (*Service, error) {
	switch name {
	case "etcd":
		return r.StartEtcd(ctx)
	case "redis":
		return r.StartRedis(ctx)
	case "nats":
		return r.StartNATS(ctx)
	}
	return nil, fmt.Errorf("kuberun: no service pod %q: etcd, redis or nats", name)
}

// StartEtcd runs the lock service, etcd, as a pod of the Run: this
// binary's own embedded etcd (as harness/servers runs a member process),
// its data in an emptyDir, listening on the pod's address, port 2379,
// under the pod's supervisor (ServiceEnv, a role that harness/role's Serve
// dispatches). It returns the Service once the driver can reach it and
// etcd is healthy.
func (r *Run) StartEtcd(ctx context.Context) (*Service, error) {
	spec, _ := json.Marshal(map[string]string{
		"name": "etcd", "dir": "/data/etcd",
		// $(POD_IP) is expanded by the kubelet (an earlier variable).
		"client": fmt.Sprintf("http://$(POD_IP):%d", etcdPort), "peer": fmt.Sprintf("http://$(POD_IP):%d", etcdPort+1),
		"initial_cluster": fmt.Sprintf("etcd=http://$(POD_IP):%d", etcdPort+1), "token": r.id,
	})
	svc := &Service{run: r, name: "etcd", process: "etcd", pod: r.id + "-etcd", token: token()}
	p := r.pod(svc.pod, "etcd", []corev1.EnvVar{svc.env("LOCKSUITE_ETCD_MEMBER=" + string(spec))}, nil)
	p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "client", ContainerPort: etcdPort}, {Name: "control", ContainerPort: controlPort}}
	return svc, r.serve(ctx, p, svc, etcdPort, func(hostPort string) (string, func(context.Context) error) {
		u := "http://" + hostPort
		return u, etcdReady(u)
	})
}

// StartNATS runs the lock service NATS as a pod of the Run: this binary's
// own embedded nats-server with JetStream (as harness/servers runs a
// member process), its store in an emptyDir, listening on the pod's
// addresses, port 4222, under the pod's supervisor. It returns the Service
// once the driver can reach it and it greets (INFO).
func (r *Run) StartNATS(ctx context.Context) (*Service, error) {
	spec, _ := json.Marshal(map[string]any{"name": "nats", "dir": "/data/nats", "host": "0.0.0.0", "port": natsPort})
	svc := &Service{run: r, name: "nats", process: "nats-server", pod: r.id + "-nats", token: token()}
	p := r.pod(svc.pod, "nats", []corev1.EnvVar{svc.env("LOCKSUITE_NATS_MEMBER=" + string(spec))}, nil)
	p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "client", ContainerPort: natsPort}, {Name: "control", ContainerPort: controlPort}}
	return svc, r.serve(ctx, p, svc, natsPort, func(hostPort string) (string, func(context.Context) error) {
		return "nats://" + hostPort, natsReady(hostPort)
	})
}

// StartRedis runs the lock service Redis as a pod of the Run: RedisImage's
// redis-server on the pod's address, port 6379, without persistence
// (--save "", --appendonly no) and without protected mode (no password:
// the pod serves the run's clients only), under the pod's supervisor,
// which an init container copies from the Run's image (CopySelfEnv). It
// returns the Service once the driver can reach it and it answers PING.
func (r *Run) StartRedis(ctx context.Context) (*Service, error) {
	const bin = "/locksuite-bin"
	svc := &Service{run: r, name: "redis", process: "redis-server", pod: r.id + "-redis", token: token()}
	p := r.pod(svc.pod, "redis", []corev1.EnvVar{svc.env()}, []string{"redis-server", "--port", strconv.Itoa(redisPort), "--protected-mode", "no", "--save", "", "--appendonly", "no"})
	c := &p.Spec.Containers[0]
	c.Image, c.Command = RedisImage, []string{bin + "/locksuite"}
	c.Ports = []corev1.ContainerPort{{Name: "redis", ContainerPort: redisPort}, {Name: "control", ContainerPort: controlPort}}
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "bin", MountPath: bin})
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "bin", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	p.Spec.InitContainers = []corev1.Container{{
		Name: "supervisor", Image: r.image, ImagePullPolicy: corev1.PullIfNotPresent,
		Env:          []corev1.EnvVar{{Name: CopySelfEnv, Value: bin + "/locksuite"}},
		VolumeMounts: []corev1.VolumeMount{{Name: "bin", MountPath: bin}},
	}}
	return svc, r.serve(ctx, p, svc, redisPort, func(hostPort string) (string, func(context.Context) error) {
		return "redis://" + hostPort, redisReady(hostPort)
	})
}

// token is a new random token of a supervisor.
func token() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// env is the ServiceEnv of s's supervisor, whose server gets serverEnv.
func (s *Service) env(serverEnv ...string) corev1.EnvVar {
	b, _ := json.Marshal(serviceSpec{Control: controlPort, Token: s.token, Env: serverEnv})
	return corev1.EnvVar{Name: ServiceEnv, Value: string(b)}
}

// serve creates the pod p of the lock service svc, waits until it runs and
// answers at its port (urlOf gives the URL of its host:port, and the check
// that it answers there), and fills in svc's URL, check and supervisor.
func (r *Run) serve(ctx context.Context, p *corev1.Pod, svc *Service, port int, urlOf func(hostPort string) (string, func(context.Context) error)) error {
	if _, err := r.cs.Pods(r.ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("kubernetes: create the %s pod: %w", svc.name, err)
	}
	ip, err := r.awaitIP(ctx, p.Name, 2*time.Minute)
	if err != nil {
		return err
	}
	svc.url, svc.ready = urlOf(net.JoinHostPort(ip, strconv.Itoa(port)))
	svc.control = net.JoinHostPort(ip, strconv.Itoa(controlPort))
	if err := faults.WaitHealthy(ctx, time.Minute, svc.ready); err != nil {
		return fmt.Errorf("kubernetes: the pod %s at %s: this process cannot reach it (the driver must reach the pods' addresses): %w; its log: %s", p.Name, svc.url, err, r.podLog(p.Name))
	}
	return nil
}

// awaitIP waits until pod name runs and has an address.
func (r *Run) awaitIP(ctx context.Context, name string, bound time.Duration) (string, error) {
	deadline := time.Now().Add(bound)
	for {
		p, err := r.cs.Pods(r.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("kubernetes: pod %s: %w", name, err)
		}
		switch {
		case p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "":
			return p.Status.PodIP, nil
		case p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded:
			return "", fmt.Errorf("kubernetes: pod %s ended (%s) before it served: %s", name, p.Status.Phase, r.podLog(name))
		case time.Now().After(deadline):
			return "", fmt.Errorf("kubernetes: pod %s not running after %v: %s", name, bound, describe(p))
		}
		if err := wait.For(ctx, 200*time.Millisecond); err != nil {
			return "", err
		}
	}
}

// describe says why a pod is not running, from its status.
func describe(p *corev1.Pod) string {
	s := fmt.Sprintf("phase %s", p.Status.Phase)
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			s += fmt.Sprintf("; %s: %s", c.Type, c.Message)
		}
	}
	for _, c := range p.Status.ContainerStatuses {
		if w := c.State.Waiting; w != nil {
			s += fmt.Sprintf("; container %s waiting: %s %s", c.Name, w.Reason, w.Message)
		}
	}
	return s
}

// podLog is the tail of a pod's log, or why there is none.
func (r *Run) podLog(name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tail := int64(30)
	b, err := r.cs.Pods(r.ns).GetLogs(name, &corev1.PodLogOptions{TailLines: &tail}).DoRaw(ctx)
	if err != nil {
		if p, gerr := r.cs.Pods(r.ns).Get(ctx, name, metav1.GetOptions{}); gerr == nil {
			return fmt.Sprintf("(no log: %v; %s)", err, describe(p))
		}
		return fmt.Sprintf("(no log: %v)", err)
	}
	return string(b)
}

// Start starts the worker of spec as a pod of the Run (worker.Starter):
// its container's PID 1 is the supervisor (worker.Supervise), which runs
// the image's binary with argv's arguments (argv[0], this binary's path
// here, is the image's entrypoint there) and env as the worker, and
// connects to this process's Hub. The workers of one chaos run (those of
// the same Spec.Key) are spread over the nodes (a topology spread constraint on
// kubernetes.io/hostname, maxSkew 1). logPath is not used: Log reads the
// pod's log.
func (r *Run) Start(spec worker.Spec, argv, env []string, _ string) (worker.Process, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	n := r.seq.Add(1)
	// The workers of one chaos run share its key (chaos runs may start
	// their workers at the same time): a label value of it.
	h := fnv.New32a()
	h.Write([]byte(spec.Key))
	group := fmt.Sprintf("%s-%08x", r.id, h.Sum32())
	name := fmt.Sprintf("%s-w%d", r.id, n)
	rem, token := r.hub.Expect(spec.ID, func() string { return r.podLog(name) })
	vars := []corev1.EnvVar{{Name: worker.SupervisorEnv, Value: r.advertise + " " + token}, {Name: worker.EnvVar, Value: string(b)}}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars = append(vars, corev1.EnvVar{Name: k, Value: v})
	}
	var args []string
	if len(argv) > 1 {
		args = argv[1:]
	}
	p := r.pod(name, "worker", vars, args)
	p.Labels[GroupLabel] = group
	p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{GroupLabel: group}},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := r.cs.Pods(r.ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		rem.End(0)
		return nil, fmt.Errorf("kubernetes: create worker %d's pod: %w", spec.ID, err)
	}
	return &podWorker{Remote: rem, run: r, name: name}, nil
}

// podWorker is a worker in a pod: End ends it and deletes its pod.
type podWorker struct {
	*worker.Remote
	run  *Run
	name string
}

func (w *podWorker) End(grace time.Duration) {
	w.Remote.End(grace)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	zero := int64(0)
	_ = w.run.cs.Pods(w.run.ns).Delete(ctx, w.name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
}

// Close deletes the Run's objects: its pods (grace period 0), then its
// ConfigMap, and waits until none of its pods is left (up to ctx's end).
func (r *Run) Close(ctx context.Context) error {
	var err error
	r.once.Do(func() {
		close(r.stop)
		r.stopped.Wait()
		r.hub.Close()
		err = deleteRun(ctx, r.cs, r.ns, r.id)
	})
	return err
}

// deleteRun deletes run id's pods (grace period 0) and ConfigMap, and
// waits until no pod of it is left.
func deleteRun(ctx context.Context, cs *corev1client.CoreV1Client, ns, id string) error {
	sel := metav1.ListOptions{LabelSelector: RunLabel + "=" + id}
	zero := int64(0)
	bg := metav1.DeletePropagationBackground
	err := cs.Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, sel)
	if derr := cs.ConfigMaps(ns).Delete(ctx, id, metav1.DeleteOptions{PropagationPolicy: &bg}); derr != nil && !apierrors.IsNotFound(derr) {
		err = errors.Join(err, derr)
	}
	if err != nil {
		return fmt.Errorf("kubernetes: delete run %s: %w", id, err)
	}
	for {
		pods, err := cs.Pods(ns).List(ctx, sel)
		if err != nil {
			return fmt.Errorf("kubernetes: delete run %s: %w", id, err)
		}
		if len(pods.Items) == 0 {
			return nil
		}
		if err := wait.For(ctx, 200*time.Millisecond); err != nil {
			return fmt.Errorf("kubernetes: delete run %s: %d pods left: %w", id, len(pods.Items), err)
		}
	}
}

// Sweep deletes the runs of namespace ns whose driver is gone: every
// ConfigMap labelled app.kubernetes.io/managed-by=locksuite whose
// heartbeat is older than StaleAfter (or missing), with its pods. It
// returns the ids of the runs it deleted.
func Sweep(ctx context.Context, cs *corev1client.CoreV1Client, ns string) ([]string, error) {
	cms, err := cs.ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: ManagedByLabel + "=locksuite," + RunLabel})
	if err != nil {
		return nil, fmt.Errorf("kubernetes: list the runs in namespace %q: %w", ns, err)
	}
	var swept []string
	for _, cm := range cms.Items {
		t, err := time.Parse(time.RFC3339, cm.Annotations[HeartbeatAnnotation])
		if err == nil && time.Since(t) < StaleAfter {
			continue // a live run
		}
		if err := deleteRun(ctx, cs, ns, cm.Labels[RunLabel]); err != nil {
			return swept, err
		}
		swept = append(swept, cm.Labels[RunLabel])
	}
	return swept, nil
}
