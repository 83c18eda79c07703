package services

import (
	"archive/zip"
	"bufio"
	"context"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// BinVersion is "<path>: <first line of its output>" for the first of
// names that is found (in PATH, or as a glob: the last match) and answers
// args (default --version) within 2 seconds; "not found here" if none
// does.
func BinVersion(args []string, names ...string) string {
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

// JarVersion is "<jar>: <groupId>:<artifactId> <version>" from the
// Maven properties a jar carries (META-INF/maven/*/*/pom.properties), or
// "not found here".
func JarVersion(jar string) string {
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
