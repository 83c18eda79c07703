package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Published are the figures others published for a backend, which the
// bench tables print beside the measured ones: for throughput and latency,
// and for takeover. They were measured elsewhere, on other hardware and
// often of something else (etcd's are raw writes, not lock grants): a
// scale to read the measured figures against, not a target.
var Published = map[string]struct{ Throughput, Takeover string }{
	"etcd":            {Throughput: etcdGuide},
	"etcd-mutex":      {Throughput: etcdGuide},
	"etcd-cluster":    {Throughput: etcdGuide},
	"k8s-lease":       {Takeover: kubeDefaults},
	"leader-election": {Takeover: kubeDefaults},
}

const (
	etcdGuide    = "etcd's performance guide (raw writes, its hardware): 583/s at 1.6 ms with 1 client, 44k/s at 22 ms with 1000"
	kubeDefaults = "client-go leader election's defaults (lease 15 s, renew deadline 10 s, retry 2 s): 15–17 s to fail over"
)

// benchTable is one table of a bench, as the terminal, Markdown and HTML
// show it.
type benchTable struct {
	ID, Title string
	Head      []string
	Rows      [][]string
	Refs      []string // the reasons cells refer to: "– [n]" is Refs[n-1]
	Notes     []string // below the table, after Refs
}

// notes numbers the reasons of cells that have no figure, once each.
type notes struct{ list []string }

func (n *notes) ref(reason string) string {
	for i, r := range n.list {
		if r == reason {
			return fmt.Sprintf("– [%d]", i+1)
		}
	}
	n.list = append(n.list, reason)
	return fmt.Sprintf("– [%d]", len(n.list))
}

// missing is the cell of a point that has no figure, with its reason.
func (n *notes) missing(p Point, res Result) string {
	switch {
	case res.Error != "":
		return n.ref(res.Error)
	case p.Skipped != "":
		return n.ref("skipped: " + p.Skipped)
	case p.Error != "":
		return n.ref("failed: " + p.Error)
	}
	return "–"
}

// num formats v with three significant digits, without an exponent.
func num(v float64) string {
	if v == 0 {
		return "0"
	}
	if math.Abs(v) >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	d := 2 - int(math.Floor(math.Log10(math.Abs(v))))
	return strconv.FormatFloat(v, 'f', d, 64)
}

// rangeOf is a Stat as "median [min–max]".
func rangeOf(s Stat) string {
	return fmt.Sprintf("%s [%s–%s]", num(s.Median), num(s.Min), num(s.Max))
}

func nameOf(r Result) string {
	if r.Ceiling {
		return r.Backend + " (ceiling)"
	}
	return r.Backend
}

// benchTables lays r out as tables: uncontended latency, throughput (empty
// section; with a store write, fencing off and on), fairness and handoff,
// takeover.
func benchTables(r Report) []benchTable {
	var out []benchTable
	rounds := fmt.Sprintf("median of %d rounds", r.Rounds)

	var n notes
	lat := benchTable{ID: "bench-latency", Title: "Uncontended acquire + release, 1 client: ms (" + rounds + " [least–greatest])",
		Head: []string{"backend", "p50", "p90", "p99", "max", "grants/s", "published"}}
	for _, res := range r.Results {
		p, ok := res.Point(1, Empty, false)
		row := []string{nameOf(res)}
		if ok {
			row = append(row, rangeOf(p.Cycle.P50), num(p.Cycle.P90.Median), num(p.Cycle.P99.Median), num(p.Cycle.Max.Median), rangeOf(p.GrantsPerSec))
		} else {
			m := n.missing(p, res)
			row = append(row, m, m, m, m, m)
		}
		lat.Rows = append(lat.Rows, append(row, Published[res.Backend].Throughput))
	}
	lat.Refs = n.list
	out = append(out, lat)

	thr := byClients(r, "bench-throughput", "Grants per second, empty critical section, by contending clients ("+rounds+" [least–greatest])",
		func(res Result, c int, n *notes) string {
			p, ok := res.Point(c, Empty, false)
			if !ok {
				return n.missing(p, res)
			}
			return rangeOf(p.GrantsPerSec)
		})
	thr.Notes = append(ceilingNote(r), errorNotes(r)...)
	out = append(out, thr)

	out = append(out, byClients(r, "bench-write", "Grants per second with a store write (read + write of the counter), fencing off / on (on ÷ off: the cost of fencing), "+rounds,
		func(res Result, c int, n *notes) string {
			cell := func(fenced bool) string {
				p, ok := res.Point(c, Write, fenced)
				if !ok {
					return n.missing(p, res)
				}
				return num(p.GrantsPerSec.Median)
			}
			s := cell(false) + " / " + cell(true)
			if ratio, ok := res.FencingOverhead(c); ok {
				s += fmt.Sprintf(" (%.2f)", ratio)
			}
			return s
		}))

	n = notes{}
	fair := benchTable{ID: "bench-fairness", Title: "Fairness and handoff, over each point's whole measured run (handoff: a Release returned → the next grant, ms, " + rounds + ")",
		Head: []string{"backend", "section", "clients", "Jain's index (fairest)", "starved (fewest)", "longest wait ms", "handoff p50", "handoff p99", "replies per grant"}}
	sections := []Section{Empty}
	if hold := holdOf(r); hold > 0 {
		sections = append(sections, Hold)
	}
	for _, res := range r.Results {
		for _, sec := range sections {
			for _, c := range r.Clients {
				if c < 2 {
					continue
				}
				row := []string{nameOf(res), sectionText(sec, holdOf(r)), strconv.Itoa(c)}
				p, ok := res.Point(c, sec, false)
				if !ok {
					m := n.missing(p, res)
					fair.Rows = append(fair.Rows, append(row, m, m, m, m, m, m))
					continue
				}
				hp50, hp99 := "–", "–"
				if p.Handoff != nil {
					hp50, hp99 = num(p.Handoff.P50.Median), num(p.Handoff.P99.Median)
				}
				replies := num(p.RepliesPerGrant.Median)
				if res.Ceiling {
					replies = "–"
				}
				f := p.Fairness
				row = append(row, fmt.Sprintf("%.3f (%.3f)", f.Jain, f.FairestJain), fmt.Sprintf("%d of %d (%d)", f.Starved, c, f.FewestStarved),
					num(p.LongestWaitMS.Max), hp50, hp99, replies)
				fair.Rows = append(fair.Rows, row)
			}
		}
	}
	fair.Refs, fair.Notes = n.list, []string{"Jain's index: (Σ grants)² / (clients × Σ grants²), 1 when every client got as many grants, 1/clients when one got them all; fairest: the index of the same grants spread as evenly as they go. Starved: clients with no grant in the run; fewest: with the grants spread evenly (a slow lock cannot give 64 clients a grant each in a short run). Longest wait: the longest any Acquire waited, by its grant or by the run's end. Replies per grant: reads that returned data on all clients' connections, per grant: flat for a queue, growing with the clients for a lock whose waiters all wake on a release, the polls per grant for a polling lock."}
	out = append(out, fair)

	if !slices.ContainsFunc(r.Results, func(res Result) bool { return len(res.Takeovers) > 0 }) {
		return out
	}
	n = notes{}
	tk := benchTable{ID: "bench-takeover", Title: "Takeover: from the holder killed or frozen to another client's grant, ms (" + rounds + " [least–greatest]), against the lease",
		Head: []string{"backend", "lease", "expiry", "killed", "frozen", "frozen ÷ lease", "published"}}
	for _, res := range r.Results {
		if res.Ceiling {
			continue
		}
		row := []string{res.Backend, msOrNone(res.LeaseMS), msOrNone(res.ExpiryMS)}
		if res.Error != "" {
			m := n.ref(res.Error)
			tk.Rows = append(tk.Rows, []string{res.Backend, m, m, m, m, m, Published[res.Backend].Takeover})
			continue
		}
		var frozen float64
		for _, f := range []Fault{Killed, Frozen} {
			t, ok := res.Takeover(f)
			switch {
			case ok:
				s := rangeOf(t.TimeMS)
				if t.TimedOut > 0 {
					s += fmt.Sprintf(", %d of %d > %s", t.TimedOut, t.Rounds, num(t.BoundMS))
				}
				row = append(row, s)
				if f == Frozen {
					frozen = t.TimeMS.Median
				}
			case t.Skipped != "":
				row = append(row, n.ref("skipped: "+t.Skipped))
			case t.Error != "":
				row = append(row, n.ref("failed: "+t.Error))
			case t.Rounds > 0:
				row = append(row, "> "+num(t.BoundMS)+" (no grant)")
			default:
				row = append(row, "–")
			}
		}
		ratio := "–"
		if frozen > 0 && res.LeaseMS > 0 {
			ratio = fmt.Sprintf("%.2f", frozen/res.LeaseMS)
		}
		tk.Rows = append(tk.Rows, append(row, ratio, Published[res.Backend].Takeover))
	}
	tk.Refs, tk.Notes = n.list, []string{"Killed: the holder's connections closed and new ones refused, which is what the service sees of a SIGKILLed process. Frozen: its traffic held, as for SIGSTOP. A lock that frees a lease with its connection or session (Postgres, MySQL) takes over from a killed holder at once; one that waits for the lease to run out takes about the expiry from either."}
	out = append(out, tk)
	return out
}

// lines are t's numbered reasons, then its notes.
func (t benchTable) lines() []string {
	var out []string
	for i, r := range t.Refs {
		out = append(out, fmt.Sprintf("[%d] %s", i+1, r))
	}
	return append(out, t.Notes...)
}

// holdOf is the hold of r's Hold points, in ms; 0 without.
func holdOf(r Report) float64 {
	for _, res := range r.Results {
		for _, p := range res.Points {
			if p.Section == Hold {
				return p.HoldMS
			}
		}
	}
	return 0
}

// sectionText names a critical section in a table.
func sectionText(sec Section, holdMS float64) string {
	if sec == Hold {
		return "hold " + strconv.FormatFloat(holdMS, 'f', -1, 64) + " ms"
	}
	return string(sec)
}

// errorNotes lists the points in which Acquires, store writes or
// Releases failed (the clients went on), with the first error.
func errorNotes(r Report) []string {
	var out []string
	for _, res := range r.Results {
		for _, p := range res.Points {
			if p.FirstError == "" {
				continue
			}
			what := fmt.Sprintf("%s, %s, %s section", res.Backend, clientsText(p.Clients), sectionText(p.Section, p.HoldMS))
			if p.Section == Write {
				what += ", fencing " + onOff(p.Fenced)
			}
			out = append(out, fmt.Sprintf("%s: %d failed in the rounds, each retried after 10 ms; the first: %s", what, p.Errors, p.FirstError))
		}
	}
	return out
}

// clientsText is "1 client" or "n clients".
func clientsText(n int) string {
	if n == 1 {
		return "1 client"
	}
	return fmt.Sprintf("%d clients", n)
}

// byClients is a table with a line per result and a column per number of
// clients, each cell from cell.
func byClients(r Report, id, title string, cell func(res Result, clients int, n *notes) string) benchTable {
	var n notes
	t := benchTable{ID: id, Title: title, Head: []string{"backend"}}
	for _, c := range r.Clients {
		t.Head = append(t.Head, strconv.Itoa(c))
	}
	for _, res := range r.Results {
		row := []string{nameOf(res)}
		for _, c := range r.Clients {
			row = append(row, cell(res, c, &n))
		}
		t.Rows = append(t.Rows, row)
	}
	t.Refs = n.list
	return t
}

// msOrNone is a lease in ms, or "none".
func msOrNone(v float64) string {
	if v == 0 {
		return "none"
	}
	return num(v)
}

// ceilingNote compares the in-process ceiling's best grants per second
// with the fastest service's.
func ceilingNote(r Report) []string {
	best := func(res Result) (float64, int) {
		var v float64
		var at int
		for _, c := range r.Clients {
			if p, ok := res.Point(c, Empty, false); ok && p.GrantsPerSec.Median > v {
				v, at = p.GrantsPerSec.Median, c
			}
		}
		return v, at
	}
	var ceiling, fastest float64
	var ceilingAt, fastestAt int
	var name string
	for _, res := range r.Results {
		v, at := best(res)
		if res.Ceiling {
			ceiling, ceilingAt = v, at
		} else if v > fastest {
			fastest, fastestAt, name = v, at, res.Backend
		}
	}
	if ceiling == 0 || fastest == 0 {
		return nil
	}
	s := fmt.Sprintf("Ceiling: the in-process lock's %s grants/s (%s) is %.0f× the fastest service's, %s's %s (%s)",
		num(ceiling), clientsText(ceilingAt), ceiling/fastest, name, num(fastest), clientsText(fastestAt))
	if ceiling < 10*fastest {
		s += ": under 10×, the harness itself may limit the services' figures"
	}
	return []string{s + "."}
}

// sizeLine says how each point was measured.
func sizeLine(r Report) string {
	w := r.DurationMS / float64(r.Rounds+1)
	return fmt.Sprintf("Each point: %s ms, a warm-up window then %d rounds of %s ms; takeovers: %d per fault.", num(r.DurationMS), r.Rounds, num(w), r.Rounds)
}

// WriteText prints r as aligned tables: the machine and the sizes, then
// each table with its notes.
func WriteText(w io.Writer, r Report) error {
	if r.Status != "" {
		fmt.Fprintln(w, r.Status)
	}
	fmt.Fprintf(w, "locksuite bench: %s\n%s\n", r.Machine.String(), sizeLine(r))
	for _, t := range benchTables(r) {
		fmt.Fprintf(w, "\n%s\n", t.Title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, strings.Join(t.Head, "\t"))
		for _, row := range t.Rows {
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, note := range t.lines() {
			fmt.Fprintf(w, "  %s\n", note)
		}
	}
	return nil
}

// WriteMarkdown writes r as Markdown tables, for a pull-request
// comment or docs.
func WriteMarkdown(w io.Writer, r Report) error {
	if r.Status != "" {
		fmt.Fprintf(w, "**%s**\n\n", r.Status)
	}
	fmt.Fprintf(w, "locksuite bench: %s. %s\n", r.Machine.String(), sizeLine(r))
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	for _, t := range benchTables(r) {
		fmt.Fprintf(w, "\n**%s**\n\n", t.Title)
		fmt.Fprintf(w, "| %s |\n|", strings.Join(t.Head, " | "))
		for range t.Head {
			fmt.Fprint(w, " --- |")
		}
		fmt.Fprintln(w)
		for _, row := range t.Rows {
			cs := make([]string, len(row))
			for i, c := range row {
				cs[i] = cell(c)
			}
			fmt.Fprintf(w, "| %s |\n", strings.Join(cs, " | "))
		}
		if lines := t.lines(); len(lines) > 0 {
			fmt.Fprintln(w)
			for _, note := range lines {
				fmt.Fprintf(w, "- %s\n", note)
			}
		}
	}
	_, err := fmt.Fprintln(w)
	return err
}
