package owner

import (
	"fmt"
	"os/exec"
	"testing"
)

// TestGone: this process is not gone; a child that has exited and been
// reaped is; a record with this pid but another start time (a reused pid)
// is; text that is no record names nobody.
func TestGone(t *testing.T) {
	self, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	if gone, ok := Gone(self); !ok || gone {
		t.Errorf("Gone(Self()=%q) = %v, %v; want false, true", self, gone, ok)
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := fmt.Sprintf("%d 1", cmd.Process.Pid)
	if gone, ok := Gone(dead); !ok || !gone {
		t.Errorf("Gone(%q) of a reaped child = %v, %v; want true, true", dead, gone, ok)
	}
	var pid int
	var start uint64
	fmt.Sscanf(self, "%d %d", &pid, &start)
	reused := fmt.Sprintf("%d %d", pid, start+1)
	if gone, ok := Gone(reused); !ok || !gone {
		t.Errorf("Gone(%q), this pid with another start time, = %v, %v; want true, true", reused, gone, ok)
	}
	if _, ok := Gone("not a record"); ok {
		t.Error(`Gone("not a record") is ok; want not ok`)
	}
}
