package kubecluster_test

import (
	"context"
	"log"
	"net"

	"github.com/locksuite/locksuite/harness/services/kube/kubecluster"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// ExampleStart starts a cluster of two nodes, imports the image
// of a static program of this module and runs it as a pod on n1 that
// dials a listener of this process on n0.
func ExampleStart() {
	ctx := context.Background()
	c, err := kubecluster.Start(ctx, 2) // an *servers.Unavailable, with the fix, when a part is missing
	if err != nil {
		log.Fatal(err)
	}
	defer c.Stop()

	// A static program of this module, as an image in every node (CGO_ENABLED=0).
	if _, err := c.ImportProgram(ctx, "github.com/locksuite/locksuite/cmd/locksuite", "localhost/locksuite/cli:dev"); err != nil {
		log.Fatal(err)
	}

	n0 := c.Nodes()[0]
	ln, err := n0.Listen("tcp", net.JoinHostPort(n0.Addr().String(), "0")) // pods reach it
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	cs, err := corev1client.NewForConfig(c.RestConfig()) // dials through the nodes' network
	if err != nil {
		log.Fatal(err)
	}
	_, err = cs.Pods(c.Namespace()).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "cli"},
		Spec: corev1.PodSpec{
			NodeName:      c.Nodes()[1].Name(),
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "cli", Image: "localhost/locksuite/cli:dev",
				ImagePullPolicy: corev1.PullNever, // the cluster pulls from no registry
				Args:            []string{"help"},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		log.Fatal(err)
	}
}
