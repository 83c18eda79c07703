// Package nodes gives the harness several hosts on one machine: each node
// is a Linux network namespace with one IPv4 address on a bridge that the
// harness creates, so that servers and clients on different nodes talk over
// real addresses and a partition can cut exactly the links between them
// (see Fault).
//
// # The network
//
// New(ctx, n) makes a namespace of its own, the hub, holding a bridge
// "locksuite<X>" with no address, and n namespaces n0 … n(n-1). Node i has
// the loopback (up) and one interface, eth0, a veth whose other end
// "locksuite<X>n<i>" is a port of the bridge in the hub, with the address
// 10.77.X.(10+i)/24. Nothing of a Network is in the host's namespace: its
// links are invisible there (ip link does not list them), concurrent runs
// cannot collide (each has its own hub; X is this process's pid modulo 256,
// for telling runs apart in logs), and the host's firewall never sees the
// nodes' traffic (bridged packets pass the hub's netfilter hooks, which
// have no rules). Nodes have no other route: no default route, no NAT, and
// neither the bridge nor the host has an address in the subnet, so a packet
// from a node reaches only another node of the same Network (anything else
// fails with "network is unreachable"). The host itself cannot reach a node
// either: the coordinator reaches a node through a node's Dial, and to reach
// node i whatever the faults (a health check, a leader query) it dials from
// node i itself, since traffic within a node is never cut.
// eth0, its peer and the bridge get no IPv6 address (addrgenmode none), so a
// node speaks IPv4 to other nodes only; its loopback keeps 127.0.0.1 and
// ::1.
//
// # Running things on a node
//
//   - A server or worker process: Node.Start, like exec.Cmd.Start, with the
//     child in the node's namespace (and SIGKILLed when this process dies, as
//     internal/spawn does for every child). It binds Node.Addr (or
//     0.0.0.0) and dials other nodes' addresses directly. This is the way for
//     redis-server, Sentinel, Consul and re-executed etcd members.
//   - A Go client in this process: Node.Dial as its dialer (the adapters'
//     Config.Dial): each connection it makes leaves from the node.
//   - An embedded server in this process: Node.Listen (or ListenPacket); the
//     listener's connections live in the node.
//
// Only processes can be stopped (Stop): a client living in this process
// through Node.Dial cannot.
//
// # Privileges and cleanup
//
// Namespaces and links need CAP_SYS_ADMIN and CAP_NET_ADMIN (root): without
// them New fails with an error that wraps ErrNoPrivilege and says how to run.
// The namespaces, the hub's included, are unnamed (ip netns list never
// shows them): they exist while this process holds them or a process runs
// in them, so the kernel removes them, their nftables rules, the veths and
// the bridge when the coordinator dies, even by SIGKILL (its children die
// with it, and no process ever runs in the hub). Nothing is left for a
// later run to clean. RemoveStale deletes what versions that kept the
// bridge in the host's namespace left there.
package nodes

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/nftables"
	"github.com/locksuite/locksuite/internal/owner"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// ErrNoPrivilege is wrapped by the error of New (and Check) when this
// process may not create network namespaces and links.
var ErrNoPrivilege = errors.New("nodes need root (CAP_SYS_ADMIN and CAP_NET_ADMIN)")

// MaxNodes is the most nodes one Network has (link names are at most 15
// bytes: "locksuite255n63").
const MaxNodes = 64

const (
	prefix      = "locksuite"        // of every link name the harness makes
	aliasPrefix = "locksuite owner " // + owner.Self(): the alias of each link
	hostBase    = 10                 // node i's address is 10.77.X.(hostBase+i)
	// addrGenModeNone is IN6_ADDR_GEN_MODE_NONE: no IPv6 link-local address.
	addrGenModeNone = 1
)

// Network is a bridge and the nodes on it. Its methods are safe for
// concurrent use.
type Network struct {
	subnet netip.Prefix
	bridge string
	home   netns.NsHandle // this process's own network namespace
	hub    netns.NsHandle // the namespace of the bridge and the veths' ports
	hubID  nsID
	host   *netlink.Handle // netlink in hub
	nodes  []*Node

	// fdMu guards closing the namespace descriptors (nodes' ns and home)
	// against Node.handles copying them.
	fdMu     sync.RWMutex
	fdClosed bool

	mu     sync.Mutex
	active *injection // the fault in effect, or nil
	spans  []Span
	closed bool
}

// Node is one network namespace of a Network.
type Node struct {
	nw    *Network
	index int
	addr  netip.Addr
	ns    netns.NsHandle
	veth  string // its bridge port, in the hub
	ino   nsID
	nft   *nftables.Conn
	table *nftables.Table
	set   *nftables.Set // "drop_from": sources whose packets input drops
}

// nsID identifies a namespace: the device and inode of its nsfs file.
type nsID struct{ dev, ino uint64 }

// Check reports whether this process may create nodes: nil, or an error
// wrapping ErrNoPrivilege that says how to run. It creates nothing.
func Check() error {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return fmt.Errorf("nodes: %w", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		hex, ok := strings.CutPrefix(s.Text(), "CapEff:")
		if !ok {
			continue
		}
		caps, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
		if err != nil {
			return fmt.Errorf("nodes: /proc/self/status CapEff %q: %w", hex, err)
		}
		var missing []string
		for _, c := range []struct {
			bit  uint
			name string
		}{{21, "CAP_SYS_ADMIN"}, {12, "CAP_NET_ADMIN"}} {
			if caps&(1<<c.bit) == 0 {
				missing = append(missing, c.name)
			}
		}
		if len(missing) > 0 {
			return noPrivilege(strings.Join(missing, " and "))
		}
		return nil
	}
	return fmt.Errorf("nodes: no CapEff in /proc/self/status")
}

func noPrivilege(what string) error {
	return fmt.Errorf("%w: this process lacks %s; run as root (sudo -E locksuite …, sudo -E go test …) or in a privileged container (docker run --privileged, or --cap-add SYS_ADMIN --cap-add NET_ADMIN)", ErrNoPrivilege, what)
}

// privileged maps a permission error of the kernel to ErrNoPrivilege.
func privileged(what string, err error) error {
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
		return fmt.Errorf("nodes: %s: %w (%w)", what, noPrivilege("a privilege the kernel asked for"), err)
	}
	return fmt.Errorf("nodes: %s: %w", what, err)
}

// New makes a Network of n nodes (1 ≤ n ≤ MaxNodes), fully connected, after
// removing what dead runs of older versions left (RemoveStale). It returns
// once packets flow: every link is up and every node has sent a datagram to
// the next around a ring (at most 10 s, or it fails with a reason). On error it leaves nothing behind. ctx bounds the
// setup; the Network lives until Close.
func New(ctx context.Context, n int) (nw *Network, err error) {
	if n < 1 || n > MaxNodes {
		return nil, fmt.Errorf("nodes: New(%d): a Network has 1 to %d nodes", n, MaxNodes)
	}
	if err := Check(); err != nil {
		return nil, err
	}
	if _, err := RemoveStale(); err != nil {
		return nil, err
	}
	rec, err := owner.Self()
	if err != nil {
		return nil, fmt.Errorf("nodes: owner record: %w", err)
	}
	alias := aliasPrefix + rec
	nw = &Network{hub: -1}
	if nw.home, err = currentNS(); err != nil {
		return nil, fmt.Errorf("nodes: this process's network namespace: %w", err)
	}
	defer func() {
		if err != nil {
			nw.Close()
			nw = nil
		}
	}()
	if nw.hub, err = newNS(nw.home); err != nil {
		return nil, privileged("create the hub's network namespace", err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(nw.hub), &st); err != nil {
		return nil, fmt.Errorf("nodes: stat the hub's namespace: %w", err)
	}
	nw.hubID = nsID{st.Dev, st.Ino}
	if nw.host, err = netlink.NewHandleAt(nw.hub); err != nil {
		return nil, privileged("netlink", err)
	}
	br, x, err := nw.claimBridge(alias)
	if err != nil {
		return nil, err
	}
	if err := nw.host.LinkSetUp(br); err != nil {
		return nil, fmt.Errorf("nodes: bridge %s up: %w", nw.bridge, err)
	}
	nw.subnet = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 77, byte(x), 0}), 24)
	for i := range n {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("nodes: New: %w", err)
		}
		node, err := nw.addNode(i, x, br, alias)
		if node != nil {
			nw.nodes = append(nw.nodes, node)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := nw.waitConnected(ctx); err != nil {
		return nil, err
	}
	return nw, nil
}

// waitUp polls until link name (of node) is operationally up.
func waitUp(ctx context.Context, h *netlink.Handle, name, node string) error {
	for {
		l, err := h.LinkByName(name)
		if err != nil {
			return fmt.Errorf("nodes: %s: %s: %w", node, name, err)
		}
		if l.Attrs().OperState == netlink.OperUp {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("nodes: %s: %s is not up (%s): %w", node, name, l.Attrs().OperState, ctx.Err())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// connectTimeout bounds waitConnected when ctx does not.
const connectTimeout = 10 * time.Second

// waitConnected returns once every node has sent a UDP datagram to the
// next one around a ring and that one has received it. A link that is up
// does not carry packets yet: the kernel activates its queue and makes it
// a forwarding bridge port later, from a deferred task (linkwatch, up to a
// second), and drops what is sent before. Around the ring every node
// sends and receives and every bridge port forwards both ways.
func (nw *Network) waitConnected(ctx context.Context) error {
	n := len(nw.nodes)
	if n < 2 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	// First the links' operational state, so that the first ARP request is
	// not dropped: the kernel would ask again only a second later.
	for _, node := range nw.nodes {
		h, err := netlink.NewHandleAt(node.ns)
		if err != nil {
			return fmt.Errorf("nodes: %s: netlink: %w", node, err)
		}
		err = waitUp(ctx, h, "eth0", node.String())
		h.Close()
		if err == nil {
			err = waitUp(ctx, nw.host, node.veth, node.String())
		}
		if err != nil {
			return err
		}
	}
	conns := make([]net.PacketConn, n)
	for i, node := range nw.nodes {
		pc, err := node.ListenPacket("udp4", net.JoinHostPort(node.addr.String(), "0"))
		if err != nil {
			return err
		}
		defer pc.Close()
		conns[i] = pc
	}
	buf := make([]byte, 8)
	for i, pc := range conns {
		next := conns[(i+1)%n]
		for {
			if _, err := pc.WriteTo([]byte{byte(i)}, next.LocalAddr()); err != nil {
				return fmt.Errorf("nodes: %s: send to %s: %w", nw.nodes[i], nw.nodes[(i+1)%n], err)
			}
			next.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
			k, _, err := next.ReadFrom(buf)
			if err == nil && k == 1 && buf[0] == byte(i) {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("nodes: %s cannot reach %s over bridge %s: %w", nw.nodes[i], nw.nodes[(i+1)%n], nw.bridge, ctx.Err())
			}
		}
	}
	return nil
}

// claimBridge makes the bridge in the hub, named after this process's pid
// modulo 256, and labels it with its owner.
func (nw *Network) claimBridge(alias string) (netlink.Link, int, error) {
	x := os.Getpid() % 256
	attrs := netlink.NewLinkAttrs()
	attrs.Name = fmt.Sprintf("%s%d", prefix, x)
	br := &netlink.Bridge{LinkAttrs: attrs}
	if err := nw.host.LinkAdd(br); err != nil {
		return nil, 0, privileged("create bridge "+attrs.Name, err)
	}
	nw.bridge = attrs.Name
	// The kernel ignores an alias given at creation: label it now.
	if err := nw.host.LinkSetAlias(br, alias); err != nil {
		return nil, 0, fmt.Errorf("nodes: label bridge %s: %w", attrs.Name, err)
	}
	if err := noIPv6(nw.host, br); err != nil {
		return nil, 0, fmt.Errorf("nodes: bridge %s: %w", attrs.Name, err)
	}
	return br, x, nil
}

// addNode makes node i: its namespace, its veth into bridge br, its
// address, and its nftables table. A non-nil node is returned for Close to
// remove even when err is set.
func (nw *Network) addNode(i, x int, br netlink.Link, alias string) (*Node, error) {
	ns, err := newNS(nw.home)
	if err != nil {
		return nil, privileged("create network namespace", err)
	}
	node := &Node{nw: nw, index: i, ns: ns,
		addr: netip.AddrFrom4([4]byte{10, 77, byte(x), byte(hostBase + i)}),
		veth: fmt.Sprintf("%s%dn%d", prefix, x, i)}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(ns), &st); err != nil {
		return node, fmt.Errorf("nodes: %s: stat namespace: %w", node, err)
	}
	node.ino = nsID{st.Dev, st.Ino}

	attrs := netlink.NewLinkAttrs()
	attrs.Name = node.veth
	veth := &netlink.Veth{LinkAttrs: attrs, PeerName: "eth0", PeerNamespace: netlink.NsFd(ns)}
	if err := nw.host.LinkAdd(veth); err != nil {
		return node, fmt.Errorf("nodes: %s: create veth %s: %w", node, node.veth, err)
	}
	if err := nw.host.LinkSetAlias(veth, alias); err != nil {
		return node, fmt.Errorf("nodes: %s: label %s: %w", node, node.veth, err)
	}
	if err := noIPv6(nw.host, veth); err != nil {
		return node, fmt.Errorf("nodes: %s: %w", node, err)
	}
	if err := nw.host.LinkSetMaster(veth, br); err != nil {
		return node, fmt.Errorf("nodes: %s: %s into bridge: %w", node, node.veth, err)
	}
	if err := nw.host.LinkSetUp(veth); err != nil {
		return node, fmt.Errorf("nodes: %s: %s up: %w", node, node.veth, err)
	}

	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return node, fmt.Errorf("nodes: %s: netlink: %w", node, err)
	}
	defer h.Close()
	eth, err := h.LinkByName("eth0")
	if err != nil {
		return node, fmt.Errorf("nodes: %s: eth0: %w", node, err)
	}
	if err := noIPv6(h, eth); err != nil {
		return node, fmt.Errorf("nodes: %s: %w", node, err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: node.addr.AsSlice(), Mask: net.CIDRMask(24, 32)}}
	if err := h.AddrAdd(eth, addr); err != nil {
		return node, fmt.Errorf("nodes: %s: address %s: %w", node, node.addr, err)
	}
	if err := h.LinkSetUp(eth); err != nil {
		return node, fmt.Errorf("nodes: %s: eth0 up: %w", node, err)
	}
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetUp(lo)
	}
	if err != nil {
		return node, fmt.Errorf("nodes: %s: loopback up: %w", node, err)
	}
	if err := node.initRules(); err != nil {
		return node, fmt.Errorf("nodes: %s: nftables: %w", node, err)
	}
	return node, nil
}

// noIPv6 keeps link from getting an IPv6 link-local address, through which
// nodes could otherwise talk past the IPv4 rules. A kernel without IPv6
// needs nothing.
func noIPv6(h *netlink.Handle, link netlink.Link) error {
	if _, err := os.Stat("/proc/sys/net/ipv6"); err != nil {
		return nil
	}
	if err := h.LinkSetIP6AddrGenMode(link, addrGenModeNone); err != nil {
		return fmt.Errorf("addrgenmode none on %s: %w", link.Attrs().Name, err)
	}
	return nil
}

// currentNS opens the network namespace of the calling goroutine's thread,
// which, outside inNS, is this process's own.
func currentNS() (netns.NsHandle, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return netns.Get()
}

// newNS creates an unnamed network namespace and returns a handle to it,
// leaving the calling thread in home.
func newNS(home netns.NsHandle) (netns.NsHandle, error) {
	var ns netns.NsHandle
	err := inThread(home, func() error {
		var err error
		ns, err = netns.New() // unshare: this thread moves into it
		return err
	})
	return ns, err
}

// inNS runs f on an OS thread in namespace ns and returns the thread to
// home afterwards. Sockets f creates stay in ns. f must not start
// goroutines that create sockets: they would run on other threads.
func inNS(ns, home netns.NsHandle, f func() error) error {
	return inThread(home, func() error {
		if err := netns.Set(ns); err != nil {
			return fmt.Errorf("enter namespace: %w", err)
		}
		return f()
	})
}

// inThread runs f on a goroutine locked to its thread and puts the thread
// back into home afterwards. If that fails the goroutine exits still
// locked, and the runtime ends the thread rather than reuse it in the wrong
// namespace.
func inThread(home netns.NsHandle, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err := f()
		if back := netns.Set(home); back != nil {
			errc <- errors.Join(err, fmt.Errorf("return thread to its namespace: %w", back))
			return // still locked: the thread ends with this goroutine
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// Subnet is the network's /24, 10.77.X.0/24.
func (nw *Network) Subnet() netip.Prefix { return nw.subnet }

// Bridge is the name of the network's bridge, in the hub's namespace (not
// the host's).
func (nw *Network) Bridge() string { return nw.bridge }

// Nodes are the network's nodes, by index.
func (nw *Network) Nodes() []*Node { return append([]*Node(nil), nw.nodes...) }

// Close heals the fault in effect, SIGKILLs every process still on a node
// (stop your servers first for a clean shutdown), and removes the network:
// veths, bridge, namespaces and with them their rules. It is idempotent.
func (nw *Network) Close() error {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	if nw.closed {
		return nil
	}
	nw.closed = true
	var errs []error
	if nw.active != nil {
		if err := nw.heal(nw.active); err != nil {
			// The rules go with the namespaces and the stopped processes
			// are killed below: the fault ends here all the same.
			errs = append(errs, err)
			nw.spans[nw.active.span].End = time.Now()
			nw.active = nil
		}
	}
	for _, node := range nw.nodes {
		pids, err := node.Processes()
		errs = append(errs, err)
		for _, pid := range pids {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
				errs = append(errs, fmt.Errorf("nodes: kill %d on %s: %w", pid, node, err))
			}
		}
	}
	if nw.host != nil {
		for _, node := range nw.nodes {
			errs = append(errs, delLink(nw.host, node.veth))
		}
		if nw.bridge != "" {
			errs = append(errs, delLink(nw.host, nw.bridge))
		}
		nw.host.Close()
	}
	nw.fdMu.Lock()
	nw.fdClosed = true
	for _, node := range nw.nodes {
		node.ns.Close()
	}
	if nw.hub.IsOpen() {
		nw.hub.Close()
	}
	nw.home.Close()
	nw.fdMu.Unlock()
	return errors.Join(errs...)
}

// delLink deletes the link named name, if it exists.
func delLink(h *netlink.Handle, name string) error {
	l, err := h.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("nodes: find link %s: %w", name, err)
	}
	if err := h.LinkDel(l); err != nil && !errors.Is(err, syscall.ENODEV) {
		return fmt.Errorf("nodes: delete link %s: %w", name, err)
	}
	return nil
}

// RemoveStale deletes the links (bridges, veths) that a Network of a
// process that no longer runs left in this namespace, and returns their
// names. Their namespaces went with that process. Links of live runs, and
// links whose names do not start with "locksuite", are left alone. New
// labels each link with its owner right after creating it (the kernel
// ignores a label given at creation); a "locksuite…" link still unlabelled
// a second after RemoveStale first saw it was left by a run killed in
// between, and is deleted too.
func RemoveStale() ([]string, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, privileged("list links", err)
	}
	var removed, unlabelled []string
	var errs []error
	del := func(l netlink.Link) {
		if err := netlink.LinkDel(l); err != nil && !errors.Is(err, syscall.ENODEV) {
			errs = append(errs, privileged("delete stale link "+l.Attrs().Name, err))
			return
		}
		removed = append(removed, l.Attrs().Name)
	}
	for _, l := range links {
		a := l.Attrs()
		if !strings.HasPrefix(a.Name, prefix) {
			continue
		}
		if a.Alias == "" {
			unlabelled = append(unlabelled, a.Name)
			continue
		}
		rec, ok := strings.CutPrefix(a.Alias, aliasPrefix)
		if !ok {
			continue
		}
		if gone, ok := owner.Gone(rec); ok && gone {
			del(l)
		}
	}
	if len(unlabelled) > 0 {
		time.Sleep(time.Second)
		for _, name := range unlabelled {
			if l, err := netlink.LinkByName(name); err == nil && l.Attrs().Alias == "" {
				del(l)
			}
		}
	}
	return removed, errors.Join(errs...)
}
