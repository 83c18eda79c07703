package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestHelp: each help exits 0 and says what the command does, gives an
// example and names every flag with its default.
func TestHelp(t *testing.T) {
	runFlags := []string{"artifacts", "backends", "chaos-duration", "clients", "duration", "fencing", "html", "interval", "json",
		"junit", "keep-broken", "lease", "log", "long-lease", "markdown", "pause", "pauses", "progress", "repeat", "rows", "scenarios",
		"seed", "stall-every", "store", "workers"}
	sweepFlags := []string{"backend", "count", "fencing", "html", "leases", "pauses", "seed"}
	diffFlags := []string{"all", "as", "markdown"}
	for _, tc := range []struct {
		args  []string
		want  []string
		flags []string
	}{
		{[]string{"--help"}, []string{"locksuite run [flags]", "locksuite sweep [flags]", "locksuite diff OLD NEW", "Examples:", "go install github.com/locksuite/locksuite/cmd/locksuite@latest", "Exit status"}, nil},
		{[]string{"help"}, []string{"locksuite run [flags]", "Examples:"}, nil},
		{[]string{"-h"}, []string{"locksuite run [flags]"}, nil},
		{[]string{"run", "--help"}, []string{"Usage: locksuite run", "Example:", `(default "all")`, `(default "off,on")`, "(default 2s)", "(default 3)", `(default "auto")`}, runFlags},
		{[]string{"sweep", "--help"}, []string{"Usage: locksuite sweep", "Example:", `(default "redis")`, "(default 3)", "(default off)"}, sweepFlags},
		{[]string{"diff", "--help"}, []string{"Usage: locksuite diff", "locksuite diff before.json after.json", "locksuite diff --as redis=etcd", "Exit status: 1"}, diffFlags},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := cli(tc.args, &out, &errb); code != 0 {
				t.Errorf("exit %d, want 0", code)
			}
			text := out.String() + errb.String()
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					t.Errorf("help lacks %q:\n%s", w, text)
				}
			}
			for _, f := range tc.flags {
				i := strings.Index(text, "\n  -"+f+" ")
				if i < 0 {
					i = strings.Index(text, "\n  -"+f+"\n")
				}
				if i < 0 {
					t.Errorf("help does not name -%s:\n%s", f, text)
					continue
				}
				// Its description (up to the next flag) states a default.
				desc := text[i+4:]
				if j := strings.Index(desc, "\n  -"); j >= 0 {
					desc = desc[:j]
				}
				if !strings.Contains(desc, "default") {
					t.Errorf("-%s states no default: %q", f, desc)
				}
			}
		})
	}
}

// TestGoInstall installs the CLI with go install into a temporary GOBIN, as
// the README's go install ...@latest does from the module proxy, and runs
// locksuite --help from there.
func TestGoInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the CLI")
	}
	gobin := t.TempDir()
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		goTool = "go"
	}
	start := time.Now()
	cmd := exec.Command(goTool, "install", "./cmd/locksuite")
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "GOBIN="+gobin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install ./cmd/locksuite: %v\n%s", err, out)
	}
	t.Logf("go install in %v", time.Since(start).Round(time.Millisecond))
	out, err := exec.Command(filepath.Join(gobin, "locksuite"), "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("locksuite --help: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "locksuite run [flags]") {
		t.Errorf("locksuite --help from GOBIN:\n%s", out)
	}
}
