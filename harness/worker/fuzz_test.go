package worker

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/locksuite/locksuite/harness/checker"
	"github.com/locksuite/locksuite/harness/history"
)

// FuzzDecodeEvents: whatever a worker writes on its events descriptor,
// DecodeEvents delivers only valid events (a known kind, a valid section
// with section events only, the worker's own client id) or stops with an
// error naming the worker; it never panics, and the checkers take the
// sections it delivered.
func FuzzDecodeEvents(f *testing.F) {
	good := func(es ...Event) string {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		for _, e := range es {
			_ = enc.Encode(e)
		}
		return b.String()
	}
	sec := &history.Section{Client: 0, Asked: 1, Start: 2, End: 3, Fence: 4, Read: 5, Wrote: 6, Outcome: history.Rejected}
	f.Add(good(Event{Kind: "ready"}, Event{Kind: "read", T: 5}, Event{Kind: "section", Section: sec}, Event{Kind: "released"}, Event{Kind: "done", Writes: 3, Rejected: 1}))
	f.Add(good(Event{Kind: "error", Err: "client 0: acquire: boom"}))
	f.Add(good(Event{Kind: "stall", T: 8}))
	f.Add(`{"kind":"sleep","t":7}`) // a kind workers no longer report
	f.Add(`{"kind":"section","section":{"outcome":9,"start_ns":5,"end_ns":1}}`)
	f.Add(`{"kind":"section"}`)
	f.Add(`{"kind":"ready","section":{}}`)
	f.Add(`{"kind":"nonsense"}`)
	f.Add(`{"kind":"section","section":{"asked_ns":-1,"start_ns":0,"end_ns":0,"read":9223372036854775807,"wrote":-9223372036854775808}}`)
	f.Add("{\"kind\":\"ready\"}\n{\"kind\":")
	f.Add(`[1,2,3]`)
	f.Add("")
	f.Fuzz(func(t *testing.T, in string) {
		ch := make(chan Event, len(in)+1)
		err := DecodeEvents(strings.NewReader(in), 2, ch)
		close(ch)
		if err != nil && !strings.HasPrefix(err.Error(), "worker 2: bad event: ") {
			t.Fatalf("error %q does not name the worker", err)
		}
		var secs []history.Section
		for e := range ch {
			if !eventKinds[e.Kind] || e.Client != 2 || (e.Kind == "section") != (e.Section != nil) {
				t.Fatalf("delivered an invalid event %+v", e)
			}
			if e.Section != nil {
				if e.Section.Valid() != nil || e.Section.Client != 2 {
					t.Fatalf("delivered an invalid section %+v", *e.Section)
				}
				secs = append(secs, *e.Section)
			}
		}
		r := checker.Judge(secs, 0, time.Second)
		_ = r.Verdict.String()
	})
}

// FuzzSpec: a worker's LOCKSUITE_WORKER value either decodes to a Spec or
// is refused with an error naming the variable (FromEnv's parseSpec).
func FuzzSpec(f *testing.F) {
	b, _ := json.Marshal(Spec{Target: "redis/fenced=false", ID: 1, Key: "locksuite/x", Lease: time.Second, StallEvery: 10})
	f.Add(string(b))
	f.Add(`{"id":"one"}`)
	f.Add(`{`)
	f.Fuzz(func(t *testing.T, in string) {
		if _, err := parseSpec(in); err != nil && !strings.Contains(err.Error(), EnvVar) {
			t.Fatalf("%q: error %v does not name %s", in, err, EnvVar)
		}
	})
}
