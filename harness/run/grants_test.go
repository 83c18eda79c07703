package run

import (
	"strings"
	"testing"
	"time"

	"github.com/locksuite/locksuite/harness/history"
)

// TestSessionNote: the note names the server sessions of overlapping
// accepted sections, and nothing when none overlapped or the leases name
// no session.
func TestSessionNote(t *testing.T) {
	sec := func(client int, start, end time.Duration, session string) history.Section {
		return history.Section{Client: client, Start: start, End: end, Session: session, Outcome: history.Accepted}
	}
	for _, tc := range []struct {
		name string
		secs []history.Section
		want string
	}{
		{"apart", []history.Section{sec(0, 0, 10, "pid 7"), sec(1, 10, 20, "pid 7")}, ""},
		{"no sessions", []history.Section{sec(0, 0, 10, ""), sec(1, 5, 20, "")}, ""},
		{"one backend", []history.Section{sec(0, 0, 10, "pid 7"), sec(1, 5, 20, "pid 7"), sec(1, 8, 30, "pid 7")},
			"overlapping grants on server sessions: clients 0 and 1 both on pid 7 (2 times)"},
		{"two backends", []history.Section{sec(2, 0, 10, "pid 7"), sec(0, 5, 20, "pid 8")},
			"overlapping grants on server sessions: client 2 on pid 7 with client 0 on pid 8 (once)"},
	} {
		if got := sessionNote(tc.secs); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := sessionNote([]history.Section{sec(0, 0, 10, "pid 7"), {Client: 1, Start: 5, End: 20, Session: "pid 7", Outcome: history.Rejected}}); strings.Contains(got, "pid") {
		t.Errorf("a rejected section counted: %q", got)
	}
}
