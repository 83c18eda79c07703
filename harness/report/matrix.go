package report

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Matrix is a run's results arranged to be read at a glance: one line per
// backend and fencing mode, one column per scenario, one Cell where they
// meet. The reasons of skipped and unknown cells are collected once, as
// numbered notes, instead of being repeated in every cell.
type Matrix struct {
	Scenarios []string     // the columns, in the order they first appear in the rows
	Lines     []MatrixLine // the lines, in the order they first appear in the rows
	Notes     []string     // reasons; Cell.Note n refers to Notes[n-1]
}

// MatrixLine is one backend with one fencing mode.
type MatrixLine struct {
	Backend string
	Fencing bool
	Cells   []Cell // one per Matrix.Scenarios
}

// Cell is what one backend, fencing mode and scenario came to over all its
// runs (more than one with --repeat).
type Cell struct {
	Runs                           []Row // empty: the scenario did not run for this line
	Kept, Broken, Unknown, Skipped int
	Lost                           int64 // lost updates, summed over the runs
	// Stuck counts the kept runs in which the sections after a restart
	// did not write (Row.Stuck).
	Stuck int
	// Findings counts the runs that are findings (Row.Finding): a
	// verdict other than the one the spec expected, or unknown with no
	// machine stall to explain it.
	Findings int
	Note     int // 1-based index into Matrix.Notes; 0: no note
}

// Class is the cell's colour class: "broken" if any run was broken, else
// "unknown" if any was unknown, else "kept" if any was kept, else
// "skipped"; "" when nothing ran.
func (c Cell) Class() string {
	switch {
	case c.Broken > 0:
		return string(Broken)
	case c.Unknown > 0:
		return string(Unknown)
	case c.Kept > 0:
		return string(Kept)
	case c.Skipped > 0:
		return string(Skipped)
	}
	return ""
}

// Text is the cell as the matrix prints it: for one run "kept",
// "kept, stuck" (kept, the sections after a restart did not write:
// Row.Stuck),
// "BROKEN 4 lost", "unknown [2]" or "– [1]" (skipped; [n] is the note with
// the reason); for repeated runs the counts, "broken 10/10", "kept 5/5" or
// "kept 5/5, stuck 5/5"; a trailing "!" when a run is a finding
// (Row.Finding: a verdict not the expected one, or unknown with no machine
// stall to explain it); "" when nothing ran.
func (c Cell) Text() string {
	n := len(c.Runs)
	ran := n - c.Skipped
	var s string
	switch {
	case n == 0:
		return ""
	case ran == 0:
		s = "–"
	case n == 1 && c.Broken == 1 && c.Lost > 0:
		s = fmt.Sprintf("BROKEN %d lost", c.Lost)
	case n == 1 && c.Broken == 1:
		s = "BROKEN"
	case n == 1 && c.Stuck == 1:
		s = "kept, stuck"
	case n == 1:
		s = c.Class()
	default:
		var parts []string
		if c.Broken > 0 {
			parts = append(parts, fmt.Sprintf("broken %d/%d", c.Broken, ran))
		}
		if c.Unknown > 0 {
			parts = append(parts, fmt.Sprintf("unknown %d/%d", c.Unknown, ran))
		}
		if len(parts) == 0 {
			parts = append(parts, fmt.Sprintf("kept %d/%d", c.Kept, ran))
		}
		if c.Stuck > 0 {
			parts = append(parts, fmt.Sprintf("stuck %d/%d", c.Stuck, ran))
		}
		s = strings.Join(parts, ", ")
	}
	if c.Note > 0 {
		s += fmt.Sprintf(" [%d]", c.Note)
	}
	if c.Findings > 0 {
		s += " !"
	}
	return s
}

// NewMatrix arranges rows. A cell's note is the reason of its last skipped
// or unknown run; equal reasons share one note.
func NewMatrix(rows []Row) Matrix {
	var m Matrix
	col := map[string]int{}
	type lk struct {
		b string
		f bool
	}
	line := map[lk]int{}
	note := map[string]int{}
	for _, r := range rows {
		if _, ok := col[r.Scenario]; !ok {
			col[r.Scenario] = len(m.Scenarios)
			m.Scenarios = append(m.Scenarios, r.Scenario)
		}
		k := lk{r.Backend, r.Fencing}
		if _, ok := line[k]; !ok {
			line[k] = len(m.Lines)
			m.Lines = append(m.Lines, MatrixLine{Backend: r.Backend, Fencing: r.Fencing})
		}
	}
	for i := range m.Lines {
		m.Lines[i].Cells = make([]Cell, len(m.Scenarios))
	}
	for _, r := range rows {
		c := &m.Lines[line[lk{r.Backend, r.Fencing}]].Cells[col[r.Scenario]]
		c.Runs = append(c.Runs, r)
		c.Lost += r.Lost
		switch r.Verdict {
		case Kept:
			c.Kept++
			if r.Stuck > 0 {
				c.Stuck++
			}
		case Broken:
			c.Broken++
		case Skipped:
			c.Skipped++
		default:
			c.Unknown++
		}
		if r.Finding() {
			c.Findings++
		}
		if (r.Verdict == Skipped || r.Verdict == Unknown) && r.Reason != "" {
			n, ok := note[r.Reason]
			if !ok {
				m.Notes = append(m.Notes, r.Reason)
				n = len(m.Notes)
				note[r.Reason] = n
			}
			c.Note = n
		}
	}
	return m
}

// legend explains the cells; printed under every matrix.
const legend = "kept: every acknowledged write counted. BROKEN n lost: n acknowledged writes lost (BROKEN alone: none lost, but writes no client made appeared, or a rejected write was retried).\n" +
	"stuck: kept, but the sections after the lock service restarted did not write (refused by the fenced store, or not granted).\n" +
	"unknown: no verdict. –: skipped. [n]: note n. !: a finding (not the verdict the spec expected, or unknown and no machine stall explains it). --repeat: broken runs/runs."

// WriteMatrix prints rows as an aligned Matrix, then the legend and the
// numbered notes.
func WriteMatrix(w io.Writer, rows []Row) error {
	m := NewMatrix(rows)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "BACKEND\tFENCING")
	for _, s := range m.Scenarios {
		fmt.Fprintf(tw, "\t%s", s)
	}
	fmt.Fprintln(tw)
	for _, l := range m.Lines {
		fmt.Fprintf(tw, "%s\t%s", l.Backend, onOff(l.Fencing))
		for _, c := range l.Cells {
			t := c.Text()
			if t == "" {
				t = "·"
			}
			fmt.Fprintf(tw, "\t%s", t)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeNotes(w, m, false)
}

// mdEscape keeps a reason inside its Markdown list item: no table pipe,
// no HTML tag.
var mdEscape = strings.NewReplacer("|", `\|`, "<", "&lt;")

// writeNotes prints the legend and the numbered notes; for Markdown, the
// notes as a list (consecutive lines would join into one paragraph) with
// table pipes escaped.
func writeNotes(w io.Writer, m Matrix, markdown bool) error {
	if _, err := fmt.Fprintf(w, "\n%s\n", legend); err != nil {
		return err
	}
	for i, n := range m.Notes {
		prefix := ""
		if markdown {
			prefix = "\n- "
			n = mdEscape.Replace(n)
		}
		if _, err := fmt.Fprintf(w, "%s[%d] %s\n", prefix, i+1, n); err != nil {
			return err
		}
	}
	return nil
}

// WriteMatrixMarkdown writes the Matrix of rows as a Markdown table, for a
// pull-request comment, with broken cells in bold, then the legend and the
// numbered notes.
func WriteMatrixMarkdown(w io.Writer, rows []Row) error {
	m := NewMatrix(rows)
	var b strings.Builder
	b.WriteString("| backend | fencing |")
	for _, s := range m.Scenarios {
		b.WriteString(" " + s + " |")
	}
	b.WriteString("\n|---|---|" + strings.Repeat("---|", len(m.Scenarios)) + "\n")
	for _, l := range m.Lines {
		fmt.Fprintf(&b, "| %s | %s |", l.Backend, onOff(l.Fencing))
		for _, c := range l.Cells {
			t := c.Text()
			if c.Class() == string(Broken) {
				t = "**" + t + "**"
			}
			b.WriteString(" " + t + " |")
		}
		b.WriteString("\n")
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	return writeNotes(w, m, true)
}
