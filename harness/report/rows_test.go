package report

import (
	"bytes"
	"strings"
	"testing"
)

// TestDecodeRows: what EncodeRows writes reads back; JSON Lines read too;
// anything else is an error that says so.
func TestDecodeRows(t *testing.T) {
	rows := []Row{{Backend: "etcd", Scenario: "baseline", Verdict: Kept}, {Backend: "etcd", Fencing: true, Scenario: "pause", Verdict: Broken, Lost: 3}}
	var enc bytes.Buffer
	if err := EncodeRows(&enc, rows); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, in string
		n        int
		err      string
	}{
		{"array", enc.String(), 2, ""},
		{"empty array: a run that finished nothing", "[]\n", 0, ""},
		{"JSON Lines", `{"backend":"etcd","scenario":"a","verdict":"kept"}` + "\n" + `{"backend":"etcd","scenario":"b","verdict":"broken","lost":2}` + "\n", 2, ""},
		{"a field of a newer version", `[{"backend":"etcd","scenario":"a","verdict":"kept","new_field":1}]`, 1, ""},
		{"empty file", "", 0, "empty"},
		{"not rows", `{"name":"x"}`, 0, "not the rows of locksuite run --json"},
		{"cut JSON", `[{"backend":"etcd",`, 0, "unexpected EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeRows(strings.NewReader(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || len(got) != tc.n {
				t.Fatalf("%d rows, %v; want %d", len(got), err, tc.n)
			}
		})
	}
	got, _ := DecodeRows(&enc)
	if got[1].Lost != 3 || got[1].Verdict != Broken || !got[1].Fencing {
		t.Errorf("round trip: %+v", got[1])
	}
}
