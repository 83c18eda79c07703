package bench

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/locksuite/locksuite/harness/report"
)

// benchReport is a bench of the ceiling and two backends: one measured
// (its fenced points skipped, a takeover that timed out in a round), one
// that could not run, with a name that needs escaping.
func benchReport() Report {
	st := func(v float64) Stat { return Stat{Min: v * 0.9, Median: v, Max: v * 1.1} }
	dist := func(v float64) Dist {
		return Dist{P50: st(v), P90: st(2 * v), P99: st(4 * v), Max: st(8 * v)}
	}
	pt := func(c int, sec Section, fenced bool, gps float64) Point {
		p := Point{Clients: c, Section: sec, Fenced: fenced, Rounds: 3, RoundMS: 500, Grants: int(gps), GrantsPerSec: st(gps), Cycle: dist(1000 / gps),
			Fairness: Fairness{Jain: 0.5, FairestJain: 1, Starved: c / 2, FewestStarved: 0}, LongestWaitMS: st(100), RepliesPerGrant: st(float64(c))}
		if c > 1 {
			h := dist(0.1)
			p.Handoff = &h
		}
		return p
	}
	ceiling := Result{Backend: MutexName, Ceiling: true, Fence: true}
	etcd := Result{Backend: "etcd", LeaseMS: 1000, ExpiryMS: 1500, Fence: false,
		Takeovers: []Takeover{
			{Fault: Killed, Rounds: 3, TimeMS: st(1200), BoundMS: 6500},
			{Fault: Frozen, Rounds: 3, TimedOut: 1, TimeMS: st(1300), BoundMS: 6500},
		}}
	for _, c := range []int{1, 4} {
		ceiling.Points = append(ceiling.Points, pt(c, Empty, false, 500000), pt(c, Write, false, 2000), pt(c, Write, true, 1800))
		etcd.Points = append(etcd.Points, pt(c, Empty, false, 1000), pt(c, Write, false, 500),
			Point{Clients: c, Section: Write, Fenced: true, Skipped: NoFence})
	}
	etcd.Points[0].Errors, etcd.Points[0].FirstError = 2, "client 0: Acquire: broken pipe"
	hold := pt(4, Hold, false, 40)
	hold.HoldMS = 20
	etcd.Points = append(etcd.Points, hold)
	return Report{Machine: Machine{Cores: 2, GOMAXPROCS: 2, Go: "go1.26", OS: "linux/amd64", LoadBefore: []float64{0.5, 0.4, 0.3}},
		DurationMS: 2000, Rounds: 3, Clients: []int{1, 4},
		Results: []Result{ceiling, etcd, {Backend: "<b>redis</b>", Error: "redis unavailable: start it"}}}
}

// TestWriteText: the tables say what was measured, with the ceiling
// first, the cost of fencing as a ratio, the takeover against the lease,
// and why a cell is empty.
func TestWriteText(t *testing.T) {
	var b, md bytes.Buffer
	if err := WriteText(&b, benchReport()); err != nil {
		t.Fatal(err)
	}
	if err := WriteMarkdown(&md, benchReport()); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	for _, want := range []string{
		"2 cores (GOMAXPROCS 2), linux/amd64, go1.26; load average 0.50 0.40 0.30 before",
		"Each point: 2000 ms, a warm-up window then 3 rounds of 500 ms",
		"in-process (ceiling)  0.00200 [0.00180–0.00220]",
		"etcd                  1.00 [0.900–1.10]",
		"Ceiling: the in-process lock's 500000 grants/s (1 client) is 500× the fastest service's, etcd's 1000",
		"2000 / 1800 (0.90)",
		"500 / – [1]",
		"[1] skipped: " + NoFence,
		"0.500 (1.000)", "2 of 4 (0)",
		"1200 [1080–1320]", "1300 [1170–1430], 1 of 3 > 6500", "1.30",
		"[1] redis unavailable: start it",
		etcdGuide,
		"etcd, 1 client, empty section: 2 failed in the rounds, each retried after 10 ms; the first: client 0: Acquire: broken pipe",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("table lacks %q:\n%s", want, text)
		}
	}
	for _, want := range []string{"| backend | p50 | p90 | p99 | max | grants/s | published |", "| etcd | empty | 4 | 0.500 (1.000) |", "| etcd | hold 20 ms | 4 | 0.500 (1.000) | 2 of 4 (0) |", "- [1] skipped: "} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
}

// TestBenchHTML: the report's bench section has every table and both
// charts, one series per backend that ran, escapes what it shows, and
// refers to nothing outside itself.
func TestBenchHTML(t *testing.T) {
	r := benchReport()
	var b bytes.Buffer
	body, err := HTML(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := report.WriteReport(&b, report.Report{Title: "locksuite bench", Body: body, Env: [][2]string{{"go", "go1.26"}}}); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if m := regexp.MustCompile(`(?i)<script|src\s*=|@import|url\(|https?:`).FindString(page); m != "" {
		t.Errorf("the page has a script or refers to something outside itself: %q", m)
	}
	if strings.Contains(page, `id="matrix"`) || strings.Contains(page, "<b>redis") {
		t.Error("a bench page has a matrix, or an unescaped name")
	}
	for _, id := range []string{"bench-latency", "bench-throughput", "bench-write", "bench-fairness", "bench-takeover", "bench-latency-chart", "bench-throughput-chart"} {
		if !strings.Contains(page, `id="`+id+`"`) {
			t.Errorf("page lacks id %q", id)
		}
	}
	for _, chart := range []string{"bench-latency-chart", "bench-throughput-chart"} {
		i := strings.Index(page, `id="`+chart+`"`)
		svg := page[i : i+strings.Index(page[i:], "</svg>")]
		if n := strings.Count(svg, `class="series"`); n != 2 {
			t.Errorf("%s has %d series, want 2 (the ceiling and etcd)", chart, n)
		}
		if !strings.Contains(svg, `data-backend="etcd"`) {
			t.Errorf("%s has no etcd series", chart)
		}
	}
	for _, want := range []string{"<th>in-process (ceiling)</th>", "<td>1300 [1170–1430], 1 of 3 &gt; 6500</td>", "&lt;b&gt;redis&lt;/b&gt;", "<tr><th>go</th><td>go1.26</td></tr>"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}
