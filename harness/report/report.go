// Package report turns results into what people read: one Row per backend,
// fencing mode and scenario, printed as a table or written as JSON,
// Markdown, or, with the run's history, as an HTML timeline.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Verdict is a Row's verdict: the checker's three states (checker.Verdict),
// and Skipped. Its JSON form is the bare word.
type Verdict string

// Verdicts a Row can carry, and Measured, which only Row.Expected carries.
const (
	// Kept: the invariant held.
	Kept Verdict = "kept"
	// Broken: the invariant was violated; Row.Reason says how.
	Broken Verdict = "broken"
	// Unknown: no conclusion (the run failed or could not be judged).
	Unknown Verdict = "unknown"
	// Skipped: the scenario does not apply to this lock; Row.Reason says why.
	Skipped Verdict = "skipped"
	// Measured, as Row.Expected: the spec asserted no verdict, only that
	// the run reached one (kept or broken), and reports it.
	Measured Verdict = "measured"
)

// Row is one result. Its JSON form is the CLI's --json output.
type Row struct {
	Backend    string  `json:"backend"`
	Fencing    bool    `json:"fencing"`
	Scenario   string  `json:"scenario"`
	Writes     int     `json:"writes"`
	Counter    int64   `json:"counter"`
	Lost       int64   `json:"lost"`
	Overlaps   int     `json:"overlaps"`
	Rejected   int     `json:"rejected"`
	Verdict    Verdict `json:"verdict"`
	LeaseMS    int64   `json:"lease_ms"`
	DurationMS int64   `json:"duration_ms"`
	Reason     string  `json:"reason"`
	// Library is the lock library of a language backend (redis-py,
	// curator, a --worker's) as its worker reported it at the start:
	// "redis-py 4.3.4 (CPython 3.11.2 (/usr/bin/python3))"; empty for
	// the Go backends, whose modules the environment lists.
	Library string `json:"library,omitempty"`
	// Linearizable is the second checker's answer on the run's history:
	// "ok", "illegal" or "unknown" (the search timed out); empty when the
	// scenario records no history (release-after-expiry, skipped rows). A
	// disagreement with the counter check makes the verdict unknown, with a
	// reason starting "checkers disagree".
	Linearizable string `json:"linearizable,omitempty"`
	// Chaos runs only: the seed of the fault schedule (the same seed gives
	// the same schedule), the faults injected, their length, the pauses as
	// they happened, and availability: accepted writes per second and the
	// longest any client waited for the lock.
	Seed    uint64 `json:"seed,omitempty"`
	Workers int    `json:"workers,omitempty"`
	// Nodes are the nodes the chaos workers ran on, by worker (their
	// pods' nodes under locksuite run --kubernetes); empty when they ran
	// on this machine.
	Nodes        []string `json:"nodes,omitempty"`
	Faults       int      `json:"faults,omitempty"`
	PauseMS      int64    `json:"pause_ms,omitempty"`
	Schedule     string   `json:"schedule,omitempty"`
	WritesPerSec float64  `json:"writes_per_sec,omitempty"`
	MaxWaitMS    int64    `json:"max_wait_ms,omitempty"`
	// Stuck counts the critical sections after the lock service
	// restarted (the crash scenarios) that did not write: refused by a
	// fenced store (a fence counter that went back with the restart
	// leaves every later holder below the fence the store recorded
	// before) or not granted at all (a lock the restart left unusable).
	// A kept row with Stuck kept the counter right and stopped progress.
	Stuck int `json:"stuck,omitempty"`
	// Health is what the lock service's health checks said before a server
	// or network fault and after it healed ("ok before; ok after 120ms"),
	// when the scenario could check it (suite.Config.Servers set).
	Health string `json:"health,omitempty"`
	// Expected is what the spec asserted: Kept, Broken (a control, or an
	// unfenced run documenting that a lease alone is unsafe), or Measured
	// (no verdict asserted, only reported). Empty for skipped rows and for
	// rows of suite.Run, which asserts nothing.
	Expected Verdict `json:"expected,omitempty"`
	// Artifacts are the files this run left in suite.Config.Artifacts: its
	// history (a Timeline as JSON) and its HTML timeline.
	Artifacts []string `json:"artifacts,omitempty"`
	// Shard is the share of a split run ("2/4": suite.Shard) the row came
	// from; empty for a whole run.
	Shard string `json:"shard,omitempty"`
	// WallMS is how long the run took from start to verdict: its clients
	// and counter made, its load, its checks (DurationMS is its load
	// alone). Zero for a skipped row.
	WallMS int64 `json:"wall_ms,omitempty"`
	// SetupMS is how long the run took to make its clients, its counter
	// and its faults (worker processes started and ready, a service
	// started on nodes) before its load began; PlannedMS is how long the
	// load planned to run: its floor, which the scenario's own waits set (a
	// lease to expire, a chaos run's seconds, a failover's recovery).
	SetupMS   int64 `json:"setup_ms,omitempty"`
	PlannedMS int64 `json:"planned_ms,omitempty"`
	// StallMS is the longest the machine kept one of the run's client
	// processes from running (its threads waiting for a CPU, or the
	// process stopped), outside every fault the run injected, measured from
	// outside it (harness/machine); StallAtMS is when that stall began,
	// since the load began, and StallOf names the process ("worker 1").
	// Zero where nothing was measured.
	StallMS   int64  `json:"stall_ms,omitempty"`
	StallAtMS int64  `json:"stall_at_ms,omitempty"`
	StallOf   string `json:"stall_of,omitempty"`
	// CPUPressure is how loaded the machine's CPUs were over the run,
	// from 0 to 1: the share of the time some runnable task waited for a
	// CPU (the kernel's PSI), else the load average beyond the CPUs
	// against the CPUs.
	CPUPressure float64 `json:"cpu_pressure,omitempty"`
	// MachineStall, when not empty, says that stalls the machine made, not
	// the lock, explain the run's lost updates (checker.MachineStalls),
	// and what to do: a row unfenced that expected the invariant kept is
	// then unknown, with this as its reason, and is no finding.
	MachineStall string `json:"machine_stall,omitempty"`
}

// Finding reports whether r is a finding, the one rule that the suite's
// assertion, the CLI's exit status and the artifacts it keeps, and the
// matrix's "!" all follow:
//
//   - a kept or broken verdict other than the one the spec asserted
//     (Expected Kept or Broken; a Measured row asserts no verdict, a row
//     of suite.Run none at all);
//   - an unknown verdict, unless MachineStall explains it (the machine,
//     not the lock, stalled a holder: said apart, no finding).
//
// Skipped rows are no finding.
func (r Row) Finding() bool {
	if r.Stalled() {
		return false
	}
	switch r.Verdict {
	case Kept, Broken:
		return (r.Expected == Kept || r.Expected == Broken) && r.Verdict != r.Expected
	case Skipped:
		return false
	}
	return true // unknown
}

// Stalled reports whether r is unknown because the machine, not the lock,
// stalled a holder (MachineStall): no verdict, and no finding.
func (r Row) Stalled() bool { return r.Verdict == Unknown && r.MachineStall != "" }

// Progress is what a scenario run knows while it runs, for a progress
// display: how long it has run and plans to, and what its history shows so
// far. Lost updates are known only at the end, from the final counter.
type Progress struct {
	// Run identifies the scenario run (its lock's key): several runs may
	// report at once.
	Run      string
	Scenario string
	Elapsed  time.Duration
	Planned  time.Duration
	Sections int // critical sections recorded so far
	Overlaps int // accepted sections overlapping another accepted one, so far
	Rejected int // sections the fenced store refused, so far
	// Done marks the run's last report: its load is over (its checks,
	// and its spec's report, follow).
	Done bool
}

// Sort orders rows by backend, fencing (off first), then scenario: the
// scenarios that order names in its order (the suite's table order, so
// that a matrix's columns read baseline, control, the pause, …), the others
// after them by name. With no order, scenarios sort by name.
func Sort(rows []Row, order ...string) {
	sort.SliceStable(rows, func(i, j int) bool { return Compare(rows[i], rows[j], order) < 0 })
}

// Compare compares a and b as Sort orders them.
func Compare(a, b Row, order []string) int {
	if c := strings.Compare(a.Backend, b.Backend); c != 0 {
		return c
	}
	if a.Fencing != b.Fencing {
		if a.Fencing {
			return 1
		}
		return -1
	}
	rank := func(s string) int {
		if i := slices.Index(order, s); i >= 0 {
			return i
		}
		return len(order)
	}
	if c := rank(a.Scenario) - rank(b.Scenario); c != 0 {
		return c
	}
	return strings.Compare(a.Scenario, b.Scenario)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// WriteTable prints rows as an aligned table, with a NODES column (the
// workers' nodes, Row.Nodes) when a row has them.
func WriteTable(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	// NODES, the workers' nodes, only when some run has them (Row.Nodes).
	withNodes := slices.ContainsFunc(rows, func(r Row) bool { return len(r.Nodes) > 0 })
	nodes := func(r Row) string {
		if !withNodes {
			return ""
		}
		if len(r.Nodes) == 0 {
			return "\t-"
		}
		return "\t" + strings.Join(r.Nodes, ",")
	}
	header := "BACKEND\tFENCING\tSCENARIO\tWRITES\tCOUNTER\tLOST\tOVERLAPS\tREJECTED\tLEASE\tTIME"
	if withNodes {
		header += "\tNODES"
	}
	fmt.Fprintln(tw, header+"\tVERDICT")
	for _, r := range rows {
		verdict := string(r.Verdict)
		if r.Reason != "" && (r.Verdict != Kept || r.Stuck > 0) {
			verdict += ": " + r.Reason
		}
		if r.Verdict == Skipped {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t-\t-\t-\t-%s\t%s\n", r.Backend, onOff(r.Fencing), r.Scenario, nodes(r), verdict)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%dms\t%dms%s\t%s\n", r.Backend, onOff(r.Fencing), r.Scenario,
			r.Writes, r.Counter, r.Lost, r.Overlaps, r.Rejected, r.LeaseMS, r.DurationMS, nodes(r), verdict)
	}
	return tw.Flush()
}

// WriteJSON writes rows as an indented JSON array to path.
func WriteJSON(path string, rows []Row) error {
	if rows == nil {
		rows = []Row{}
	}
	b, err := json.MarshalIndent(rows, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// WriteSummary prints one line per backend, fencing mode and scenario, with
// how many runs came out each way, for repeated runs.
func WriteSummary(w io.Writer, rows []Row) error {
	type key struct {
		backend  string
		fencing  bool
		scenario string
	}
	type agg struct {
		runs, kept, broken, unknown, skipped int
		lost                                 int64
		maxMS                                int64
		reason                               string
	}
	var order []key
	m := map[key]*agg{}
	for _, r := range rows {
		k := key{r.Backend, r.Fencing, r.Scenario}
		a := m[k]
		if a == nil {
			a = &agg{}
			m[k] = a
			order = append(order, k)
		}
		a.runs++
		switch r.Verdict {
		case Kept:
			a.kept++
		case Broken:
			a.broken++
		case Skipped:
			a.skipped++
			a.reason = r.Reason
		default:
			a.unknown++
			a.reason = r.Reason
		}
		a.lost += r.Lost
		a.maxMS = max(a.maxMS, r.DurationMS)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BACKEND\tFENCING\tSCENARIO\tRUNS\tKEPT\tBROKEN\tUNKNOWN\tSKIPPED\tLOST(TOTAL)\tMAX TIME\tNOTE")
	for _, k := range order {
		a := m[k]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%dms\t%s\n", k.backend, onOff(k.fencing), k.scenario,
			a.runs, a.kept, a.broken, a.unknown, a.skipped, a.lost, a.maxMS, a.reason)
	}
	return tw.Flush()
}

// WriteMarkdown writes rows as a Markdown table, for a pull-request comment:
// one line per result, verdicts in words, the reason where it is not kept.
func WriteMarkdown(w io.Writer, rows []Row) error {
	if _, err := fmt.Fprintln(w, "| backend | fencing | scenario | writes | counter | lost | overlaps | rejected | verdict |\n|---|---|---|---:|---:|---:|---:|---:|---|"); err != nil {
		return err
	}
	for _, r := range rows {
		v := string(r.Verdict)
		switch r.Verdict {
		case Broken:
			v = "**broken**"
		case Unknown:
			v = "*unknown*"
		}
		if r.Reason != "" && (r.Verdict != Kept || r.Stuck > 0) {
			v += ": " + strings.ReplaceAll(r.Reason, "|", "\\|")
		}
		if _, err := fmt.Fprintf(w, "| %s | %s | %s | %d | %d | %d | %d | %d | %s |\n", r.Backend, onOff(r.Fencing), r.Scenario,
			r.Writes, r.Counter, r.Lost, r.Overlaps, r.Rejected, v); err != nil {
			return err
		}
	}
	return nil
}
