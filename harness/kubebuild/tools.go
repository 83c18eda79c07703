//go:build tools

// Package kubebuild pins the Kubernetes components that the harness builds
// from source: kube-apiserver, and for the single-node cluster
// (kubecluster.Start) kubelet, kube-controller-manager and
// kube-scheduler. It is a separate module so that the suite's own go.mod
// does not carry the Kubernetes server's dependency tree; ci/setup.sh builds
// the four in one `go build -o <dir>/ <packages>` here, so that they share
// the compile.
package kubebuild

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
