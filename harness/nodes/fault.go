package nodes

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/locksuite/locksuite/harness/faults"
)

// Dial connects to address from the node that owns address's host, like
// Node.Dial: traffic within a node is never cut, so this reaches a node's
// server whatever the faults (a health check, a leader query). It is the
// coordinator's dialer for what runs on the network; an address that is
// no node's fails, so nothing leaves the network.
func (nw *Network) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	n, err := nw.NodeOf(address)
	if err != nil {
		return nil, err
	}
	return n.Dial(ctx, network, address)
}

// NodeOf returns the node whose address is address's host (an IP, with
// or without a port).
func (nw *Network) NodeOf(address string) (*Node, error) {
	host := address
	if h, _, err := net.SplitHostPort(address); err == nil {
		host = h
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return nil, fmt.Errorf("nodes: %q: not an IP address", address)
	}
	for _, n := range nw.nodes {
		if n.addr == ip {
			return n, nil
		}
	}
	return nil, fmt.Errorf("nodes: %s is no node's address on %s", host, nw.subnet)
}

// AsFault makes f a faults.Fault of the run's contract: Applies holds on a
// network that is open, Inject is Network.Inject, and its span is drawn
// on every lane (faults.ServiceLane: a partition cuts the lock service,
// not one client) with f's kind and String.
func AsFault(nw *Network, f Fault) faults.Fault { return &netFault{nw: nw, f: f} }

type netFault struct {
	nw *Network
	f  Fault
}

func (n *netFault) Applies(context.Context) error {
	if n.nw == nil {
		return faults.NotApplicable("no network of nodes")
	}
	if _, err := n.f.effect(len(n.nw.nodes)); err != nil {
		return faults.NotApplicable(err.Error())
	}
	return nil
}

func (n *netFault) Inject(ctx context.Context) (func() error, error) { return n.nw.Inject(ctx, n.f) }

func (n *netFault) Span() faults.Span {
	return faults.Span{Lane: faults.ServiceLane, Kind: string(n.f.Kind()), What: n.f.String()}
}

var _ faults.Fault = (*netFault)(nil)
