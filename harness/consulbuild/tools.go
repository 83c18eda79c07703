//go:build tools

// Package consulbuild pins the Consul server that the harness builds from
// source. It is a separate module so that the suite's own go.mod does not
// carry Consul's dependency tree; the harness runs
// `go build -o <cache>/consul-<version> github.com/hashicorp/consul` here.
package consulbuild

import _ "github.com/hashicorp/consul"
