package nodes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Putting a Fault into effect on a Network: every node's drop set filled
// (rules.go) and processes stopped, and all of it undone by heal.

// Span is one injected fault as it happened, for a timeline.
type Span struct {
	Kind Kind
	What string // the fault's String
	// Start is taken before the first change, End after the last change of
	// heal: the fault may have acted at any time in between. End is zero
	// while the fault is in effect.
	Start, End time.Time
}

// injection is a fault in effect.
type injection struct {
	span    int     // index in Network.spans
	cut     []*Node // nodes whose drop set is filled
	stopped []int   // pids stopped
}

// Inject puts f into effect on every node and returns heal, which undoes
// it. One fault is in effect at a time: Inject fails while another is not
// healed. When Inject returns, the fault holds on every node (nodes are
// changed one after another, for a few milliseconds in all). If it fails,
// whatever it changed is undone. heal restores everything (every packet
// delivered again, every stopped process continued), records the span's
// end, and is idempotent: after it succeeded, calling it again does
// nothing; after it failed, calling it again retries. Network.Heal heals
// whatever is in effect.
func (nw *Network) Inject(ctx context.Context, f Fault) (heal func() error, err error) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	if nw.closed {
		return nil, errors.New("nodes: Inject on a closed Network")
	}
	if nw.active != nil {
		return nil, fmt.Errorf("nodes: Inject %s: %s is in effect; heal it first", f, nw.spans[nw.active.span].What)
	}
	e, err := f.effect(len(nw.nodes))
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("nodes: Inject %s: %w", f, err)
	}
	inj := &injection{span: len(nw.spans)}
	nw.spans = append(nw.spans, Span{Kind: f.Kind(), What: f.String(), Start: time.Now()})
	nw.active = inj
	fail := func(err error) (func() error, error) {
		return nil, errors.Join(err, nw.heal(inj))
	}
	for to, from := range e.drop {
		if len(from) == 0 {
			continue
		}
		src := make([]*Node, len(from))
		for i, f := range from {
			src[i] = nw.nodes[f]
		}
		inj.cut = append(inj.cut, nw.nodes[to])
		if err := nw.nodes[to].dropFrom(src); err != nil {
			return fail(err)
		}
	}
	for _, i := range e.stop {
		if err := nw.nodes[i].stopAll(ctx, inj); err != nil {
			return fail(err)
		}
	}
	return func() error {
		nw.mu.Lock()
		defer nw.mu.Unlock()
		return nw.heal(inj)
	}, nil
}

// Heal heals the fault in effect, if any.
func (nw *Network) Heal() error {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	if nw.active == nil {
		return nil
	}
	return nw.heal(nw.active)
}

// heal undoes inj unless it is healed already. nw.mu is held.
func (nw *Network) heal(inj *injection) error {
	if nw.active != inj {
		return nil
	}
	var errs []error
	var cut []*Node
	for _, n := range inj.cut {
		if err := n.acceptAll(); err != nil {
			errs = append(errs, err)
			cut = append(cut, n) // retried by the next heal
		}
	}
	inj.cut = cut
	var stopped []int
	for _, pid := range inj.stopped {
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil && err != syscall.ESRCH {
			errs = append(errs, fmt.Errorf("nodes: SIGCONT %d: %w", pid, err))
			stopped = append(stopped, pid)
		}
	}
	inj.stopped = stopped
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	nw.spans[inj.span].End = time.Now()
	nw.active = nil
	return nil
}

// stopAll sends SIGSTOP to every process on the node, scanning again until
// a scan finds no running one (a process may fork while it is being
// stopped).
func (n *Node) stopAll(ctx context.Context, inj *injection) error {
	for round := 0; ; round++ {
		pids, err := n.Processes()
		if err != nil {
			return err
		}
		fresh := 0
		for _, pid := range pids {
			if slices.Contains(inj.stopped, pid) {
				continue
			}
			fresh++
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				if err == syscall.ESRCH {
					continue
				}
				return fmt.Errorf("nodes: SIGSTOP %d on %s: %w", pid, n, err)
			}
			inj.stopped = append(inj.stopped, pid)
			if err := waitStopped(ctx, pid); err != nil {
				return fmt.Errorf("nodes: stop %s: %w", n, err)
			}
		}
		if fresh == 0 {
			return nil
		}
		if round == 100 {
			return fmt.Errorf("nodes: stop %s: new processes kept appearing after 100 scans", n)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("nodes: stop %s: %w", n, err)
		}
	}
}

// waitStopped returns once every thread of pid is stopped (or pid is gone):
// SIGSTOP is delivered after kill returns.
func waitStopped(ctx context.Context, pid int) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		running := false
		for _, task := range tasks {
			b, err := os.ReadFile(task)
			if err != nil {
				continue // the thread is gone
			}
			s := string(b)
			if f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); len(f) > 0 && f[0] != "T" && f[0] != "t" && f[0] != "Z" && f[0] != "X" {
				running = true
			}
		}
		if !running {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("process %d did not stop: %w", pid, ctx.Err())
		}
		time.Sleep(time.Millisecond)
	}
}

// Spans are the faults injected so far, in order.
func (nw *Network) Spans() []Span {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return slices.Clone(nw.spans)
}
