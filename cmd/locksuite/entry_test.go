package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/locksuite/locksuite/harness/report"
	"github.com/locksuite/locksuite/suite"
	"github.com/locksuite/locksuite/suite/local"
)

// asSuiteTest, set to a backend's name, makes the test binary run
// suite.Test on that backend's fenced Config instead of its tests
// (TestMain), writing its rows into suite.ReportDirEnv.
const asSuiteTest = "LOCKSUITE_TEST_AS_SUITE_TEST"

func suiteTest(backend string) int {
	env, err := local.Start(context.Background(), []string{backend})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer env.Close()
	if err := env.Unavailable[backend]; err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if !suite.Test(tb{}, env.Config(backend, true)) {
		return 1
	}
	return 0
}

// TestSameRowsAsSuiteTest: the CLI and suite.Test run the suite through
// one entry point (suite.Execute), so a fenced lock that gives no fencing
// token (redsync: Fence() is 0) gets the same rows from both: one skipped
// row per scenario, with the same reason, and no spec registered for it.
func TestSameRowsAsSuiteTest(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real Redis server")
	}
	tmp := t.TempDir()
	cliJSON := filepath.Join(tmp, "cli.json")
	code, out, errs := runCLI(t, tmp, "run", "--backends", "redsync", "--fencing", "on", "--json", cliJSON)
	if code != 0 {
		t.Fatalf("locksuite run: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	reports := filepath.Join(tmp, "reports")
	code, out, errs = runWith(t, tmp, []string{asSuiteTest + "=redsync", suite.ReportDirEnv + "=" + reports})
	if code != 0 {
		t.Fatalf("suite.Test: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	fromCLI, fromTest := readRowsFile(t, cliJSON), readRowsFile(t, filepath.Join(reports, "locksuite.json"))
	if len(fromCLI) != len(suite.Order()) {
		t.Errorf("the CLI gave %d rows, want one per scenario (%d)", len(fromCLI), len(suite.Order()))
	}
	key := func(r report.Row) string {
		return fmt.Sprintf("%s fencing=%v %s: %s (%s)", r.Backend, r.Fencing, r.Scenario, r.Verdict, r.Reason)
	}
	for i := range max(len(fromCLI), len(fromTest)) {
		var a, b string
		if i < len(fromCLI) {
			a = key(fromCLI[i])
		}
		if i < len(fromTest) {
			b = key(fromTest[i])
		}
		if a != b {
			t.Errorf("row %d: the CLI's %q, suite.Test's %q", i, a, b)
		}
	}
	for _, r := range fromCLI {
		if r.Verdict != report.Skipped || r.Reason != suite.NoFence {
			t.Errorf("%s: %s (%s), want skipped: %s", r.Scenario, r.Verdict, r.Reason, suite.NoFence)
		}
	}
}

func readRowsFile(t *testing.T, path string) []report.Row {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := report.DecodeRows(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return rows
}
