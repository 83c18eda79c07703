package report

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/locksuite/locksuite/harness/history"
)

// TestWriteHTMLSelfContained: the page fetches nothing, carries the figures
// and the seed, and text from the run cannot end its script early.
func TestWriteHTMLSelfContained(t *testing.T) {
	ms := time.Millisecond
	tl := Timeline{
		Row: Row{Backend: "redis", Scenario: "pause-targeted", Writes: 2, Counter: 1, Lost: 1, Overlaps: 2, Verdict: Broken, Seed: 42,
			Reason: `2 writes reported </script><script>alert(1)</script>`},
		Key: "locksuite/x/redis",
		Sections: []history.Section{
			{Client: 0, Start: 0, End: 300 * ms, Outcome: history.Accepted},
			{Client: 1, Asked: 10 * ms, Start: 200 * ms, End: 220 * ms, Outcome: history.Accepted},
		},
		Faults: []Fault{{Client: 0, Start: 50 * ms, End: 250 * ms, Kind: "sigstop"}},
	}
	var b bytes.Buffer
	if err := WriteHTML(&b, tl); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if m := regexp.MustCompile(`(?i)(src|href)\s*=|@import|url\(\s*["']?http|fetch\(|XMLHttpRequest`).FindString(page); m != "" {
		t.Errorf("the page refers to something outside itself: %q", m)
	}
	if strings.Count(page, "<script") != 2 || strings.Count(page, "</script>") != 2 {
		t.Errorf("the reason broke out of its element: %d <script, %d </script>", strings.Count(page, "<script"), strings.Count(page, "</script>"))
	}
	for _, want := range []string{"<th>writes</th>", "<th>lost</th>", "<th>overlaps</th>", "<th>rejected</th>", "<th>verdict</th>",
		"<th>seed</th>", "<td>42</td>", `class="v-broken">broken`, `"Overlaps":[{"A":0,"B":1`} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}
