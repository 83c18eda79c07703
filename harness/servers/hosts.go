package servers

import (
	"context"
	"fmt"
	"net"
	"os/exec"

	"github.com/locksuite/locksuite/harness/nodes"
	"github.com/locksuite/locksuite/internal/spawn"
)

// Hosts places a cluster's processes on nodes (harness/nodes): process i
// of the cluster (in the order its Start function documents) runs on
// Nodes[i] and binds that node's address; the harness reaches the
// processes (health checks, leader queries) through the network's Dial,
// from each process's own node, so that its checks see the service as a
// client on that node does and never cross a partition. A nil *Hosts is
// loopback: every process on 127.0.0.1, started and reached from here.
type Hosts struct {
	Net   *nodes.Network
	Nodes []*nodes.Node
}

// host is the address process i binds.
func (h *Hosts) host(i int) string {
	if h == nil {
		return "127.0.0.1"
	}
	return h.Nodes[i].Addr().String()
}

// starter starts process i.
func (h *Hosts) starter(i int) func(*exec.Cmd) error {
	if h == nil {
		return spawn.Start
	}
	return h.Nodes[i].Start
}

// dial is how the harness reaches the processes.
func (h *Hosts) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if h == nil {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	return h.Net.Dial(ctx, network, addr)
}

// check fails unless h places n processes.
func (h *Hosts) check(name string, n int) error {
	if h != nil && (h.Net == nil || len(h.Nodes) < n) {
		return fmt.Errorf("%s: Hosts places %d processes, the cluster has %d", name, len(h.Nodes), n)
	}
	return nil
}
