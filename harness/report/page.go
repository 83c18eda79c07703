package report

import (
	"fmt"
	"html/template"
	"io"
	"net/url"
	"path/filepath"
	"strings"
	"time"
)

// Report is one run's results as WriteReport draws them.
type Report struct {
	Title string
	// Status, when not empty, says the results are incomplete ("cut short
	// by SIGINT after 12 of 40 runs"); it is shown above the matrix.
	Status string
	Rows   []Row
	// Env describes where and how the run ran: versions, machine, flags,
	// seeds, as name and value, in order.
	Env [][2]string
	// Base is the directory the page will be in: links to Row.Artifacts
	// are relative to it where the files are below it, absolute file: URLs
	// otherwise.
	Base string
	// Reproduce, if set, gives the command that runs a row again.
	Reproduce func(Row) string
	// Sweep, if set, is drawn as a heat map below the matrix.
	Sweep *Sweep
	// Body, if set, is drawn instead of the matrix: a section its caller
	// rendered, trusted as HTML (bench.HTML draws a bench's tables and
	// charts for it).
	Body template.HTML
}

// Sweep is a lease × pause grid: Cells[i][j] is the run with lease
// Leases[i] and pause Pauses[j].
type Sweep struct {
	Backend string
	Fencing bool
	Count   int // pauses per cell
	Leases  []time.Duration
	Pauses  []time.Duration
	Cells   [][]Row
}

// WriteReport writes r as one self-contained HTML page (inline CSS, no
// script, nothing fetched): the status, the matrix with a coloured cell per
// backend, fencing mode and scenario (class "cell v-kept", "v-broken",
// "v-unknown" or "v-skipped"; the table has the id "matrix"), each cell
// that ran linking to its runs' timelines (class "timeline") and histories
// (class "history") when Row.Artifacts names them, and the notes; for a
// Sweep, its heat map (id "sweep") instead; every row's figures and how to
// reproduce it; and the environment.
func WriteReport(w io.Writer, r Report) error {
	type link struct {
		Label, Class string
		Href         template.URL
	}
	type cell struct {
		Text, Class string
		Links       []link
	}
	type line struct {
		Backend, Fencing string
		Cells            []cell
	}
	m := NewMatrix(r.Rows)
	var lines []line
	for _, l := range m.Lines {
		ln := line{Backend: l.Backend, Fencing: onOff(l.Fencing)}
		for _, c := range l.Cells {
			pc := cell{Text: c.Text(), Class: c.Class()}
			for i, run := range c.Runs {
				label := ""
				if len(c.Runs) > 1 {
					label = fmt.Sprintf("%d ", i+1)
				}
				for _, f := range run.Artifacts {
					switch filepath.Ext(f) {
					case ".html":
						pc.Links = append(pc.Links, link{label + "timeline", "timeline", href(r.Base, f)})
					case ".json":
						pc.Links = append(pc.Links, link{label + "history", "history", href(r.Base, f)})
					}
				}
			}
			ln.Cells = append(ln.Cells, pc)
		}
		lines = append(lines, ln)
	}
	type flat struct {
		Row
		Fence, Lease, Time, Seed, Repro, Machine string
		Skip                                     bool
	}
	var rows []flat
	for _, row := range r.Rows {
		f := flat{Row: row, Skip: row.Verdict == Skipped, Fence: onOff(row.Fencing), Lease: fmt.Sprintf("%d ms", row.LeaseMS), Time: fmt.Sprintf("%d ms", row.DurationMS)}
		if row.Seed != 0 {
			f.Seed = fmt.Sprint(row.Seed)
		}
		if row.StallMS > 0 || row.CPUPressure > 0 {
			f.Machine = fmt.Sprintf("CPU pressure %.0f%%", 100*row.CPUPressure)
			if row.StallMS > 0 {
				f.Machine += fmt.Sprintf("; stall %d ms (%s)", row.StallMS, row.StallOf)
			}
		}
		if r.Reproduce != nil && row.Verdict != Skipped {
			f.Repro = r.Reproduce(row)
		}
		rows = append(rows, f)
	}
	data := map[string]any{
		"Title": r.Title, "Status": r.Status, "Scenarios": m.Scenarios, "Lines": lines, "Notes": m.Notes,
		"Legend": legend, "Rows": rows, "Env": r.Env, "Sweep": sweepData(r.Sweep, r.Base), "Body": r.Body,
	}
	return reportPage.Execute(w, data)
}

// href is the link to file f from a page in dir base. It is a
// template.URL because html/template would refuse the file: scheme; the
// path is escaped by url.URL.
func href(base, f string) template.URL {
	if base != "" {
		if ab, err := filepath.Abs(base); err == nil {
			if af, err := filepath.Abs(f); err == nil {
				if rel, err := filepath.Rel(ab, af); err == nil && !strings.HasPrefix(rel, "..") {
					return template.URL((&url.URL{Path: filepath.ToSlash(rel)}).String())
				}
			}
		}
	}
	af, err := filepath.Abs(f)
	if err != nil {
		af = f
	}
	return template.URL((&url.URL{Scheme: "file", Path: filepath.ToSlash(af)}).String())
}

// sweepData lays out s for the page: the heat map's colour is the share of
// writes lost, white (none) to red (all).
func sweepData(s *Sweep, base string) any {
	if s == nil {
		return nil
	}
	type cell struct {
		Text, Title string
		Style       template.CSS // built here from numbers only
		Href        template.URL
	}
	type line struct {
		Lease string
		Cells []cell
	}
	var lines []line
	for i, l := range s.Leases {
		ln := line{Lease: l.String()}
		for j := range s.Pauses {
			var c cell
			if i < len(s.Cells) && j < len(s.Cells[i]) {
				r := s.Cells[i][j]
				switch {
				case r.Verdict == Unknown:
					c.Text, c.Style = "?", "background:#fff3cd"
				case r.Verdict == Skipped || r.Verdict == "":
					c.Text, c.Style = "–", "background:#eee"
				default:
					share := 0.0
					if r.Writes > 0 {
						share = min(float64(r.Lost)/float64(r.Writes), 1)
					}
					if r.Lost > 0 {
						share = max(share, 0.15) // a loss is never near-white
					}
					light := 100 - 55*share
					c.Text = fmt.Sprint(r.Lost)
					c.Style = template.CSS(fmt.Sprintf("background:hsl(0,85%%,%.0f%%)", light))
					if light < 65 {
						c.Style += ";color:#fff"
					}
				}
				c.Title = fmt.Sprintf("lease %v, pause %v: %s, %d lost of %d writes", l, s.Pauses[j], r.Verdict, r.Lost, r.Writes)
				for _, f := range r.Artifacts {
					if filepath.Ext(f) == ".html" {
						c.Href = href(base, f)
					}
				}
			}
			ln.Cells = append(ln.Cells, c)
		}
		lines = append(lines, ln)
	}
	var pauses []string
	for _, p := range s.Pauses {
		pauses = append(pauses, p.String())
	}
	return map[string]any{"Backend": s.Backend, "Fencing": onOff(s.Fencing), "Count": s.Count, "Pauses": pauses, "Lines": lines}
}

var reportPage = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 16px; color: #222; background: #fff; }
h1 { font-size: 20px; margin: 0 0 8px; } h2 { font-size: 16px; margin: 20px 0 6px; }
table { border-collapse: collapse; }
td, th { border: 1px solid #ccc; padding: 3px 8px; vertical-align: top; }
th { background: #f4f4f4; font-weight: 600; text-align: left; }
td.cell { text-align: center; white-space: nowrap; }
.v-kept { background: #d4edda; } .v-broken { background: #f5b7b1; font-weight: 700; }
.v-unknown { background: #fff3cd; } .v-skipped { background: #eee; color: #777; }
td.cell a { display: inline-block; font-size: 11px; font-weight: 400; margin: 0 2px; }
.status { background: #fff3cd; border: 1px solid #e0c060; padding: 6px 10px; font-weight: 600; }
.notes li, .legend { color: #555; max-width: 1150px; }
code { font-size: 12px; }
table.rows td { font-size: 12px; } table.rows td.num { text-align: right; }
#sweep td { text-align: right; min-width: 48px; }
</style></head>
<body>
<h1>{{.Title}}</h1>
{{if .Status}}<p class="status" id="status">{{.Status}}</p>{{end}}
{{if not (or .Sweep .Body)}}<h2>Matrix</h2>
<table id="matrix"><tr><th>backend</th><th>fencing</th>{{range .Scenarios}}<th>{{.}}</th>{{end}}</tr>
{{range .Lines}}<tr><th>{{.Backend}}</th><th>{{.Fencing}}</th>{{range .Cells}}<td class="cell{{if .Class}} v-{{.Class}}{{end}}">{{.Text}}{{if .Links}}<br>{{range .Links}}<a class="{{.Class}}" href="{{.Href}}">{{.Label}}</a>{{end}}{{end}}</td>{{end}}</tr>
{{end}}</table>
<p class="legend" style="white-space:pre-line">{{.Legend}}</p>
{{if .Notes}}<ol class="notes">{{range .Notes}}<li>{{.}}</li>{{end}}</ol>{{end}}
{{end}}{{with .Sweep}}<h2>Lost updates: lease × pause ({{.Backend}}, fencing {{.Fencing}}, {{.Count}} pauses per cell)</h2>
<table id="sweep"><tr><th>lease \ pause</th>{{range .Pauses}}<th>{{.}}</th>{{end}}</tr>
{{range .Lines}}<tr><th>{{.Lease}}</th>{{range .Cells}}<td style="{{.Style}}" title="{{.Title}}">{{if .Href}}<a href="{{.Href}}">{{.Text}}</a>{{else}}{{.Text}}{{end}}</td>{{end}}</tr>
{{end}}</table>
<p class="legend">Each cell: updates lost; the redder, the larger their share of the writes. No lease outlasts every pause: a longer one only makes the window rarer; fencing closes it.</p>
{{end}}
{{.Body}}
{{if .Rows}}<h2>Runs</h2>
<table class="rows" id="rows"><tr><th>backend</th><th>fencing</th><th>scenario</th><th>verdict</th><th>expected</th><th>writes</th><th>counter</th><th>lost</th><th>overlaps</th><th>rejected</th><th>lease</th><th>time</th><th>seed</th><th>machine</th><th>reason</th><th>reproduce</th></tr>
{{range .Rows}}<tr><td>{{.Backend}}</td><td>{{.Fence}}</td><td>{{.Scenario}}</td><td class="v-{{.Verdict}}">{{.Verdict}}</td><td>{{.Expected}}</td>{{if .Skip}}<td colspan="9"></td>{{else}}<td class="num">{{.Writes}}</td><td class="num">{{.Counter}}</td><td class="num">{{.Lost}}</td><td class="num">{{.Overlaps}}</td><td class="num">{{.Rejected}}</td><td class="num">{{.Lease}}</td><td class="num">{{.Time}}</td><td>{{.Seed}}</td><td>{{.Machine}}</td>{{end}}<td>{{.Reason}}</td><td>{{if .Repro}}<code>{{.Repro}}</code>{{end}}</td></tr>
{{end}}</table>{{end}}
{{if .Env}}<h2>Environment</h2>
<table id="env">{{range .Env}}<tr><th>{{index . 0}}</th><td>{{index . 1}}</td></tr>{{end}}</table>{{end}}
</body></html>
`))
