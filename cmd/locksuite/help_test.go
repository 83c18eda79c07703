package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/locksuite/locksuite/suite/local"
)

// TestHelp: each help exits 0 and says what the command does, gives an
// example and names every flag with its default.
func TestHelp(t *testing.T) {
	runFlags := []string{"artifacts", "backends", "chaos-duration", "clients", "duration", "fencing", "html", "image", "interval", "json",
		"junit", "keep-broken", "kubernetes", "lease", "log", "long-lease", "markdown", "namespace", "pause", "pauses", "progress", "repeat", "rows", "scenarios",
		"seed", "stall-every", "store", "workers"}
	sweepFlags := []string{"backend", "count", "fencing", "html", "leases", "pauses", "seed"}
	diffFlags := []string{"all", "as", "markdown"}
	benchFlags := []string{"backends", "clients", "duration", "fencing", "hold", "html", "json", "lease", "markdown", "rounds", "store", "takeover"}
	for _, tc := range []struct {
		args  []string
		want  []string
		flags []string
	}{
		{[]string{"--help"}, []string{"locksuite run [flags]", "locksuite sweep [flags]", "locksuite diff OLD NEW", "locksuite bench [flags]", "Examples:", "go install github.com/locksuite/locksuite/cmd/locksuite@latest", "Exit status"}, nil},
		{[]string{"help"}, []string{"locksuite run [flags]", "Examples:"}, nil},
		{[]string{"-h"}, []string{"locksuite run [flags]"}, nil},
		{[]string{"run", "--help"}, []string{"Usage: locksuite run", "Example:", `(default "all")`, `(default "off,on")`, "(default 2s)", "(default 3)", `(default "auto")`}, runFlags},
		{[]string{"sweep", "--help"}, []string{"Usage: locksuite sweep", "Example:", `(default "redis")`, "(default 3)", "(default off)"}, sweepFlags},
		{[]string{"bench", "--help"}, []string{"Usage: locksuite bench", "Example:", `(default "all")`, `(default "1,4,16,64")`, "(default 2s)", "(default 3)", `(default "killed,frozen")`}, benchFlags},
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

// TestHelpNamesTheTable: the help is suite/local's table's. `locksuite help`
// names every service a backend of "all" or of local.WhenNamed runs on, and
// the variable of each of "all"'s; run's --backends names every backend and
// every service's variable; --store names local.Stores, which --store
// accepts, and no other; the per-backend defaults name every backend.
func TestHelpNamesTheTable(t *testing.T) {
	text := usage()
	for _, s := range servicesOf(slices.Concat(local.Names, local.WhenNamed)) {
		if !strings.Contains(strings.Join(strings.Fields(text), " "), s.Title) {
			t.Errorf("locksuite help does not name %s (%s)", s.Title, s.Name)
		}
	}
	for _, s := range servicesOf(local.Names) {
		if !strings.Contains(text, s.Variable) {
			t.Errorf("locksuite help does not name %s (%s)", s.Variable, s.Name)
		}
	}
	var errb bytes.Buffer
	if _, err := parseRun([]string{"--help"}, &errb); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("run --help: %v", err)
	}
	runHelp := errb.String()
	for _, s := range local.Services() {
		if !strings.Contains(backendsHelp(), s.Variable) {
			t.Errorf("--backends does not name %s (%s)", s.Variable, s.Name)
		}
		for _, b := range s.Backends {
			if !slices.Contains(strings.FieldsFunc(backendsHelp(), func(r rune) bool { return r == ',' || r == ' ' || r == ':' || r == ';' }), b) {
				t.Errorf("--backends does not name %s", b)
			}
		}
	}
	if !strings.Contains(runHelp, backendsHelp()) || !strings.Contains(runHelp, storeHelp()) || !strings.Contains(runHelp, leaseHelp()) {
		t.Errorf("run --help does not give backendsHelp, storeHelp and leaseHelp:\n%s", runHelp)
	}
	for _, n := range slices.Concat(local.Names, local.WhenNamed) {
		for _, h := range []string{leaseHelp(), pauseHelp(), pausesHelp(), chaosDurationHelp()} {
			if !strings.Contains(h, n) {
				t.Errorf("%q does not give %s's default", h, n)
			}
		}
	}
	for _, st := range local.Stores {
		if !strings.Contains(storeHelp(), st) {
			t.Errorf("--store does not name %s", st)
		}
		if _, err := parseRun([]string{"--store", st}, io.Discard); err != nil {
			t.Errorf("--store %s: %v", st, err)
		}
	}
	if _, err := parseRun([]string{"--store", "redis"}, io.Discard); err == nil {
		t.Errorf("--store redis: accepted; local.Stores is %v", local.Stores)
	}
}
