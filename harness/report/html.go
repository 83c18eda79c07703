package report

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"time"

	"github.com/locksuite/locksuite/harness/checker"
	"github.com/locksuite/locksuite/harness/history"
)

// Fault is a time one client could not run or reach the lock service
// (stopped, stalled, its path frozen, cut or blackholed, its session
// killed), or, with Client -1, a fault of the lock service itself (a server
// stopped, its leader killed, its clock moved). Times are on the history's
// clock, like Section's.
type Fault struct {
	Client int           `json:"client"` // -1: the lock service
	Start  time.Duration `json:"start_ns"`
	End    time.Duration `json:"end_ns"`
	// Kind says what the fault was: "sigstop", "stall" (the whole process,
	// renewals included), "sleep" (the holder's goroutine only), "freeze"
	// (the client's connections to the lock service), "cut", "blackhole",
	// "session killed"; for the service "server sigstop", "leader killed",
	// "clock jump".
	Kind string `json:"kind"`
	// What, if not empty, is what the fault struck, as the row's schedule
	// says it ("power loss of redis-server, dropped 243 B of 1 file
	// (…)"): the timeline shows it on the fault.
	What string `json:"what,omitempty"`
}

// Timeline is one run's record: its result, every critical section and
// every fault. Its JSON form is the history file the suite keeps in
// Config.Artifacts; WriteHTML draws it.
type Timeline struct {
	Row      Row               `json:"row"`
	Key      string            `json:"key"` // the run's lock and counter name
	Sections []history.Section `json:"sections"`
	Faults   []Fault           `json:"faults"`
	_        struct{}
}

// WriteJSON writes t as indented JSON.
func (t Timeline) WriteJSON(w io.Writer) error {
	if t.Sections == nil {
		t.Sections = []history.Section{}
	}
	if t.Faults == nil {
		t.Faults = []Fault{}
	}
	b, err := json.MarshalIndent(t, "", " ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// WriteHTML writes t as one self-contained HTML page (inline CSS, script and
// data; nothing is fetched): the row's figures and seed on top, then one
// lane per client on one time axis with a bar per critical section
// (accepted blue, rejected orange with a cross, failed purple, ended
// before writing grey; a thin line for the wait for the lock), faults
// hatched over the lane (over every lane for a fault of the lock service),
// and in red the time two accepted sections
// overlapped (checker.Overlaps), on both bars.
//
// The page's script draws an SVG with the id "timeline"; each bar has the
// class "section" and data-client, each overlap mark the class "overlap",
// each fault "fault", each rejection mark "rejected"; when drawn, the body
// gets data-drawn="sections overlaps rejected faults" counts, data-plot,
// the SVG's bounding box in CSS pixels ("x y width height"), and
// data-lanes, each client's lane top ("client:y ... h:height").
func WriteHTML(w io.Writer, t Timeline) error {
	type pair struct {
		A, B       int
		Start, End int64
	}
	type sec struct {
		Client                   int
		Asked, Start, End, Fence int64
		Outcome                  string
		Read, Wrote              int64
	}
	type fault struct {
		Client     int
		Start, End int64
		Kind, What string
	}
	data := struct {
		Sections []sec
		Overlaps []pair
		Faults   []fault
	}{Sections: []sec{}, Overlaps: []pair{}, Faults: []fault{}}
	for _, s := range t.Sections {
		data.Sections = append(data.Sections, sec{s.Client, int64(s.Asked), int64(s.Start), int64(s.End), int64(s.Fence), s.Outcome.String(), s.Read, s.Wrote})
	}
	for _, o := range checker.Overlaps(t.Sections) {
		data.Overlaps = append(data.Overlaps, pair{o.A, o.B, int64(o.Start), int64(o.End)})
	}
	for _, f := range t.Faults {
		data.Faults = append(data.Faults, fault{f.Client, int64(f.Start), int64(f.End), f.Kind, f.What})
	}
	js, err := json.Marshal(data) // escapes <, > and &: safe inside <script>
	if err != nil {
		return err
	}
	r := t.Row
	fencing := "fencing off"
	if r.Fencing {
		fencing = "fencing on"
	}
	figures := []struct{ Name, Value string }{
		{"writes", fmt.Sprint(r.Writes)}, {"counter", fmt.Sprint(r.Counter)}, {"lost", fmt.Sprint(r.Lost)},
		{"overlaps", fmt.Sprint(r.Overlaps)}, {"rejected", fmt.Sprint(r.Rejected)}, {"verdict", string(r.Verdict)},
	}
	if r.Expected != "" {
		figures = append(figures, struct{ Name, Value string }{"expected", string(r.Expected)})
	}
	seed := "none (deterministic)"
	if r.Seed != 0 {
		seed = fmt.Sprint(r.Seed)
	}
	figures = append(figures,
		struct{ Name, Value string }{"seed", seed},
		struct{ Name, Value string }{"lease", fmt.Sprintf("%d ms", r.LeaseMS)},
		struct{ Name, Value string }{"time", fmt.Sprintf("%d ms", r.DurationMS)})
	if r.StallMS > 0 || r.CPUPressure > 0 {
		figures = append(figures,
			struct{ Name, Value string }{"longest stall", fmt.Sprintf("%d ms (%s, at %d ms)", r.StallMS, r.StallOf, r.StallAtMS)},
			struct{ Name, Value string }{"CPU pressure", fmt.Sprintf("%.0f%%", 100*r.CPUPressure)})
	}
	return page.Execute(w, map[string]any{
		"Title":   fmt.Sprintf("%s, %s, %s: %s", r.Backend, fencing, r.Scenario, r.Verdict),
		"Figures": figures,
		"Reason":  r.Reason,
		"Sched":   r.Schedule,
		"Key":     t.Key,
		"Verdict": r.Verdict,
		"Data":    template.JS(js),
	})
}

// The colours are the test's too: the overlap red must appear nowhere else.
var page = template.Must(template.New("timeline").Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 16px; color: #222; background: #fff; }
h1 { font-size: 18px; margin: 0 0 8px; }
table.figures { border-collapse: collapse; margin-bottom: 6px; }
table.figures td, table.figures th { border: 1px solid #ccc; padding: 2px 8px; text-align: right; }
table.figures th { background: #f4f4f4; font-weight: 600; }
.v-broken { color: #b00; font-weight: 700; } .v-kept { color: #070; font-weight: 700; }
.note { color: #555; margin: 2px 0; max-width: 1150px; }
.legend span { display: inline-block; margin-right: 14px; }
.legend i { display: inline-block; width: 14px; height: 10px; margin-right: 4px; vertical-align: middle; }
svg text { font: 12px system-ui, sans-serif; fill: #333; }
</style></head>
<body>
<h1>{{.Title}}</h1>
<table class="figures"><tr>{{range .Figures}}<th>{{.Name}}</th>{{end}}</tr>
<tr>{{range .Figures}}<td{{if eq .Name "verdict"}} class="v-{{$.Verdict}}"{{end}}>{{.Value}}</td>{{end}}</tr></table>
{{if .Reason}}<p class="note">{{.Reason}}</p>{{end}}
{{if .Sched}}<p class="note">faults: {{.Sched}}</p>{{end}}
<p class="note">run {{.Key}}</p>
<p class="legend"><span><i style="background:#4363d8"></i>accepted write</span><span><i style="background:#f58231"></i>rejected (stale)</span><span><i style="background:#911eb4"></i>failed</span><span><i style="background:#c8c8c8"></i>no write</span><span><i style="background:repeating-linear-gradient(45deg,#999 0 2px,#fff 2px 4px);border:1px dashed #555"></i>paused / stalled / frozen</span><span><i style="border:2px solid #b00;height:6px"></i>accepted sections overlapping (red)</span></p>
<svg id="timeline" xmlns="http://www.w3.org/2000/svg" width="1200" height="100"></svg>
<script id="data" type="application/json">{{.Data}}</script>
<script>
(function () {
  var d = JSON.parse(document.getElementById('data').textContent);
  var svg = document.getElementById('timeline'), NS = 'http://www.w3.org/2000/svg';
  var W = 1200, left = 90, right = 20, top = 10, lane = 34, bar = 20;
  var clients = {};
  d.Sections.forEach(function (s) { clients[s.Client] = true; });
  d.Faults.forEach(function (f) { if (f.Client >= 0) clients[f.Client] = true; });
  var ids = Object.keys(clients).map(Number).sort(function (a, b) { return a - b; });
  var row = {}; ids.forEach(function (c, i) { row[c] = i; });
  var t0 = Infinity, t1 = -Infinity;
  d.Sections.forEach(function (s) { t0 = Math.min(t0, s.Asked, s.Start); t1 = Math.max(t1, s.End); });
  d.Faults.forEach(function (f) { t0 = Math.min(t0, f.Start); t1 = Math.max(t1, f.End); });
  if (!isFinite(t0)) { t0 = 0; t1 = 1; }
  if (t1 <= t0) t1 = t0 + 1;
  var H = top + lane * Math.max(ids.length, 1) + 30;
  svg.setAttribute('height', H);
  function x(t) { return left + (t - t0) / (t1 - t0) * (W - left - right); }
  function el(name, attrs, text) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    svg.appendChild(e); return e;
  }
  function span(a, b, minw) { var xa = Math.round(x(a)), w = Math.max(Math.round(x(b)) - xa, minw); return [xa, w]; }
  ids.forEach(function (c, i) {
    var y = top + lane * i;
    el('rect', {x: left, y: y, width: W - left - right, height: lane - 4, fill: '#fafafa'});
    el('text', {x: 4, y: y + lane / 2 + 2}, 'client ' + c);
  });
  var n = {sections: 0, overlaps: 0, rejected: 0, faults: 0};
  var colour = {accepted: '#4363d8', rejected: '#f58231', failed: '#911eb4', aborted: '#c8c8c8'};
  d.Sections.forEach(function (s) {
    var y = top + lane * row[s.Client] + (lane - 4 - bar) / 2;
    if (s.Start > s.Asked) el('line', {x1: Math.round(x(s.Asked)), x2: Math.round(x(s.Start)), y1: y + bar / 2, y2: y + bar / 2, stroke: '#aaa'});
    var sp = span(s.Start, s.End, 1);
    if (sp[1] > 3) sp[1] -= 1; // a gap between back-to-back sections
    var r = el('rect', {'class': 'section', 'data-client': s.Client, 'data-outcome': s.Outcome, x: sp[0], y: y, width: sp[1], height: bar, fill: colour[s.Outcome] || '#c8c8c8'});
    el('title', {}, 'client ' + s.Client + ', fence ' + s.Fence + ', read ' + s.Read + ', wrote ' + s.Wrote + ', ' + s.Outcome + ', ' + ((s.End - s.Start) / 1e6).toFixed(1) + ' ms');
    r.appendChild(svg.lastChild); n.sections++;
    if (s.Outcome === 'rejected') {
      var cx = sp[0] + sp[1];
      el('path', {'class': 'rejected', d: 'M' + (cx - 5) + ' ' + (y - 3) + 'l10 ' + (bar + 6) + 'M' + (cx + 5) + ' ' + (y - 3) + 'l-10 ' + (bar + 6), stroke: '#000', 'stroke-width': 2});
      n.rejected++;
    }
  });
  // Faults over the bars, hatched: the bar shows through.
  var defs = el('defs', {}), pat = document.createElementNS(NS, 'pattern');
  pat.setAttribute('id', 'hatch'); pat.setAttribute('width', 6); pat.setAttribute('height', 6);
  pat.setAttribute('patternUnits', 'userSpaceOnUse'); pat.setAttribute('patternTransform', 'rotate(45)');
  var pl = document.createElementNS(NS, 'rect');
  pl.setAttribute('width', 3); pl.setAttribute('height', 6); pl.setAttribute('fill', 'rgba(0,0,0,0.28)');
  pat.appendChild(pl); defs.appendChild(pat);
  d.Faults.forEach(function (f) {
    // A fault of the lock service (Client -1) covers every lane.
    var s = span(f.Start, f.End, 2), all = f.Client < 0, y = all ? top : top + lane * row[f.Client];
    var h = all ? lane * Math.max(ids.length, 1) - 4 : lane - 4;
    var e = el('rect', {'class': 'fault', 'data-client': f.Client, x: s[0], y: y, width: s[1], height: h, fill: 'url(#hatch)', stroke: '#555', 'stroke-dasharray': '3 2'});
    el('title', {}, (f.What || f.Kind) + ' ' + ((f.End - f.Start) / 1e6).toFixed(0) + ' ms');
    e.appendChild(svg.lastChild); n.faults++;
    if (s[1] > 60) el('text', {x: s[0] + 3, y: y + 10, style: 'font-size:10px'}, f.Kind);
  });
  d.Overlaps.forEach(function (o) {
    [o.A, o.B].forEach(function (i) {
      var s = d.Sections[i], y = top + lane * row[s.Client] + (lane - 4 - bar) / 2, sp = span(o.Start, o.End, 3);
      el('rect', {'class': 'overlap', 'data-client': s.Client, x: sp[0], y: y, width: sp[1], height: bar, fill: '#e6194b'});
    });
    n.overlaps++;
  });
  var ay = top + lane * Math.max(ids.length, 1) + 4;
  el('line', {x1: left, x2: W - right, y1: ay, y2: ay, stroke: '#333'});
  var span_s = (t1 - t0) / 1e9, step = Math.pow(10, Math.floor(Math.log10(span_s / 5)));
  if (span_s / step > 12) step *= 2; if (span_s / step > 12) step *= 2.5;
  for (var t = 0; t <= span_s + 1e-9; t += step) {
    var tx = x(t0 + t * 1e9);
    el('line', {x1: tx, x2: tx, y1: ay, y2: ay + 5, stroke: '#333'});
    el('text', {x: tx - 10, y: ay + 18}, (step < 1 ? t.toFixed(String(step).length - 2) : t.toFixed(0)) + ' s');
  }
  var b = svg.getBoundingClientRect(), lanes = [];
  ids.forEach(function (c, i) { lanes.push(c + ':' + Math.round(b.top + window.scrollY + top + lane * i)); });
  document.body.setAttribute('data-lanes', lanes.join(' ') + ' h:' + (lane - 4));
  document.body.setAttribute('data-drawn', n.sections + ' ' + n.overlaps + ' ' + n.rejected + ' ' + n.faults);
  document.body.setAttribute('data-plot', Math.round(b.left + window.scrollX) + ' ' + Math.round(b.top + window.scrollY) + ' ' + Math.round(b.width) + ' ' + Math.round(b.height));
})();
</script>
</body></html>
`))
