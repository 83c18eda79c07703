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

// Host is the address process i binds: node i's, or 127.0.0.1 for a nil
// *Hosts.
func (h *Hosts) Host(i int) string {
	if h == nil {
		return "127.0.0.1"
	}
	return h.Nodes[i].Addr().String()
}

// Starter is what starts process i (as Launch's start): node i's Start,
// or spawn.Start for a nil *Hosts.
func (h *Hosts) Starter(i int) func(*exec.Cmd) error {
	if h == nil {
		return spawn.Start
	}
	return h.Nodes[i].Start
}

// Dial is how the harness reaches the processes: through the network
// (from the caller's node; see nodes.Network.Dial), or a plain dial for a
// nil *Hosts.
func (h *Hosts) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if h == nil {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	return h.Net.Dial(ctx, network, addr)
}

// Check returns an error (naming the cluster, name) unless h places n
// processes: a nil *Hosts places any number.
func (h *Hosts) Check(name string, n int) error {
	if h != nil && (h.Net == nil || len(h.Nodes) < n) {
		return fmt.Errorf("%s: Hosts places %d processes, the cluster has %d", name, len(h.Nodes), n)
	}
	return nil
}
