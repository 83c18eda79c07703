package bench

import (
	"fmt"
	"html/template"
	"math"
	"strings"
)

// htmlPage is a bench's section of an HTML report (HTML): the machine and
// the sizes, a chart of each backend's uncontended latency (svg id "bench-latency-chart"), a
// chart of grants per second against contending clients (svg id
// "bench-throughput-chart"; one polyline of class "series" per backend,
// with data-backend), then every table of WriteText (table ids
// "bench-latency", "bench-throughput", "bench-write", "bench-fairness",
// "bench-takeover") with its notes.
var htmlPage = template.Must(template.New("bench").Parse(`<p id="bench-machine">{{.Machine}}<br>{{.Size}}</p>
<h2>Uncontended acquire + release latency</h2>
{{.Latency}}
<p class="legend">One line per backend, 1 client, log scale: the box spans p50 to p99, the tick is p90, the dot p50, the whisker reaches the largest (medians of the rounds).</p>
<h2>Grants per second against contending clients</h2>
{{.Throughput}}
<p class="legend">Empty critical section, log scales; the dashed line is the in-process lock, the harness's ceiling.</p>
{{range .Tables}}<h2>{{.Title}}</h2>
<table id="{{.ID}}" class="bench"><tr>{{range .Head}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr>{{range $i, $c := .}}{{if eq $i 0}}<th>{{$c}}</th>{{else}}<td>{{$c}}</td>{{end}}{{end}}</tr>
{{end}}</table>
{{with .Lines}}<ul class="notes">{{range .}}<li>{{.}}</li>{{end}}</ul>{{end}}
{{end}}`))

// HTML is r as a section of an HTML report: give it to report.WriteReport
// as Report.Body, which draws it instead of the matrix (the page's style
// has the classes it uses). It escapes every name and reason it shows.
func HTML(r Report) (template.HTML, error) {
	var b strings.Builder
	if err := htmlPage.Execute(&b, htmlData(r)); err != nil {
		return "", err
	}
	return template.HTML(b.String()), nil
}

// htmlData lays r out for htmlPage.
func htmlData(r Report) any {
	type table struct {
		benchTable
		Lines []string
	}
	var tables []table
	for _, t := range benchTables(r) {
		tables = append(tables, table{t, t.lines()})
	}
	return map[string]any{
		"Machine": r.Machine.String(), "Size": sizeLine(r), "Status": r.Status, "Tables": tables,
		"Latency": latencyChart(r), "Throughput": throughputChart(r),
	}
}

// palette colours the backends in the charts, in order.
var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"}

func colour(i int) string { return palette[i%len(palette)] }

// logScale maps [lo, hi] (positive) onto [a, b] logarithmically.
type logScale struct{ lo, hi, a, b float64 }

func (s logScale) at(v float64) float64 {
	v = min(max(v, s.lo), s.hi)
	return s.a + (s.b-s.a)*(math.Log10(v)-math.Log10(s.lo))/(math.Log10(s.hi)-math.Log10(s.lo))
}

// decades are the powers of ten from lo to hi, for axis ticks.
func decades(lo, hi float64) []float64 {
	var out []float64
	for v := lo; v <= hi*1.0001; v *= 10 {
		out = append(out, v)
	}
	return out
}

// bounds widens [lo, hi] to whole powers of ten.
func bounds(lo, hi float64) (float64, float64) {
	l := math.Pow(10, math.Floor(math.Log10(lo)))
	h := math.Pow(10, math.Ceil(math.Log10(hi)))
	if h <= l {
		h = l * 10
	}
	return l, h
}

// latencyChart draws the uncontended latency of each backend: a line per
// backend on a log axis of milliseconds.
func latencyChart(r Report) template.HTML {
	type line struct {
		name             string
		p50, p90, p99, m float64
	}
	var lines []line
	lo, hi := math.Inf(1), 0.0
	for _, res := range r.Results {
		p, ok := res.Point(1, Empty, false)
		if !ok || p.Cycle.P50.Median <= 0 {
			continue
		}
		l := line{nameOf(res), p.Cycle.P50.Median, p.Cycle.P90.Median, p.Cycle.P99.Median, p.Cycle.Max.Median}
		lines = append(lines, l)
		lo, hi = min(lo, l.p50), max(hi, l.m)
	}
	if len(lines) == 0 {
		return `<p class="legend">No backend measured the uncontended point.</p>`
	}
	lo, hi = bounds(lo, hi)
	const left, right, top, rowH = 200.0, 860.0, 10.0, 24.0
	height := top + rowH*float64(len(lines)) + 30
	x := logScale{lo, hi, left, right}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg id="bench-latency-chart" width="%.0f" height="%.0f" font-size="12">`, right+40, height)
	for _, d := range decades(lo, hi) {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/><text x="%.1f" y="%.1f" text-anchor="middle">%s ms</text>`,
			x.at(d), top, x.at(d), height-25, x.at(d), height-8, num(d))
	}
	for i, l := range lines {
		y := top + rowH*float64(i) + rowH/2
		c := colour(i)
		fmt.Fprintf(&b, `<g class="series" data-backend="%s"><title>%s: p50 %s, p90 %s, p99 %s, max %s ms</title>`,
			template.HTMLEscapeString(l.name), template.HTMLEscapeString(l.name), num(l.p50), num(l.p90), num(l.p99), num(l.m))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`, left-8, y+4, template.HTMLEscapeString(l.name))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`, x.at(l.p50), y, x.at(l.m), y, c)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`, x.at(l.m), y-5, x.at(l.m), y+5, c)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="10" fill="%s" fill-opacity="0.35" stroke="%s"/>`, x.at(l.p50), y-5, max(x.at(l.p99)-x.at(l.p50), 1), c, c)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`, x.at(l.p90), y-5, x.at(l.p90), y+5, c)
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/></g>`, x.at(l.p50), y, c)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // built here from escaped names and numbers only
}

// throughputChart draws grants per second (empty section) against the
// clients: a polyline per backend, log scales.
func throughputChart(r Report) template.HTML {
	type pt struct {
		clients int
		v       float64
	}
	type series struct {
		name    string
		ceiling bool
		pts     []pt
	}
	var all []series
	lo, hi := math.Inf(1), 0.0
	for _, res := range r.Results {
		s := series{name: nameOf(res), ceiling: res.Ceiling}
		for _, c := range r.Clients {
			if p, ok := res.Point(c, Empty, false); ok && p.GrantsPerSec.Median > 0 {
				s.pts = append(s.pts, pt{c, p.GrantsPerSec.Median})
				lo, hi = min(lo, p.GrantsPerSec.Median), max(hi, p.GrantsPerSec.Median)
			}
		}
		if len(s.pts) > 0 {
			all = append(all, s)
		}
	}
	if len(all) == 0 {
		return `<p class="legend">No backend measured grants per second.</p>`
	}
	lo, hi = bounds(lo, hi)
	const left, right, top, bottom = 80.0, 620.0, 10.0, 330.0
	y := logScale{lo, hi, bottom, top}
	xs := map[int]float64{}
	for i, c := range r.Clients {
		xs[c] = left + (right-left)*float64(i)/float64(max(len(r.Clients)-1, 1))
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg id="bench-throughput-chart" width="%.0f" height="%.0f" font-size="12">`, right+260, bottom+40)
	for _, d := range decades(lo, hi) {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/><text x="%.1f" y="%.1f" text-anchor="end">%s</text>`,
			left, y.at(d), right, y.at(d), left-6, y.at(d)+4, num(d))
	}
	for _, c := range r.Clients {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/><text x="%.1f" y="%.1f" text-anchor="middle">%d</text>`,
			xs[c], top, xs[c], bottom, xs[c], bottom+16, c)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">contending clients</text>`, (left+right)/2, bottom+34)
	for i, s := range all {
		c := colour(i)
		var coords []string
		for _, p := range s.pts {
			coords = append(coords, fmt.Sprintf("%.1f,%.1f", xs[p.clients], y.at(p.v)))
		}
		dash := ""
		if s.ceiling {
			dash = ` stroke-dasharray="6 4"`
		}
		name := template.HTMLEscapeString(s.name)
		fmt.Fprintf(&b, `<g class="series" data-backend="%s"><polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`, name, strings.Join(coords, " "), c, dash)
		for _, p := range s.pts {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s, %d clients: %s grants/s</title></circle>`, xs[p.clients], y.at(p.v), c, name, p.clients, num(p.v))
		}
		ly := top + 16*float64(i) + 8
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/><text x="%.1f" y="%.1f">%s</text></g>`,
			right+20, ly, right+44, ly, c, dash, right+50, ly+4, name)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // built here from escaped names and numbers only
}
