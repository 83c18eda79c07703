package report

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestWriteReport: the page is self-contained and script-free, colours
// and links each cell from its rows, escapes what the run wrote, and draws
// the sweep.
func TestWriteReport(t *testing.T) {
	rows := []Row{
		{Backend: "etcd", Scenario: "pause", Verdict: Broken, Lost: 4, Writes: 20, Seed: 7,
			Artifacts: []string{"/tmp/art/etcd_pause-1.json", "/tmp/art/etcd_pause-1.html"}},
		{Backend: "etcd", Fencing: true, Scenario: "pause", Verdict: Kept,
			Artifacts: []string{"/elsewhere/x y.html"}},
		{Backend: "redis", Scenario: "pause", Verdict: Skipped, Reason: `</td><script>alert(1)</script>`},
	}
	var b bytes.Buffer
	err := WriteReport(&b, Report{
		Title: "locksuite run", Status: "cut short by SIGINT after 2 of 6 runs", Rows: rows, Base: "/tmp/art",
		Env:       [][2]string{{"go", "go1.26"}},
		Reproduce: func(r Row) string { return "locksuite run --backends " + r.Backend },
	})
	if err != nil {
		t.Fatal(err)
	}
	ms := time.Millisecond
	var sb bytes.Buffer
	err = WriteReport(&sb, Report{Title: "locksuite sweep", Rows: rows[:1],
		Sweep: &Sweep{Backend: "redis", Count: 3, Leases: []time.Duration{200 * ms, time.Second}, Pauses: []time.Duration{300 * ms},
			Cells: [][]Row{{{Verdict: Broken, Lost: 5, Writes: 10}}, {{Verdict: Kept, Writes: 10}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sb.String(), `id="matrix"`) || strings.Contains(b.String(), `id="sweep"`) {
		t.Errorf("a sweep's page has a matrix, or a run's a heat map")
	}
	page := b.String() + sb.String()
	if m := regexp.MustCompile(`(?i)<script|src\s*=|@import|url\(|https?:`).FindString(page); m != "" {
		t.Errorf("the page has a script or refers to something outside itself: %q", m)
	}
	for _, tc := range []struct{ what, want string }{
		{"status", `<p class="status" id="status">cut short by SIGINT after 2 of 6 runs</p>`},
		{"broken cell, relative links", `<td class="cell v-broken">BROKEN 4 lost<br><a class="history" href="etcd_pause-1.json">history</a><a class="timeline" href="etcd_pause-1.html">timeline</a></td>`},
		{"kept cell, link outside Base", `<td class="cell v-kept">kept<br><a class="timeline" href="file:///elsewhere/x%20y.html">timeline</a></td>`},
		{"skipped cell", `<td class="cell v-skipped">– [1]</td>`},
		{"escaped note", `<li>&lt;/td&gt;&lt;script&gt;alert(1)&lt;/script&gt;</li>`},
		{"reproduce", `<code>locksuite run --backends etcd</code>`},
		{"environment", `<tr><th>go</th><td>go1.26</td></tr>`},
		{"sweep, lost", `<td style="background:hsl(0,85%,72%)" title="lease 200ms, pause 300ms: broken, 5 lost of 10 writes">5</td>`},
		{"sweep, none lost", `<td style="background:hsl(0,85%,100%)" title="lease 1s, pause 300ms: kept, 0 lost of 10 writes">0</td>`},
	} {
		if !strings.Contains(page, tc.want) {
			t.Errorf("%s: page lacks %q", tc.what, tc.want)
		}
	}
	if t.Failed() {
		t.Log(page)
	}
}
