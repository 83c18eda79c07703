package local

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestDockerCompose validates docker-compose.yml with the compose client
// where one is installed (no engine is needed for `config`), and checks that
// it brings up the server of every adapter "all" runs.
func TestDockerCompose(t *testing.T) {
	const file = "../../docker-compose.yml"
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, be := range table() {
		if n := be.on.name; be.kind == adapter && !be.whenNamed && !strings.Contains(string(b), "\n  "+n+":\n") {
			t.Errorf("docker-compose.yml has no %s service (for the %s backend)", n, be.name)
		}
	}
	var cmd *exec.Cmd
	if _, err := exec.LookPath("docker-compose"); err == nil {
		cmd = exec.Command("docker-compose", "-f", file, "config", "-q")
	} else if out, err := exec.Command("docker", "compose", "version").CombinedOutput(); err == nil && strings.Contains(string(out), "version") {
		cmd = exec.Command("docker", "compose", "-f", file, "config", "-q")
	} else {
		t.Skip("no compose client (docker compose or docker-compose) to validate docker-compose.yml")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, out)
	}
}
