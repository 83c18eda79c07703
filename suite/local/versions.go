package local

import (
	"archive/zip"
	"bufio"
	"context"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// ServerVersions describes the server of each service that the backends
// or services names run on, once per service, in table order: one pair
// ("<service> server", what it is) each. A server the environment names
// (the first of its variables that is set) is not asked: "named by
// REDIS_URL (version not asked)". Otherwise it is the server the harness
// would start here: the version its binary reports (the binary's path,
// then the first line of its answer), the version of an embedded server's
// module, or "not found here". Unknown names are left out.
func ServerVersions(names []string) [][2]string {
	var out [][2]string
	for _, s := range servicesOf(names) {
		v := "unknown"
		if n := s.namedBy(); n != "" {
			v = "named by " + n + " (version not asked)"
		} else if s.version != nil {
			v = s.version()
		}
		out = append(out, [2]string{s.name + " server", v})
	}
	return out
}

// ClientModules lists the Go modules of the clients of the backends
// names (of a service's name: every backend on it), and of the servers
// embedded in this process, each once, in table order.
func ClientModules(names []string) []string {
	var out []string
	for _, b := range table.backends {
		if slices.Contains(names, b.name) || slices.Contains(names, b.on.name) {
			for _, m := range b.modules {
				if !slices.Contains(out, m) {
					out = append(out, m)
				}
			}
		}
	}
	return out
}

// servicesOf lists the services that names (backends or services) run on,
// each once, in table order.
func servicesOf(names []string) []*service {
	var out []*service
	for _, s := range services() {
		for _, n := range names {
			if o, ok := serviceOf(n); ok && o == s {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// namedBy is the first of s's variables set in the environment, or "".
func (s *service) namedBy() string {
	for _, v := range s.vars {
		if os.Getenv(v) != "" {
			return v
		}
	}
	return ""
}

// binVersion is "<path>: <first line of its output>" for the first of
// names that is found (in PATH, or as a glob: the last match) and answers
// args (default --version) within 2 seconds; "not found here" if none
// does.
func binVersion(args []string, names ...string) string {
	if len(args) == 0 {
		args = []string{"--version"}
	}
	for _, n := range names {
		p, err := exec.LookPath(n)
		if err != nil {
			m, _ := filepath.Glob(n)
			if len(m) == 0 {
				continue
			}
			p = m[len(m)-1]
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		out, err := exec.CommandContext(ctx, p, args...).Output()
		cancel()
		if err == nil {
			line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
			return p + ": " + line
		}
	}
	return "not found here"
}

// jarVersion is "<jar>: <groupId>:<artifactId> <version>" from the
// Maven properties a jar carries (META-INF/maven/*/*/pom.properties), or
// "not found here".
func jarVersion(jar string) string {
	z, err := zip.OpenReader(jar)
	if err != nil {
		return "not found here"
	}
	defer z.Close()
	for _, f := range z.File {
		if ok, _ := path.Match("META-INF/maven/*/*/pom.properties", f.Name); !ok {
			continue
		}
		r, err := f.Open()
		if err != nil {
			break
		}
		defer r.Close()
		p := map[string]string{}
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), "="); ok {
				p[strings.TrimSpace(k)] = strings.TrimSpace(v)
			}
		}
		return jar + ": " + p["groupId"] + ":" + p["artifactId"] + " " + p["version"]
	}
	return jar + ": no version in it (META-INF/maven/*/*/pom.properties)"
}
