package nodes

import (
	"bufio"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/locksuite/locksuite/internal/spawn"
)

// TestPartitions: under each partition a TCP connect across the cut fails
// and one within a side succeeds, for every ordered pair of five nodes;
// after heal every pair connects again. Expectations come from the groups
// (and for the ring from its order), not from the package's own effect.
func TestPartitions(t *testing.T) {
	nw := newNetwork(t, 5)
	servers(t, nw)
	rng := rand.New(rand.NewPCG(12, 12))
	// A node in no group reaches every node.
	sameGroup := func(p Partition) func(a, b int) bool {
		return func(a, b int) bool {
			for _, g := range p.Groups {
				if slices.Contains(g, a) {
					return slices.Contains(g, b) || !slices.ContainsFunc(p.Groups, func(g []int) bool { return slices.Contains(g, b) })
				}
			}
			return true
		}
	}
	halves := Halves(rng, All(5))
	isolate := Isolate(All(5), 3)
	three := Partition{Groups: [][]int{{0}, {1, 4}, {3}}} // n2 in none
	ring := MajoritiesRing(rng, All(5))
	// With five nodes each node sees itself and its two ring neighbours.
	neighbours := func(a, b int) bool {
		i, j := slices.Index(ring.Order, a), slices.Index(ring.Order, b)
		return (i-j+5)%5 == 1 || (j-i+5)%5 == 1
	}
	for _, c := range []struct {
		f    Fault
		want func(a, b int) bool
	}{
		{halves, sameGroup(halves)},
		{isolate, sameGroup(isolate)},
		{three, sameGroup(three)},
		{ring, neighbours},
	} {
		begin := time.Now()
		heal, err := nw.Inject(t.Context(), c.f)
		if err != nil {
			t.Fatal(err)
		}
		injected := time.Since(begin)
		got := checkReach(t, nw, c.f.String(), c.want)
		if c.f.Kind() == KindRing {
			checkMajoritiesRing(t, got)
		}
		if _, err := nw.Inject(t.Context(), Isolate(All(5), 0)); err == nil || !strings.Contains(err.Error(), "heal it first") {
			t.Errorf("a second Inject while %s is in effect: %v, want an error", c.f, err)
		}
		begin = time.Now()
		if err := heal(); err != nil {
			t.Fatal(err)
		}
		healed := time.Since(begin)
		if err := heal(); err != nil {
			t.Errorf("second heal: %v, want nil (idempotent)", err)
		}
		checkReach(t, nw, "healed after "+c.f.String(), all)
		t.Logf("%s: injected in %v, healed in %v", c.f, injected.Round(time.Microsecond), healed.Round(time.Microsecond))
	}
	spans := nw.Spans()
	if len(spans) != 4 {
		t.Fatalf("spans: %v, want 4", spans)
	}
	for _, s := range spans {
		if s.End.Before(s.Start) || s.End.IsZero() {
			t.Errorf("span %+v: want Start ≤ End, End set after heal", s)
		}
	}
	if spans[3].Kind != KindRing || spans[3].What != ring.String() {
		t.Errorf("last span %+v, want the ring", spans[3])
	}
}

// checkMajoritiesRing: seeing is symmetric, every node sees a majority
// (itself included), and no two see the same set.
func checkMajoritiesRing(t *testing.T, got [][]bool) {
	t.Helper()
	n := len(got)
	seen := map[string]bool{}
	for a := range n {
		count, key := 1, ""
		for b := range n {
			if a != b && got[a][b] {
				count++
			}
			if a != b && got[a][b] != got[b][a] {
				t.Errorf("ring: n%d->n%d %v but n%d->n%d %v", a, b, got[a][b], b, a, got[b][a])
			}
			if a == b || got[a][b] {
				key += string(rune('0' + b))
			}
		}
		if count < n/2+1 {
			t.Errorf("ring: n%d sees %d nodes, want a majority of %d", a, count, n)
		}
		if seen[key] {
			t.Errorf("ring: n%d sees the same nodes (%s) as another node", a, key)
		}
		seen[key] = true
	}
}

// TestOneWay: every UDP datagram from From to To is lost and every other
// one delivered, for every ordered pair; TCP fails both ways across the
// cut (it needs packets in both directions), and heal restores all.
func TestOneWay(t *testing.T) {
	nw := newNetwork(t, 5)
	servers(t, nw)
	f := OneWay{From: []int{0, 1}, To: []int{2, 3, 4}}
	heal, err := nw.Inject(t.Context(), f)
	if err != nil {
		t.Fatal(err)
	}
	from := func(a, b int) bool { return !(slices.Contains(f.From, a) && slices.Contains(f.To, b)) }
	checkUDP(t, nw, f.String(), from)
	both := func(a, b int) bool { return from(a, b) && from(b, a) }
	checkReach(t, nw, f.String()+" (TCP)", both)
	if err := heal(); err != nil {
		t.Fatal(err)
	}
	checkUDP(t, nw, "healed", all)
	checkReach(t, nw, "healed (TCP)", all)
}

// checkUDP sends three datagrams "a b" from every node a to every node b
// and compares what arrived with want. Datagrams on a local bridge are not
// lost by accident; three copies cover the unlikely. Each receiver reads
// until a second after the last send.
func checkUDP(t *testing.T, nw *Network, what string, want func(a, b int) bool) {
	t.Helper()
	nodes := nw.Nodes()
	conns := make([]net.PacketConn, len(nodes))
	for i, n := range nodes {
		pc, err := n.ListenPacket("udp", net.JoinHostPort(n.Addr().String(), "7001"))
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		conns[i] = pc
	}
	for a, pc := range conns {
		for b, n := range nodes {
			if a == b {
				continue
			}
			to := net.UDPAddrFromAddrPort(netipAddrPort(n, 7001))
			for range 3 {
				if _, err := pc.WriteTo([]byte{byte(a), byte(b)}, to); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	deadline := time.Now().Add(time.Second)
	got := make([][]bool, len(nodes))
	var wg sync.WaitGroup
	for b, pc := range conns {
		got[b] = make([]bool, len(nodes))
		pc.SetReadDeadline(deadline)
		wg.Go(func() {
			buf := make([]byte, 16)
			for {
				k, _, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				if k == 2 && int(buf[1]) == b && int(buf[0]) < len(nodes) {
					got[b][buf[0]] = true
				}
			}
		})
	}
	wg.Wait()
	for a := range nodes {
		for b := range nodes {
			if a != b && got[b][a] != want(a, b) {
				t.Errorf("%s: UDP n%d -> n%d delivered=%v, want %v", what, a, b, got[b][a], want(a, b))
			}
		}
	}
}

// TestNodeStop: node-stop stops the echo server process on n1 (it stops
// answering, its state is T) and heal continues it (the pending line is
// answered). Node.Start put it in n1's namespace: n0 reaches it at n1's
// address, and n1's Processes lists it.
func TestNodeStop(t *testing.T) {
	nw := newNetwork(t, 2)
	n0, n1 := nw.Nodes()[0], nw.Nodes()[1]
	addr := net.JoinHostPort(n1.Addr().String(), "7002")
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "NODES_TEST_HELPER=echo", "NODES_TEST_LISTEN="+addr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := n1.Start(cmd); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		t.Fatalf("echo server on n1: %q", line)
	}
	if pids, _ := n1.Processes(); !slices.Contains(pids, cmd.Process.Pid) {
		t.Errorf("n1's processes %v lack the echo server %d", pids, cmd.Process.Pid)
	}
	if nsOf(t, "/proc/"+itoa(cmd.Process.Pid)+"/ns/net") != n1.ino {
		t.Errorf("the echo server is not in n1's namespace")
	}
	// The spawning thread went home: the next plain child is in ours.
	sleep := exec.Command("sleep", "10")
	if err := spawn.Start(sleep); err != nil {
		t.Fatal(err)
	}
	if nsOf(t, "/proc/"+itoa(sleep.Process.Pid)+"/ns/net") != nsOf(t, "/proc/self/ns/net") {
		t.Errorf("a child started with spawn.Start after one on a node is not in this process's namespace")
	}
	sleep.Process.Kill()
	sleep.Wait()
	if pids, _ := n0.Processes(); len(pids) != 0 {
		t.Errorf("n0's processes: %v, want none", pids)
	}
	c, err := n0.Dial(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	echo := func(within time.Duration) (string, error) {
		c.SetDeadline(time.Now().Add(within))
		return r.ReadString('\n')
	}
	c.Write([]byte("one\n"))
	if got, err := echo(5 * time.Second); got != "one\n" {
		t.Fatalf("echo before the stop: %q, %v", got, err)
	}

	heal, err := nw.Inject(t.Context(), Stop{Nodes: []int{1}})
	if err != nil {
		t.Fatal(err)
	}
	if s := procState(t, cmd.Process.Pid); s != "T" {
		t.Errorf("echo server state during node-stop: %q, want T (stopped)", s)
	}
	c.Write([]byte("two\n"))
	// A stopped process cannot answer: this wait cannot end in a reply.
	if got, err := echo(300 * time.Millisecond); err == nil {
		t.Errorf("a stopped echo server answered %q", got)
	}
	if err := heal(); err != nil {
		t.Fatal(err)
	}
	if s := procState(t, cmd.Process.Pid); s == "T" {
		t.Errorf("echo server state after heal: T, want running or sleeping")
	}
	if got, err := echo(5 * time.Second); got != "two\n" {
		t.Errorf("echo after heal: %q, %v; want the line sent during the stop", got, err)
	}
}

// procState is the state letter of /proc/<pid>/stat.
func procState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0]
}

// TestKilledCoordinator: a process that made nodes and started a child on
// one is killed (SIGKILL, and SIGINT without a handler); its child dies
// with it and the kernel removes its namespaces, the hub's included, and
// with them every link of its network: nothing is left for anyone to clean.
func TestKilledCoordinator(t *testing.T) {
	if err := Check(); err != nil {
		t.Skip(err)
	}
	for _, sig := range []os.Signal{os.Kill, os.Interrupt} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), "NODES_TEST_HELPER=leak")
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, _ := bufio.NewReader(out).ReadString('\n')
			var bridge string
			var child int
			var hub nsID
			if _, err := fmtSscan(line, &bridge, &child, &hub.dev, &hub.ino); err != nil {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("leak helper: %q", line)
			}
			if held := holders(hub); len(held) == 0 {
				t.Errorf("before the kill, nothing holds the hub: the helper's line %q names the wrong namespace", line)
			}
			if left := hostLinksOf(t, bridge); len(left) > 0 {
				t.Errorf("before the kill, links %v of the run are in the host's namespace, want none", left)
			}
			cmd.Process.Signal(sig)
			cmd.Wait()
			// The child on n0 dies by its Pdeathsig, asynchronously.
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) && (alive(child) || len(holders(hub)) > 0) {
				time.Sleep(20 * time.Millisecond)
			}
			if alive(child) {
				t.Errorf("the child %d on a node outlived its killed coordinator", child)
			}
			if held := holders(hub); len(held) > 0 {
				t.Errorf("after the kill, the hub (bridge and veths) is still held: %v", held)
			}
			if left := hostLinksOf(t, bridge); len(left) > 0 {
				t.Errorf("after the kill, links %v are left in the host's namespace", left)
			}
		})
	}
}

// alive: pid runs and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0] != "Z"
}

// TestNoPrivilege: a process without CAP_NET_ADMIN and CAP_SYS_ADMIN (this
// test binary run as nobody) gets an error that wraps ErrNoPrivilege and
// says to run as root or in a privileged container.
func TestNoPrivilege(t *testing.T) {
	if Check() != nil {
		_, err := New(t.Context(), 2)
		checkNoPrivilege(t, errorsIs(err), errString(err))
		return
	}
	// Run a copy of the test binary, readable by nobody, as nobody (in a
	// directory of its own under /tmp: t.TempDir's parent is private).
	dir, err := os.MkdirTemp("", "locksuite-nodes-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	bin := dir + "/nodes.test"
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "NODES_TEST_HELPER=check")
	cmd.SysProcAttr = nobody()
	outb, err := cmd.Output()
	if err != nil {
		t.Fatalf("test binary as nobody: %v: %s", err, outb)
	}
	is, msg, _ := strings.Cut(string(outb), "\n")
	checkNoPrivilege(t, is == "true", msg)
}

func checkNoPrivilege(t *testing.T, is bool, msg string) {
	t.Helper()
	if !is {
		t.Errorf("New without privileges: %q does not wrap ErrNoPrivilege", msg)
	}
	for _, want := range []string{"CAP_NET_ADMIN", "sudo", "--privileged"} {
		if !strings.Contains(msg, want) {
			t.Errorf("New without privileges: %q does not mention %s", msg, want)
		}
	}
}

// TestEstablishedConnectionCut: a partition cuts a connection that is
// already open (nothing arrives, nothing is reported), and after heal TCP's
// retransmission delivers what was sent meanwhile.
func TestEstablishedConnectionCut(t *testing.T) {
	nw := newNetwork(t, 2)
	n0, n1 := nw.Nodes()[0], nw.Nodes()[1]
	l, err := n1.Listen("tcp", net.JoinHostPort(n1.Addr().String(), "7003"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()
	c, err := n0.Dial(t.Context(), "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	echo := func(msg string, within time.Duration) (string, error) {
		c.SetDeadline(time.Now().Add(within))
		buf := make([]byte, len(msg))
		_, err := io.ReadFull(c, buf)
		return string(buf), err
	}
	c.Write([]byte("one"))
	if got, err := echo("one", reachWait); err != nil {
		t.Fatalf("echo before the cut: %q, %v", got, err)
	}
	heal, err := nw.Inject(t.Context(), Isolate(All(2), 1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("two")); err != nil {
		t.Errorf("write on a cut connection: %v, want it accepted (nothing tells the sender)", err)
	}
	if got, err := echo("two", cutWait); err == nil {
		t.Errorf("an echo crossed the cut: %q", got)
	}
	if err := heal(); err != nil {
		t.Fatal(err)
	}
	if got, err := echo("two", reachWait); err != nil || got != "two" {
		t.Errorf("echo after heal: %q, %v; want the bytes sent during the cut", got, err)
	}
}
