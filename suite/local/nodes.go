package local

import (
	"context"
	"strings"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/harness/nodes"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/suite"
)

// onNodes is how a cluster starts anew on nodes for the node scenarios
// (suite.Config.Nodes): its processes take nodes 0 … n-1, process i on node
// i, in the order its Start…On documents; the first members of them are its
// members, the rest watchers (Sentinels).
type onNodes struct {
	n       int // processes
	members int // the first members of them serve; the others watch
	start   func(ctx context.Context, h *servers.Hosts, o suite.NodeOptions) (servers.Cluster, error)
	// direct, if not nil, makes a Locker that talks to the member at addr
	// only, where the backend's own Locker would discover the members
	// (Redis's Sentinel client): a client that keeps its connection to the
	// primary it knows.
	direct func(addr string, cl suite.Client) (backends.Locker, error)
}

// nodeService is the suite.NodeService of backend b, or nil if its service
// cannot start on nodes.
func nodeService(b backend) *suite.NodeService {
	on := b.on.nodes
	if on == nil {
		return nil
	}
	return &suite.NodeService{Nodes: on.n, Start: func(ctx context.Context, nw *nodes.Network, o suite.NodeOptions) (*suite.Placed, error) {
		h := &servers.Hosts{Net: nw, Nodes: nw.Nodes()[:on.n]}
		ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		c, err := on.start(ctx, h, o)
		if err != nil {
			return nil, err
		}
		p := &suite.Placed{Service: clusterServersOf(nil, c), Stop: c.Stop}
		for i := range on.n {
			if i < on.members {
				p.Members = append(p.Members, i)
			} else {
				p.Watchers = append(p.Watchers, i)
			}
		}
		ms := c.Members()
		p.NewLocker = func(ctx context.Context, id int, key string, from *nodes.Node, via []int, lease time.Duration) (backends.Locker, error) {
			cl := suite.Client{ID: id, Key: key, Dial: from.Dial, Lease: lease}
			if len(via) == 0 {
				return b.newLocker(&conn{endpoint: c.Endpoint()}, cl)
			}
			if len(via) == 1 && on.direct != nil {
				return on.direct(ms[via[0]].Addr(), cl)
			}
			var addrs []string
			for _, i := range via {
				addrs = append(addrs, ms[i].Addr())
			}
			return b.newLocker(&conn{endpoint: strings.Join(addrs, ",")}, cl)
		}
		return p, nil
	}}
}
