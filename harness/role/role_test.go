package role

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/locksuite/locksuite/internal/roles"
)

// testRoleEnv asks for the test role: it exits with the status its value
// names, from Serve, without the library calling os.Exit.
const testRoleEnv = "LOCKSUITE_TEST_ROLE"

func init() {
	roles.Add(testRoleEnv, func(v string) int {
		n, err := strconv.Atoi(v)
		if err != nil {
			return 2
		}
		return n
	})
}

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// TestServe: this test binary run again with the role's variable is the
// role, whose status Serve returns and TestMain exits with; the tests never
// run there (a test would print PASS and exit 0).
func TestServe(t *testing.T) {
	for _, want := range []int{0, 7} {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestServe$", "-test.v")
		cmd.Env = append(os.Environ(), testRoleEnv+"="+strconv.Itoa(want))
		out, err := cmd.CombinedOutput()
		got := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			got = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if got != want || len(out) != 0 {
			t.Errorf("role %d: exit status %d, output %q; want %d and no output", want, got, out, want)
		}
	}
}

// TestServeNoRole: in a process whose environment asks for no role, Serve
// returns at once, served false.
func TestServeNoRole(t *testing.T) {
	if code, ok := Serve(); ok || code != 0 {
		t.Errorf("Serve() = %d, %v; want 0, false", code, ok)
	}
	if !roles.Dispatched() {
		t.Error("Dispatched() is false after Serve")
	}
}
