package kubecluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/locksuite/locksuite/harness/kubeimage"
)

// The images the cluster's pods run: imported into the nodes' containerd,
// never pulled.

// containerdSocket is the gRPC socket of node n's containerd, a file in the
// cluster's directory that this process reaches from any namespace.
func (n *kubeNode) containerdSocket() string { return filepath.Join(n.dir, "containerd.sock") }

// ImportImage imports the image archive at path (kubeimage.Write's, or any
// OCI or `docker save` archive) into every node's containerd, in the
// namespace "k8s.io" that kubelet uses, with ctr. Pods run it by the name
// it was written with, with imagePullPolicy Never (or IfNotPresent and a
// tag other than "latest"): the cluster pulls from no registry.
func (c *Cluster) ImportImage(ctx context.Context, path string) error {
	for _, n := range c.nodes {
		if err := n.importImage(ctx, path); err != nil {
			return err
		}
	}
	return nil
}

// ImportProgram builds the Go main package pkg as a static binary
// (kubeimage.Static: an import path, or a directory resolved in the current
// directory's module), writes it as the one-layer image ref
// (kubeimage.Write: the binary is its entrypoint, args after it) and
// imports that into every node (ImportImage). It returns the binary's
// path, which this machine can run too: the binary and the archive are in
// the cluster's directory until Stop.
func (c *Cluster) ImportProgram(ctx context.Context, pkg, ref string, args ...string) (bin string, err error) {
	dir, err := os.MkdirTemp(c.dir, "image-")
	if err != nil {
		return "", err
	}
	if bin, err = kubeimage.Static(ctx, dir, pkg); err != nil {
		return "", err
	}
	tar := filepath.Join(dir, "image.tar")
	if err := kubeimage.Write(tar, ref, bin, args...); err != nil {
		return "", err
	}
	return bin, c.ImportImage(ctx, tar)
}

func (n *kubeNode) importImage(ctx context.Context, path string) error {
	ctr, err := exec.LookPath("ctr")
	if err != nil {
		return fmt.Errorf("kubernetes: import %s: no ctr (apt-get install containerd): %w", path, err)
	}
	out, err := exec.CommandContext(ctx, ctr, "--address", n.containerdSocket(), "--namespace", "k8s.io",
		"images", "import", path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("kubernetes: %s: ctr images import %s: %w: %s", n.node.Name(), path, err, bytes.TrimSpace(out))
	}
	return nil
}
