package local

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/locksuite/locksuite/harness/services"
)

// TestDockerCompose validates docker-compose.yml with the compose client
// where one is installed (no engine is needed for `config`), and checks it
// against the table: every service has a compose service of its name, whose
// variable the file's header gives, or says why it has none (noCompose).
func TestDockerCompose(t *testing.T) {
	const file = "../../docker-compose.yml"
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	header, _, _ := strings.Cut(string(b), "\nservices:\n")
	for _, s := range allServices() {
		has := strings.Contains(string(b), "\n  "+s.Name+":\n")
		switch {
		case has && s.NoCompose != "":
			t.Errorf("docker-compose.yml has a %s service, but the table says it has none: %s", s.Name, s.NoCompose)
		case !has && s.NoCompose == "":
			t.Errorf("docker-compose.yml has no %s service (for %v), and the table gives no reason (noCompose)", s.Name, backendsOn(s))
		case has && !strings.Contains(header, s.Vars[0]+"="):
			t.Errorf("docker-compose.yml's header does not give %s= for its %s service", s.Vars[0], s.Name)
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

// backendsOn lists the backends on s.
func backendsOn(s *services.Service) []string {
	var out []string
	for _, b := range table.backends {
		if b.On == s {
			out = append(out, b.Name)
		}
	}
	return out
}
