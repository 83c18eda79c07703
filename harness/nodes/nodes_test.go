package nodes

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/locksuite/locksuite/internal/owner"
	"github.com/locksuite/locksuite/internal/servercheck"
	"github.com/vishvananda/netlink"
)

// The test binary doubles as the processes the tests put on nodes: with
// NODES_TEST_HELPER set it runs that helper instead of the tests.
func TestMain(m *testing.M) {
	switch os.Getenv("NODES_TEST_HELPER") {
	case "":
		code := m.Run()
		// Nothing this process made is left.
		if rec, err := owner.Self(); err == nil {
			links, _ := netlink.LinkList()
			for _, l := range links {
				if l.Attrs().Alias == aliasPrefix+rec {
					fmt.Printf("FAIL: link %s of these tests is left\n", l.Attrs().Name)
					code = 1
				}
			}
		}
		os.Exit(code)
	case "echo":
		echoServer(os.Getenv("NODES_TEST_LISTEN"))
	case "leak":
		leak()
	case "check":
		_, err := New(context.Background(), 2)
		fmt.Printf("%v\n%v\n", errors.Is(err, ErrNoPrivilege), err)
	}
	os.Exit(0)
}

// echoServer echoes every line back, on every connection.
func echoServer(addr string) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println("ready")
	for {
		c, err := l.Accept()
		if err != nil {
			os.Exit(1)
		}
		go func() {
			defer c.Close()
			r := bufio.NewReader(c)
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					return
				}
				io.WriteString(c, line)
			}
		}()
	}
}

// leak makes a network, starts sleep on n0, prints the bridge and sleep's
// pid, and waits to be killed.
func leak() {
	nw, err := New(context.Background(), 3)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	cmd := exec.Command("sleep", "60")
	if err := nw.Nodes()[0].Start(cmd); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println(nw.Bridge(), cmd.Process.Pid, nw.hubID.dev, nw.hubID.ino)
	time.Sleep(time.Minute)
}

// newNetwork makes n nodes or skips without privileges, and at the end
// closes them and checks that nothing of them is left.
func newNetwork(t *testing.T, n int) *Network {
	t.Helper()
	nw, err := New(t.Context(), n)
	if errors.Is(err, ErrNoPrivilege) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := nw.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		checkRemoved(t, nw)
	})
	return nw
}

// checkRemoved: no process holds nw's hub or nodes' namespaces (so the
// kernel has removed them, and with them every link of nw), and the host's
// namespace has no link of nw either.
func checkRemoved(t *testing.T, nw *Network) {
	t.Helper()
	ids := []nsID{nw.hubID}
	for _, n := range nw.nodes {
		ids = append(ids, n.ino)
	}
	if held := holders(ids...); len(held) > 0 {
		t.Errorf("after Close, namespaces of the network are still held: %v", held)
	}
	if left := hostLinksOf(t, nw.Bridge()); len(left) > 0 {
		t.Errorf("after Close, links of %s are left in the host's namespace: %v", nw.Bridge(), left)
	}
	for _, n := range nw.nodes {
		if pids, _ := n.Processes(); len(pids) > 0 {
			t.Errorf("after Close, processes %v are left on %s", pids, n)
		}
	}
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil && strings.Contains(string(out), prefix) {
		t.Errorf("ip netns list shows locksuite's: %s", out)
	}
}

// hostLinksOf lists the links named bridge or bridge+"n…" (its veths) in
// this process's namespace, where a Network makes none.
func hostLinksOf(t *testing.T, bridge string) []string {
	t.Helper()
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	return named(links, bridge)
}

// linksOf lists nw's bridge and its ports, in the hub.
func linksOf(t *testing.T, nw *Network) []string {
	t.Helper()
	links, err := nw.host.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	return named(links, nw.Bridge())
}

// holders lists the processes (/proc/<pid>/ns/net, or an open descriptor)
// that hold one of the namespaces ids. A namespace nothing holds is gone.
func holders(ids ...nsID) []string {
	var out []string
	paths, _ := filepath.Glob("/proc/[0-9]*/ns/net")
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, p := range append(paths, fds...) {
		var st syscall.Stat_t
		if syscall.Stat(p, &st) != nil {
			continue
		}
		if slices.Contains(ids, nsID{st.Dev, st.Ino}) {
			out = append(out, p)
		}
	}
	return out
}

func named(links []netlink.Link, bridge string) []string {
	var out []string
	for _, l := range links {
		if name := l.Attrs().Name; name == bridge || strings.HasPrefix(name, bridge+"n") {
			out = append(out, name)
		}
	}
	return out
}

// servers listens on port 7000 of every node and accepts (and closes)
// connections until the test ends.
func servers(t *testing.T, nw *Network) {
	t.Helper()
	for _, n := range nw.Nodes() {
		l, err := n.Listen("tcp", net.JoinHostPort(n.Addr().String(), "7000"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		servercheck.AcceptAndClose(l)
	}
}

// checkReach tries a TCP connect from every node to every other node's
// port 7000, all at once, and compares which succeeded with want(from, to).
// A pair that should connect gets reachWait, a pair that should not gets
// cutWait: across a cut the SYN is dropped, so it would never connect,
// while an uncut pair on this bridge connects in well under a millisecond
// (cutWait only keeps the test short; reachWait is long for a loaded
// machine).
const (
	cutWait   = time.Second
	reachWait = 10 * time.Second
)

func checkReach(t *testing.T, nw *Network, what string, want func(a, b int) bool) [][]bool {
	t.Helper()
	nodes := nw.Nodes()
	got := make([][]bool, len(nodes))
	var wg sync.WaitGroup
	for i, a := range nodes {
		got[i] = make([]bool, len(nodes))
		for j, b := range nodes {
			if i == j {
				continue
			}
			wait := cutWait
			if want(i, j) {
				wait = reachWait
			}
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(t.Context(), wait)
				defer cancel()
				c, err := a.Dial(ctx, "tcp", net.JoinHostPort(b.Addr().String(), "7000"))
				if err == nil {
					c.Close()
					got[i][j] = true
				}
			})
		}
	}
	wg.Wait()
	for a := range got {
		for b := range got {
			if a != b && got[a][b] != want(a, b) {
				t.Errorf("%s: TCP connect n%d -> n%d succeeded=%v, want %v", what, a, b, got[a][b], want(a, b))
			}
		}
	}
	return got
}

func all(a, b int) bool { return true }

// TestNetwork: five nodes, each with its address, reach each other, have
// no route out, and New and Close leave nothing behind. It logs the time
// to create and remove them.
func TestNetwork(t *testing.T) {
	begin := time.Now()
	nw := newNetwork(t, 5)
	created := time.Since(begin)
	if !nw.Subnet().Contains(nw.Nodes()[4].Addr()) || nw.Nodes()[4].Addr().As4()[3] != 14 {
		t.Errorf("n4's address %s: want 10.77.X.14 in %s", nw.Nodes()[4].Addr(), nw.Subnet())
	}
	if got := linksOf(t, nw); len(got) != 6 {
		t.Errorf("links of %s in the hub: %v, want the bridge and 5 veths", nw.Bridge(), got)
	}
	if got := hostLinksOf(t, nw.Bridge()); len(got) != 0 {
		t.Errorf("links of %s in the host's namespace: %v, want none", nw.Bridge(), got)
	}
	servers(t, nw)
	checkReach(t, nw, "fresh network", all)

	// Every thread that visited a node for a Dial or a Listen is back home
	// (or gone).
	home := nsOf(t, "/proc/self/ns/net")
	tasks, _ := filepath.Glob("/proc/self/task/*/ns/net")
	for _, task := range tasks {
		var st syscall.Stat_t
		if syscall.Stat(task, &st) == nil && (nsID{st.Dev, st.Ino}) != home {
			t.Errorf("thread %s is left in another network namespace", task)
		}
	}

	// No route out: an address outside the subnet is unreachable at once,
	// without a packet sent. 10.78.0.1 is never contacted: the node has no
	// route to it.
	_, err := nw.Nodes()[0].Dial(t.Context(), "udp", "10.78.0.1:9")
	if !errors.Is(err, syscall.ENETUNREACH) {
		t.Errorf("dial outside the subnet from a node: %v, want network is unreachable", err)
	}
	if _, err := nw.Nodes()[0].Dial(t.Context(), "tcp", "localhost:7000"); err == nil || !strings.Contains(err.Error(), "IP address") {
		t.Errorf("Dial to a name: %v, want an error asking for an IP address", err)
	}

	begin = time.Now()
	if err := nw.Close(); err != nil {
		t.Fatal(err)
	}
	removed := time.Since(begin)
	checkRemoved(t, nw)
	if _, err := nw.Nodes()[0].Dial(t.Context(), "tcp", "10.77.0.11:7000"); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Dial after Close: %v, want an error saying the network is closed", err)
	}
	if err := nw.Nodes()[0].Start(exec.Command("true")); err == nil {
		t.Error("Start after Close: no error")
	}
	t.Logf("5 nodes: created in %v, removed in %v", created.Round(time.Millisecond), removed.Round(time.Millisecond))
}

// nsOf identifies the namespace file path (/proc/<pid>/ns/net).
func nsOf(t *testing.T, path string) nsID {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return nsID{st.Dev, st.Ino}
}

// TestRemoveStale: RemoveStale deletes a locksuite link still unlabelled
// a second after it saw it (a run killed between creating and labelling
// it) and one whose owner is dead, and keeps one of a live owner and one
// without the prefix.
func TestRemoveStale(t *testing.T) {
	if err := Check(); err != nil {
		t.Skip(err)
	}
	rec, err := owner.Self()
	if err != nil {
		t.Fatal(err)
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	tag := itoa(os.Getpid() % 1000)
	links := []struct {
		name, alias string
		removed     bool
	}{
		{prefix + "U" + tag, "", true},
		{prefix + "D" + tag, aliasPrefix + itoa(dead.Process.Pid) + " 1", true},
		{prefix + "L" + tag, aliasPrefix + rec, false},
		{"lsnodesX" + tag, "", false},
	}
	for _, l := range links {
		attrs := netlink.NewLinkAttrs()
		attrs.Name = l.name
		br := &netlink.Bridge{LinkAttrs: attrs}
		if err := netlink.LinkAdd(br); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { netlink.LinkDel(br) })
		if l.alias != "" {
			if err := netlink.LinkSetAlias(br, l.alias); err != nil {
				t.Fatal(err)
			}
		}
	}
	removed, err := RemoveStale()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		_, err := netlink.LinkByName(l.name)
		if gone := err != nil; gone != l.removed || slices.Contains(removed, l.name) != l.removed {
			t.Errorf("link %s (alias %q): gone=%v, in RemoveStale's list=%v; want %v", l.name, l.alias, gone, slices.Contains(removed, l.name), l.removed)
		}
	}
}
