//go:build tools

// Package kubebuild pins the kube-apiserver that the harness builds from
// source. It is a separate module so that the suite's own go.mod does not
// carry the Kubernetes server's dependency tree; ci/setup.sh runs
// `go build -o <cache>/kube-apiserver-<version> k8s.io/kubernetes/cmd/kube-apiserver`
// here.
package kubebuild

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
