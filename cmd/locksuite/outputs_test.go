package main

import (
	"bytes"
	"io"
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
		{[]string{"run", "--json", "/proc/nonexistent/x.json"}, "--json /proc/nonexistent/x.json: directory /proc is not writable"},
		{[]string{"run", "--markdown", filepath.Join(file, "r.md")}, "--markdown " + filepath.Join(file, "r.md") + ": " + file + " is not a directory"},
		{[]string{"run", "--junit", dir}, "--junit " + dir + ": is a directory: give a file name"},
		{[]string{"run", "--html", "/proc/locksuite-report.html"}, "--html /proc/locksuite-report.html: directory /proc is not writable"},
		{[]string{"run", "--log", "/proc/nonexistent/spec.log"}, "--log /proc/nonexistent/spec.log: directory /proc is not writable"},
		{[]string{"run", "--artifacts", file}, "--artifacts " + file + ": exists and is not a directory"},
		{[]string{"run", "--artifacts", filepath.Join(file, "a", "b")}, file + " is not a directory"},
		{[]string{"run", "--keep-broken", file}, "--keep-broken " + file + ": exists and is not a directory"},
		{[]string{"run", "--html", filepath.Join(file, "r.html")}, "--html " + filepath.Join(file, "r.html")},
		{[]string{"sweep", "--html", "/proc/nonexistent/s.html"}, "--html /proc/nonexistent/s.html: directory /proc is not writable"},
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

	// Good paths, a file in a directory the run will make among them
	// (report/index.html): nothing made, nothing left.
	good := t.TempDir()
	existing := filepath.Join(good, "old.json")
	os.WriteFile(existing, []byte("[]"), 0o644)
	o := options{json: existing, markdown: filepath.Join(good, "r.md"), junit: filepath.Join(good, "j.xml"),
		html: filepath.Join(good, "report", "index.html"), log: filepath.Join(good, "spec.log"), artifacts: filepath.Join(good, "new", "art"), keepBroken: good}
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

// TestOutputsMakeTheirDirectory: a file output whose directory does not
// exist yet is written there, the directory made (as --artifacts makes its
// own).
func TestOutputsMakeTheirDirectory(t *testing.T) {
	p := filepath.Join(t.TempDir(), "report", "sub", "index.html")
	if err := writeAtomic(p, func(w io.Writer) error { _, err := io.WriteString(w, "<html>"); return err }); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(p); err != nil || string(b) != "<html>" {
		t.Errorf("%s: %q, %v", p, b, err)
	}
}
