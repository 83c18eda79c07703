package nodes

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
)

// A Fault is something the nemesis does to a Network, until healed. The
// faults are a closed set, each with an exact contract:
//
//   - Partition: disjoint groups of nodes. Every packet between two nodes of
//     different groups is lost, in both directions; within a group,
//     everything is delivered. Halves and Isolate build one.
//   - Ring (majorities ring): every node of the ring exchanges packets with
//     a majority of the ring, itself included, and no two nodes see the
//     same majority; packets between the other pairs are lost both ways.
//   - OneWay: every packet from a node of From to a node of To is lost; the
//     other direction, and everything else, is delivered.
//   - Stop: every process on the given nodes gets SIGSTOP at Inject, which
//     returns once all their threads are stopped, and SIGCONT at heal; the
//     network is untouched.
//
// "Lost" means dropped on arrival by the receiving node (see initRules), on
// established connections too, without any notice to the sender: TCP
// connects across a cut time out and open connections see silence. A TCP
// connection needs packets both ways, so under OneWay it fails in both
// directions (SYNs from From are lost; from To, the SYN arrives and the
// SYN-ACK is lost); one-way delivery shows with UDP, or as a half-open
// connection. Loopback traffic inside a node is never affected, and a node
// a fault does not name (in no group, not on the ring, in neither From nor
// To) keeps every link: that is where a store or an observer that every
// side must reach lives. The constructors that draw nodes (Halves,
// Isolate, MajoritiesRing, Schedule) draw them among a given list; All(n)
// lists every node.
type Fault interface {
	// Kind is the fault's name in a schedule: halves, isolate, partition,
	// ring, one-way or node-stop.
	Kind() Kind
	// String says exactly what the fault does, with node names:
	// "halves n0,n3 | n1,n2,n4".
	String() string
	// effect checks the fault against a network of n nodes.
	effect(n int) (effect, error)
}

// Kind names a kind of fault.
type Kind string

// The kinds of fault; Schedule draws them.
const (
	KindHalves    Kind = "halves"
	KindIsolate   Kind = "isolate"
	KindPartition Kind = "partition" // a Partition built by hand
	KindRing      Kind = "ring"
	KindOneWay    Kind = "one-way"
	KindStop      Kind = "node-stop"
)

// effect is a fault on a concrete network: drop[to] lists every node whose
// packets node to loses; stop lists the nodes whose processes stop.
type effect struct {
	drop [][]int
	stop []int
}

// Partition is a set of disjoint groups of node indices: nodes in
// different groups cannot reach each other. Nodes in no group are
// unaffected.
type Partition struct {
	Groups [][]int
	kind   Kind // halves, isolate, or "" (partition)
}

// All lists the nodes of a network of n: 0, 1, …, n-1.
func All(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// Halves splits the nodes among at random into two halves: a shuffle, then
// the first len/2 against the others (the second half is the majority when
// the count is odd).
func Halves(rng *rand.Rand, among []int) Partition {
	p := shuffled(rng, among)
	n := len(p)
	a, b := slices.Clone(p[:n/2]), slices.Clone(p[n/2:])
	slices.Sort(a)
	slices.Sort(b)
	return Partition{Groups: [][]int{a, b}, kind: KindHalves}
}

// Isolate cuts the given nodes (say a leader and the clients attached to
// it) off from the other nodes among: two groups, these and the others.
func Isolate(among []int, nodes ...int) Partition {
	in := slices.Clone(nodes)
	slices.Sort(in)
	var rest []int
	for _, i := range among {
		if !slices.Contains(in, i) {
			rest = append(rest, i)
		}
	}
	return Partition{Groups: [][]int{in, rest}, kind: KindIsolate}
}

// Kind is halves or isolate for a Partition from those, else partition.
func (p Partition) Kind() Kind {
	if p.kind == "" {
		return KindPartition
	}
	return p.kind
}

func (p Partition) String() string {
	g := make([]string, len(p.Groups))
	for i, grp := range p.Groups {
		g[i] = Names(grp)
	}
	return string(p.Kind()) + " " + strings.Join(g, " | ")
}

func (p Partition) effect(n int) (effect, error) {
	group := make([]int, n)
	for i := range group {
		group[i] = -1
	}
	for gi, grp := range p.Groups {
		if len(grp) == 0 {
			return effect{}, fmt.Errorf("nodes: %s: an empty group", p)
		}
		for _, i := range grp {
			if i < 0 || i >= n {
				return effect{}, fmt.Errorf("nodes: %s: no node %d on a network of %d", p, i, n)
			}
			if group[i] >= 0 {
				return effect{}, fmt.Errorf("nodes: %s: n%d is in two groups", p, i)
			}
			group[i] = gi
		}
	}
	return dropUnless(n, func(a, b int) bool { return group[a] < 0 || group[b] < 0 || group[a] == group[b] }), nil
}

// Ring is Jepsen's majorities ring: the k nodes in Order form a ring, and
// each exchanges packets with the ring's nodes at most D places away on it,
// D the least with 2D+1 ≥ k/2+1 (a majority of the ring). Each node sees
// the 2D+1 nodes around it; with k ≥ 4, 2D+1 < k, so no two nodes see the
// same majority. Seeing is symmetric: a reaches b exactly when b reaches
// a. Nodes not in Order are unaffected.
type Ring struct {
	Order []int // distinct node indices, at least 4
}

// MajoritiesRing is a Ring of the nodes among in a random order.
func MajoritiesRing(rng *rand.Rand, among []int) Ring { return Ring{Order: shuffled(rng, among)} }

// shuffled is a random permutation of nodes.
func shuffled(rng *rand.Rand, nodes []int) []int {
	out := slices.Clone(nodes)
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// Kind is ring.
func (Ring) Kind() Kind { return KindRing }

func (r Ring) String() string {
	s := make([]string, len(r.Order))
	for i, v := range r.Order {
		s[i] = fmt.Sprintf("n%d", v)
	}
	return fmt.Sprintf("ring %s (each sees %d either side)", strings.Join(s, "~"), ringReach(len(r.Order)))
}

// ringReach is D for n nodes.
func ringReach(n int) int {
	m := n/2 + 1
	return m / 2 // least D with 2D+1 ≥ m
}

func (r Ring) effect(n int) (effect, error) {
	k := len(r.Order)
	if k < 4 {
		return effect{}, fmt.Errorf("nodes: %s: a majorities ring needs at least 4 nodes (with %d, every majority view is everybody's or views are not symmetric)", r, k)
	}
	pos := make([]int, n)
	for i := range pos {
		pos[i] = -1
	}
	for p, i := range r.Order {
		if i < 0 || i >= n {
			return effect{}, fmt.Errorf("nodes: %s: no node %d on a network of %d", r, i, n)
		}
		if pos[i] >= 0 {
			return effect{}, fmt.Errorf("nodes: %s: n%d is on the ring twice", r, i)
		}
		pos[i] = p
	}
	d := ringReach(k)
	return dropUnless(n, func(a, b int) bool {
		if pos[a] < 0 || pos[b] < 0 {
			return true
		}
		dist := (pos[a] - pos[b] + k) % k
		return min(dist, k-dist) <= d
	}), nil
}

// OneWay loses every packet from a node of From to a node of To. From and
// To are disjoint and non-empty; nodes in neither are unaffected.
type OneWay struct {
	From, To []int
}

// Kind is one-way.
func (OneWay) Kind() Kind { return KindOneWay }

func (o OneWay) String() string { return fmt.Sprintf("one-way %s -> %s", Names(o.From), Names(o.To)) }

func (o OneWay) effect(n int) (effect, error) {
	if len(o.From) == 0 || len(o.To) == 0 {
		return effect{}, fmt.Errorf("nodes: %s: From and To must not be empty", o)
	}
	for _, i := range append(slices.Clone(o.From), o.To...) {
		if i < 0 || i >= n {
			return effect{}, fmt.Errorf("nodes: %s: no node %d on a network of %d", o, i, n)
		}
	}
	for _, i := range o.From {
		if slices.Contains(o.To, i) {
			return effect{}, fmt.Errorf("nodes: %s: n%d is in From and To", o, i)
		}
	}
	e := effect{drop: make([][]int, n)}
	for _, to := range o.To {
		e.drop[to] = slices.Clone(o.From)
	}
	return e, nil
}

// Stop stops every process on the given nodes (SIGSTOP) until heal
// (SIGCONT): the processes on the node when Inject runs, found by their
// network namespace, children included. Processes started on the node
// later run. A client that lives in this process (Node.Dial) is not
// stopped.
type Stop struct {
	Nodes []int
}

// Kind is node-stop.
func (Stop) Kind() Kind { return KindStop }

func (p Stop) String() string { return "node-stop " + Names(p.Nodes) }

func (p Stop) effect(n int) (effect, error) {
	if len(p.Nodes) == 0 {
		return effect{}, fmt.Errorf("nodes: %s: no node to stop", p)
	}
	for _, i := range p.Nodes {
		if i < 0 || i >= n {
			return effect{}, fmt.Errorf("nodes: %s: no node %d on a network of %d", p, i, n)
		}
	}
	return effect{stop: slices.Clone(p.Nodes)}, nil
}

// dropUnless is the effect that loses every packet between a and b unless
// sees(a, b).
func dropUnless(n int, sees func(a, b int) bool) effect {
	e := effect{drop: make([][]int, n)}
	for to := range n {
		for from := range n {
			if from != to && !sees(from, to) {
				e.drop[to] = append(e.drop[to], from)
			}
		}
	}
	return e
}

// Names names the given nodes: "n0,n3".
func Names(nodes []int) string {
	s := make([]string, len(nodes))
	for i, v := range nodes {
		s[i] = fmt.Sprintf("n%d", v)
	}
	return strings.Join(s, ",")
}

// Schedule draws count faults among the given nodes from seed: each
// fault's kind is drawn from kinds (all of halves, isolate, ring, one-way
// and node-stop if none are given), then its nodes among among: halves as
// Halves, isolate and node-stop one node, one-way random halves (the first
// half From, the other To), ring as MajoritiesRing. The same seed, nodes,
// count and kinds give the same faults: print the seed to reproduce a run.
func Schedule(seed uint64, among []int, count int, kinds ...Kind) ([]Fault, error) {
	if len(among) < 2 {
		return nil, fmt.Errorf("nodes: Schedule among %v: need at least 2 nodes", among)
	}
	n := slices.Max(among) + 1
	if len(kinds) == 0 {
		kinds = []Kind{KindHalves, KindIsolate, KindRing, KindOneWay, KindStop}
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var out []Fault
	for range count {
		var f Fault
		switch k := kinds[rng.IntN(len(kinds))]; k {
		case KindHalves:
			f = Halves(rng, among)
		case KindIsolate:
			f = Isolate(among, among[rng.IntN(len(among))])
		case KindRing:
			f = MajoritiesRing(rng, among)
		case KindOneWay:
			h := Halves(rng, among)
			f = OneWay{From: h.Groups[0], To: h.Groups[1]}
		case KindStop:
			f = Stop{Nodes: []int{among[rng.IntN(len(among))]}}
		default:
			return nil, fmt.Errorf("nodes: Schedule: kind %q: want halves, isolate, ring, one-way or node-stop", k)
		}
		if _, err := f.effect(n); err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}
