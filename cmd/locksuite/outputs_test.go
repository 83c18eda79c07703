package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOutputsCheckedFirst: an output path that cannot be written makes run
// (and sweep) exit 2 at once, naming the flag, the path and the fix, before
// any server starts; good paths pass and the check leaves nothing behind.
func TestOutputsCheckedFirst(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--json", "/nonexistent/x.json"}, "--json /nonexistent/x.json: directory /nonexistent does not exist: create it or choose another path"},
		{[]string{"run", "--markdown", filepath.Join(file, "r.md")}, "--markdown " + filepath.Join(file, "r.md") + ": " + file + " is not a directory"},
		{[]string{"run", "--junit", dir}, "--junit " + dir + ": is a directory: give a file name"},
		{[]string{"run", "--html", "/proc/locksuite-report.html"}, "--html /proc/locksuite-report.html: directory /proc is not writable"},
		{[]string{"run", "--log", "/nonexistent/spec.log"}, "--log /nonexistent/spec.log: directory /nonexistent does not exist"},
		{[]string{"run", "--artifacts", file}, "--artifacts " + file + ": exists and is not a directory"},
		{[]string{"run", "--artifacts", filepath.Join(file, "a", "b")}, file + " is not a directory"},
		{[]string{"run", "--keep-broken", file}, "--keep-broken " + file + ": exists and is not a directory"},
		{[]string{"run", "--html", filepath.Join(file, "r.html")}, "--html " + filepath.Join(file, "r.html")},
		{[]string{"sweep", "--html", "/nonexistent/s.html"}, "--html /nonexistent/s.html: directory /nonexistent does not exist"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			start := time.Now()
			code := cli(tc.args, &out, &errb)
			took := time.Since(start)
			if code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if !strings.Contains(errb.String(), tc.want) {
				t.Errorf("stderr %q lacks %q", errb.String(), tc.want)
			}
			if strings.Contains(errb.String(), "servers ready") {
				t.Errorf("servers started before the check: %s", errb.String())
			}
			if took > time.Second {
				t.Errorf("took %v: the check must come before any server", took)
			}
		})
	}

	// Good paths: nothing made, nothing left.
	good := t.TempDir()
	existing := filepath.Join(good, "old.json")
	os.WriteFile(existing, []byte("[]"), 0o644)
	o := options{json: existing, markdown: filepath.Join(good, "r.md"), junit: filepath.Join(good, "j.xml"),
		html: filepath.Join(good, "r.html"), log: filepath.Join(good, "spec.log"), artifacts: filepath.Join(good, "new", "art"), keepBroken: good}
	if err := checkOutputs(outputsOf(o)); err != nil {
		t.Fatalf("good paths: %v", err)
	}
	entries, _ := os.ReadDir(good)
	if len(entries) != 1 || entries[0].Name() != "old.json" {
		t.Errorf("the check left %v", entries)
	}
	if b, _ := os.ReadFile(existing); string(b) != "[]" {
		t.Errorf("the check changed an existing file: %q", b)
	}
}
