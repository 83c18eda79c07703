package nodes

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/locksuite/locksuite/internal/spawn"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Index is the node's position in Network.Nodes, from 0.
func (n *Node) Index() int { return n.index }

// Name is "n<index>": n0, n1, …
func (n *Node) Name() string { return "n" + strconv.Itoa(n.index) }

// String is the node's name and address: "n2(10.77.5.12)".
func (n *Node) String() string { return fmt.Sprintf("%s(%s)", n.Name(), n.addr) }

// Addr is the node's address on the bridge, 10.77.X.(10+index).
func (n *Node) Addr() netip.Addr { return n.addr }

// Start starts cmd like exec.Cmd.Start with the child in the node's network
// namespace; the caller waits for it as usual. As with every child the
// harness starts (internal/spawn), the child gets SIGKILL when this
// process dies unless cmd.SysProcAttr sets another Pdeathsig. Processes the
// child starts stay on the node.
func (n *Node) Start(cmd *exec.Cmd) error {
	ns, home, err := n.handles()
	if err != nil {
		return err
	}
	defer ns.Close()
	defer home.Close()
	if err := spawn.StartInNetNS(cmd, int(ns)); err != nil {
		return fmt.Errorf("nodes: start %s on %s: %w", cmd.Path, n, err)
	}
	return nil
}

// Dial connects from the node to address, like net.Dialer.DialContext: the
// connection's socket is in the node's namespace, so it leaves from
// Addr() and obeys the faults in effect. network is tcp, tcp4, tcp6, udp,
// udp4 or udp6; address's host must be an IP address (another node's, or
// the node's own loopback), because a resolver could create sockets on
// another thread, outside the node. Its signature is the adapters'
// Config.Dial.
func (n *Node) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	if err := checkAddress(network, address, false, "tcp", "udp"); err != nil {
		return nil, err
	}
	var d net.Dialer
	return inNode(n, "dial "+address+" from", func() (net.Conn, error) { return d.DialContext(ctx, network, address) })
}

// Listen listens in the node's namespace, like net.Listen; network is tcp,
// tcp4 or tcp6 and address's host an IP address or empty (every address of
// the node). Connections it accepts are the node's.
func (n *Node) Listen(network, address string) (net.Listener, error) {
	if err := checkAddress(network, address, true, "tcp"); err != nil {
		return nil, err
	}
	return inNode(n, "listen on "+address+" of", func() (net.Listener, error) { return net.Listen(network, address) })
}

// ListenPacket is net.ListenPacket in the node's namespace; network is
// udp, udp4 or udp6, address's host an IP address or empty.
func (n *Node) ListenPacket(network, address string) (net.PacketConn, error) {
	if err := checkAddress(network, address, true, "udp"); err != nil {
		return nil, err
	}
	return inNode(n, "listen on "+address+" of", func() (net.PacketConn, error) { return net.ListenPacket(network, address) })
}

// inNode runs f on a thread in n's namespace (see inNS).
func inNode[T any](n *Node, what string, f func() (T, error)) (T, error) {
	var v T
	ns, home, err := n.handles()
	if err != nil {
		return v, err
	}
	defer ns.Close()
	defer home.Close()
	err = inNS(ns, home, func() error {
		var err error
		v, err = f()
		return err
	})
	if err != nil {
		return v, fmt.Errorf("nodes: %s %s: %w", what, n, err)
	}
	return v, nil
}

// checkAddress accepts network if it starts with one of kinds ("tcp",
// "udp") and an address whose host is an IP address (or, for a listener,
// empty).
func checkAddress(network, address string, listen bool, kinds ...string) error {
	ok := false
	for _, k := range kinds {
		for _, v := range []string{"", "4", "6"} {
			ok = ok || network == k+v
		}
	}
	if !ok {
		return fmt.Errorf("nodes: network %q: want one of %v, with an optional 4 or 6", network, kinds)
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("nodes: address %q: %w", address, err)
	}
	if host == "" && listen {
		return nil
	}
	if _, err := netip.ParseAddr(host); err != nil {
		return fmt.Errorf("nodes: address %q: the host must be an IP address (a node's Addr, or 127.0.0.1), not a name", address)
	}
	return nil
}

// Processes are the pids of every process whose network namespace is the
// node's: those started with Start and their descendants (this process,
// whose threads visit nodes, is never one of them).
func (n *Node) Processes() ([]int, error) {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("nodes: processes of %s: %w", n, err)
	}
	self := os.Getpid()
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == self {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join("/proc", d.Name(), "ns", "net"), &st) != nil {
			continue // exited, or a zombie
		}
		if (nsID{st.Dev, st.Ino}) == n.ino {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// handles are copies of the node's and this process's namespace
// descriptors for one use, so that Close can close the originals while a
// Dial or Start is under way.
func (n *Node) handles() (ns, home netns.NsHandle, err error) {
	n.nw.fdMu.RLock()
	defer n.nw.fdMu.RUnlock()
	if n.nw.fdClosed {
		return -1, -1, fmt.Errorf("nodes: %s: the network is closed", n)
	}
	a, err := unix.FcntlInt(uintptr(n.ns), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, -1, fmt.Errorf("nodes: %s: %w", n, err)
	}
	b, err := unix.FcntlInt(uintptr(n.nw.home), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		unix.Close(a)
		return -1, -1, fmt.Errorf("nodes: %s: %w", n, err)
	}
	return netns.NsHandle(a), netns.NsHandle(b), nil
}
