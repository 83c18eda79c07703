package nodes

import (
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// initRules gives the node, in its own namespace, the one rule every
// network fault uses:
//
//	table ip locksuite {
//		set drop_from { type ipv4_addr; }
//		chain input { type filter hook input priority filter; policy accept;
//			ip saddr @drop_from drop }
//	}
//
// A fault fills drop_from; heal empties it. Packets are dropped where they
// arrive, whatever their connection's state, so established connections
// are cut as well as new ones, and nothing is reported to the sender (no
// RST, no ICMP): a partition looks like silence, as in Jepsen. The table
// goes with the namespace.
func (n *Node) initRules() error {
	c, err := nftables.New(nftables.WithNetNSFd(int(n.ns)))
	if err != nil {
		return err
	}
	table := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: "locksuite"})
	set := &nftables.Set{Table: table, Name: "drop_from", KeyType: nftables.TypeIPAddr}
	if err := c.AddSet(set, nil); err != nil {
		return err
	}
	accept := nftables.ChainPolicyAccept
	chain := c.AddChain(&nftables.Chain{Name: "input", Table: table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{
		// ip saddr: 4 bytes at offset 12 of the IPv4 header
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}})
	if err := c.Flush(); err != nil {
		return err
	}
	n.nft, n.table, n.set = c, table, set
	return nil
}

// dropFrom makes the node drop every packet from the given nodes.
func (n *Node) dropFrom(from []*Node) error {
	els := make([]nftables.SetElement, len(from))
	for i, f := range from {
		els[i] = nftables.SetElement{Key: f.addr.AsSlice()}
	}
	if err := n.nft.SetAddElements(n.set, els); err != nil {
		return fmt.Errorf("nodes: %s: drop from %v: %w", n, from, err)
	}
	if err := n.nft.Flush(); err != nil {
		return fmt.Errorf("nodes: %s: drop from %v: %w", n, from, err)
	}
	return nil
}

// acceptAll empties the node's drop set.
func (n *Node) acceptAll() error {
	n.nft.FlushSet(n.set)
	if err := n.nft.Flush(); err != nil {
		return fmt.Errorf("nodes: %s: heal: %w", n, err)
	}
	return nil
}
