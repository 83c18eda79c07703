package local

import (
	"context"
	"strings"
	"time"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/harness/nodes"
	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/harness/services"
	"github.com/locksuite/locksuite/suite"
)

// nodeService is the suite.NodeService of backend b, or nil if its service
// cannot start on nodes.
func nodeService(b services.Backend) *suite.NodeService {
	on := b.On.Nodes
	if on == nil {
		return nil
	}
	return &suite.NodeService{Nodes: on.N, Start: func(ctx context.Context, nw *nodes.Network, o suite.NodeOptions) (*suite.Placed, error) {
		h := &servers.Hosts{Net: nw, Nodes: nw.Nodes()[:on.N]}
		ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		c, err := on.Start(ctx, h, o)
		if err != nil {
			return nil, err
		}
		p := &suite.Placed{Service: services.ClusterServersOf(nil, c), Stop: c.Stop}
		for i := range on.N {
			if i < on.Members {
				p.Members = append(p.Members, i)
			} else {
				p.Watchers = append(p.Watchers, i)
			}
		}
		ms := c.Members()
		p.NewLocker = func(ctx context.Context, id int, key string, from *nodes.Node, via []int, lease time.Duration) (backends.Locker, error) {
			cl := suite.Client{ID: id, Key: key, Dial: from.Dial, Lease: lease}
			if len(via) == 0 {
				return b.NewLocker(&services.Conn{Endpoint: c.Endpoint()}, cl)
			}
			if len(via) == 1 && on.Direct != nil {
				return on.Direct(ms[via[0]].Addr(), cl)
			}
			var addrs []string
			for _, i := range via {
				addrs = append(addrs, ms[i].Addr())
			}
			return b.NewLocker(&services.Conn{Endpoint: strings.Join(addrs, ",")}, cl)
		}
		return p, nil
	}}
}
