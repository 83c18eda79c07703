package run

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/locksuite/locksuite/harness/history"
)

// The node scenarios' questions to the history: who was granted when,
// and whether grants overlapped.

// lastGrant is when client id was last granted in [from, to) (0: never).
func lastGrant(secs []history.Section, id int, from, to time.Duration) time.Duration {
	last := time.Duration(0)
	for _, s := range secs {
		if s.Client == id && s.Start >= from && s.Start < to && s.Start > last {
			last = s.Start
		}
	}
	return last
}

// grantAfter is when client id was first granted at or after t (0:
// never).
func grantAfter(secs []history.Section, id int, t time.Duration) time.Duration {
	first := time.Duration(0)
	for _, s := range secs {
		if s.Client == id && s.Start >= t && (first == 0 || s.Start < first) {
			first = s.Start
		}
	}
	return first
}

// awaitB waits until client 1 (B) is granted the lock after cutAt, for at
// most bound.
func awaitB(ctx context.Context, fx *Fixture, cutAt, bound time.Duration) {
	deadline := time.After(bound)
	for grantAfter(fx.Rec.Sections(), 1, cutAt) == 0 {
		select {
		case <-deadline:
			return
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// during summarises client id's sections granted in [from, to): how many,
// and their outcomes.
func during(secs []history.Section, id int, from, to time.Duration) string {
	n := 0
	by := map[history.Outcome]int{}
	for _, s := range secs {
		if s.Client == id && s.Start >= from && s.Start < to {
			n++
			by[s.Outcome]++
		}
	}
	return fmt.Sprintf("%d grants (%d writes accepted, %d rejected as stale, %d failed, %d aborted)",
		n, by[history.Accepted], by[history.Rejected], by[history.Failed], by[history.Aborted])
}

// grantOverlaps counts pairs of sections of different clients whose grants
// overlapped in time (Start to End), whatever their writes became: the
// lock granted twice.
func grantOverlaps(secs []history.Section) int {
	n := 0
	for i, a := range secs {
		for _, b := range secs[i+1:] {
			if a.Client != b.Client && a.Start < b.End && b.Start < a.End {
				n++
			}
		}
	}
	return n
}

// seconds prints d in seconds, as the node scenarios' reasons do: "3.20s".
func seconds(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }

// sessionNote names the server sessions (history.Section.Session) that
// held overlapping acknowledged critical sections, for a lock whose leases
// name them: "overlapping grants on server sessions: clients 0 and 1 both
// on pid 4242 (2 times)". Empty when no two such sections overlapped.
func sessionNote(secs []history.Section) string {
	type pair struct{ a, b string }
	counts := map[pair]int{}
	var order []pair
	for i, a := range secs {
		for _, b := range secs[i+1:] {
			if a.Client == b.Client || a.Session == "" || b.Session == "" || !(a.Start < b.End && b.Start < a.End) ||
				a.Outcome != history.Accepted || b.Outcome != history.Accepted {
				continue
			}
			x, y := fmt.Sprintf("client %d on %s", a.Client, a.Session), fmt.Sprintf("client %d on %s", b.Client, b.Session)
			if a.Session == b.Session {
				x, y = fmt.Sprintf("clients %d and %d both on %s", min(a.Client, b.Client), max(a.Client, b.Client), a.Session), ""
			}
			p := pair{x, y}
			if counts[p] == 0 {
				order = append(order, p)
			}
			counts[p]++
		}
	}
	if len(order) == 0 {
		return ""
	}
	var parts []string
	for i, p := range order {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("and %d more", len(order)-3))
			break
		}
		s := p.a
		if p.b != "" {
			s += " with " + p.b
		}
		times := "once"
		if counts[p] > 1 {
			times = fmt.Sprintf("%d times", counts[p])
		}
		parts = append(parts, s+" ("+times+")")
	}
	return "overlapping grants on server sessions: " + strings.Join(parts, "; ")
}
