package history

import (
	"encoding/json"
	"testing"
)

// FuzzSection: any JSON decodes to a Section or an error; a decoded
// Section is Valid or not without panicking, prints its outcome, and a
// valid one survives a round trip unchanged.
func FuzzSection(f *testing.F) {
	b, _ := json.Marshal(Section{Client: 1, Asked: 10, Start: 20, End: 30, Fence: 7, Read: 4, Wrote: 5, Outcome: Failed})
	f.Add(string(b))
	f.Add(`{"outcome":-1}`)
	f.Add(`{"outcome":4,"start_ns":1}`)
	f.Add(`{"asked_ns":5,"start_ns":4,"end_ns":3}`)
	f.Add(`{"fence":-1}`)
	f.Add(`null`)
	f.Fuzz(func(t *testing.T, in string) {
		var s Section
		if json.Unmarshal([]byte(in), &s) != nil {
			return
		}
		_ = s.Outcome.String()
		if s.Valid() != nil {
			return
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var s2 Section
		if err := json.Unmarshal(b, &s2); err != nil || s2 != s {
			t.Fatalf("round trip of %+v gave %+v (%v)", s, s2, err)
		}
	})
}
