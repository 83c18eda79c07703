package suite

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/locksuite/locksuite/harness/faults"
)

// lagger is Servers that replicate asynchronously, for Expect.
type lagger struct{ faults.Service }

func (lagger) Lag(context.Context) (func() error, error) { return nil, nil }

// segments splits text at each marker, in order: the text from one marker
// to the next, by the expectation the marker introduces.
func segments(t *testing.T, where, text string, markers [3]string) map[Expectation]string {
	t.Helper()
	out := map[Expectation]string{}
	xs := [3]Expectation{Loses, Measures, Keeps}
	for i, m := range markers {
		a := strings.Index(text, m)
		if a < 0 {
			t.Fatalf("%s: no %q", where, m)
		}
		rest := text[a:]
		if i+1 < len(markers) {
			if b := strings.Index(rest, markers[i+1]); b >= 0 {
				rest = rest[:b]
			}
		}
		out[xs[i]] = rest
	}
	return out
}

// mentions reports whether text names scenario n (not as part of a longer
// name: "failover" is not in "failover-load").
func mentions(text, n string) bool {
	return regexp.MustCompile(`(^|[^\w-])` + regexp.QuoteMeta(n) + `([^\w-]|$)`).MatchString(text)
}

// checkSegments: each scenario but the control is named in the segment of
// what it asserts under ExpectLoss, unfenced, on an asynchronous service
// and on a consensus-replicated one, and in no other.
func checkSegments(t *testing.T, where string, seg map[Expectation]string) {
	t.Helper()
	for _, sc := range table {
		if sc.Name == Control {
			continue
		}
		var want []Expectation
		for _, srv := range []Servers{lagger{}, nil} {
			c := &Config{ExpectLoss: true, Servers: srv}
			if x := sc.Expect(c); !slices.Contains(want, x) {
				want = append(want, x)
			}
		}
		for _, x := range []Expectation{Loses, Measures, Keeps} {
			if got := mentions(seg[x], sc.Name); got != slices.Contains(want, x) {
				var asserts []string
				for _, w := range want {
					asserts = append(asserts, string(w.Verdict()))
				}
				t.Errorf("%s: %s: named among the scenarios that assert %q: %v, but under ExpectLoss its spec asserts %s (asynchronous service, then consensus)", where, sc.Name, x.Verdict(), got, strings.Join(asserts, ", "))
			}
		}
	}
}

// TestExpectLossDocumented: docs/scenarios.md's table of what a spec
// asserts names each scenario where the table's rows put it
// (Config.ExpectLoss's doc points there instead of repeating it).
func TestExpectLossDocumented(t *testing.T) {
	md, err := os.ReadFile("../docs/scenarios.md")
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for _, l := range strings.Split(string(md), "\n") {
		if strings.HasPrefix(l, "| unfenced with `ExpectLoss` |") {
			row = l
		}
	}
	if row == "" {
		t.Fatal("docs/scenarios.md: no row \"| unfenced with `ExpectLoss` |\"")
	}
	checkSegments(t, "docs/scenarios.md", segments(t, "docs/scenarios.md", row, [3]string{"loses:", "Measures:", "Keeps:"}))
}
