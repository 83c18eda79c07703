package checker

import (
	"fmt"
	"math"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/locksuite/locksuite/harness/history"
)

// Linearity is the answer of the second checker, Linearizable: it has three
// states because the search can time out.
type Linearity string

const (
	// LinOK: the history is linearizable against the model.
	LinOK Linearity = "ok"
	// LinIllegal: no linearization exists: some critical section did not
	// see the effect of one that came before it, or the final counter is
	// not what the accepted sections add up to.
	LinIllegal Linearity = "illegal"
	// LinUnknown: the search did not finish within its timeout.
	LinUnknown Linearity = "unknown"
)

// DefaultLinearizeTimeout bounds the linearizability search in Judge.
const DefaultLinearizeTimeout = 10 * time.Second

// linOp is one operation of the model's history.
type linOp struct {
	final  bool  // the checker's read of the counter after the run
	maybe  bool  // an ambiguous (Failed) write: applied or not
	read   int64 // the value the section read (final: the counter)
	wrote  int64 // the value it wrote
	client int
}

// registerModel is the sequential specification the history is checked
// against: the counter as a register, and each critical section as one
// atomic read-modify-write on it, which is what a mutual-exclusion lock is
// meant to make of it. State is the counter's value, starting at 0.
//
//   - An accepted section, over [Start, End] (from Acquire's return to the
//     write's reply, which contains both its read and its write), may take
//     effect only when the register holds the value it read, and leaves the
//     value it wrote.
//   - An ambiguous (Failed) section may have taken effect at any time after
//     its Start, or never: it is open-ended (Return = +∞), and takes effect
//     if the register holds its read value; linearized after the final read,
//     it is a write that never showed.
//   - Rejected and aborted sections changed nothing and are left out (a
//     no-op can be linearized anywhere).
//   - The final read, after every section ended, must return the counter.
//
// Why a register and not a mutex of grants: a lease lock's service may
// legitimately grant the lock again once a stalled holder's lease expired,
// so the grants alone form a valid mutex history even when data is lost.
// What the suite asks is whether the protected data saw the sections one at
// a time, in an order consistent with real time; that is this model.
var registerModel = porcupine.Model{
	Init: func() interface{} { return int64(0) },
	Step: func(state, input, _ interface{}) (bool, interface{}) {
		v, op := state.(int64), input.(linOp)
		switch {
		case op.final:
			return v == op.read, v
		case op.maybe:
			if v == op.read {
				return true, op.wrote
			}
			return true, v // not applied
		default:
			return v == op.read, op.wrote
		}
	},
	Hash: func(state interface{}) uint64 { return uint64(state.(int64)) },
	DescribeOperation: func(input, _ interface{}) string {
		op := input.(linOp)
		switch {
		case op.final:
			return fmt.Sprintf("final read → %d", op.read)
		case op.maybe:
			return fmt.Sprintf("client %d: read %d, write %d (ambiguous)", op.client, op.read, op.wrote)
		}
		return fmt.Sprintf("client %d: read %d, write %d", op.client, op.read, op.wrote)
	},
}

// Linearizable checks secs and the final counter, read after every section
// ended, against the register model above, with porcupine (the checker
// etcd's robustness tests use), giving up after timeout (0: no limit). It
// relies on nothing the counter check (Check) uses but the same recorded
// sections: it judges each section's read and written values and their
// order in time, where Check counts writes.
func Linearizable(secs []history.Section, counter int64, timeout time.Duration) Linearity {
	var ops []porcupine.Operation
	var last time.Duration
	for _, s := range secs {
		last = max(last, s.End, s.Start)
		op := linOp{read: s.Read, wrote: s.Wrote, client: s.Client}
		ret := int64(s.End)
		switch s.Outcome {
		case history.Accepted:
		case history.Failed:
			op.maybe, ret = true, math.MaxInt64
		default:
			continue
		}
		ops = append(ops, porcupine.Operation{ClientId: s.Client, Input: op, Call: int64(s.Start), Return: ret})
	}
	final := min(int64(last), math.MaxInt64-2) + 1 // after every section (no overflow on a hostile history)
	ops = append(ops, porcupine.Operation{ClientId: -1, Input: linOp{final: true, read: counter}, Call: final, Return: final + 1})
	switch porcupine.CheckOperationsTimeout(registerModel, ops, timeout) {
	case porcupine.Ok:
		return LinOK
	case porcupine.Illegal:
		return LinIllegal
	}
	return LinUnknown
}

// Judge is the suite's verdict on a run: the counter check (Check), and the
// linearizability check (Linearizable, bounded by timeout) as a second,
// independent opinion, in Result.Linearizable. When the two disagree (the
// counter says kept and the history is illegal, or the counter says broken
// and the history is linearizable), one of them, or the recording, is wrong:
// the verdict becomes Unknown and the reason starts "checkers disagree". A
// linearizability search that timed out leaves the counter's verdict alone.
func Judge(secs []history.Section, counter int64, timeout time.Duration) Result {
	r := Check(secs, counter)
	r.Linearizable = Linearizable(secs, counter, timeout)
	switch {
	case r.Verdict == Kept && r.Linearizable == LinIllegal:
		r.Verdict = Unknown
		r.Reason = fmt.Sprintf("checkers disagree: the counter check says kept (%d writes, counter %d), but no order of the critical sections explains the values they read and wrote (linearizability: illegal)", r.Writes, r.Counter)
	case r.Verdict == Broken && r.Linearizable == LinOK:
		r.Reason = fmt.Sprintf("checkers disagree: the counter check says broken (%s), but the history is linearizable", r.Reason)
		r.Verdict = Unknown
	}
	return r
}
