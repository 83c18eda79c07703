package local

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestDefaultsDocumented: docs/your-lock.md's table of the sizes a
// service's Config gets is Defaults', row by row, and has a row for every
// service of the table.
func TestDefaultsDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/your-lock.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "| service | lease | chaos pause | pauses | interval | chaos duration | stall every |")
	if i < 0 {
		t.Fatal("docs/your-lock.md: no table of the services' sizes")
	}
	seen := map[string]bool{}
	for _, l := range strings.Split(s[i:], "\n")[2:] {
		if !strings.HasPrefix(l, "| `") {
			break
		}
		cells := strings.Split(strings.Trim(l, "| "), " | ")
		for _, n := range strings.Split(cells[0], ", ") {
			n = strings.Trim(n, "`")
			seen[n] = true
			c, err := Defaults(n)
			if err != nil {
				t.Errorf("docs/your-lock.md: %s: %v", n, err)
				continue
			}
			want := fmt.Sprintf("%v | %v | %d | %v | %v | %d", c.Lease, c.Chaos.Pause, c.Chaos.Pauses, c.Chaos.Interval, c.Chaos.Duration, c.Chaos.StallEvery)
			if got := strings.Join(cells[1:], " | "); got != want {
				t.Errorf("docs/your-lock.md: %s: %s, Defaults: %s", n, got, want)
			}
		}
	}
	for _, s := range allServices() {
		if !seen[s.Name] {
			t.Errorf("docs/your-lock.md's table of sizes has no row for %s", s.Name)
		}
	}
}
