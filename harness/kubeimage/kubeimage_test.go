package kubeimage

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// TestWrite builds the pause program statically, writes its image and
// reads the tarball back as an image: one OCI layer holding exactly the
// binary at /pause (mode 0755), the entrypoint /pause, linux/GOARCH.
func TestWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the pause program with go build")
	}
	ctx, cancel := testContext(t)
	defer cancel()
	dir := t.TempDir()
	bin, err := Static(ctx, dir, PausePackage)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := static(bin); err != nil {
		t.Fatal(err)
	}
	const ref = "localhost/locksuite/pause:test"
	path := filepath.Join(dir, "pause.tar")
	if err := Write(path, ref, bin, "-x"); err != nil {
		t.Fatal(err)
	}
	img := readArchive(t, path, ref, ref)
	if mt, err := img.MediaType(); err != nil || mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %q (%v), want %q", mt, err, types.OCIManifestSchema1)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH || !slices.Equal(cf.Config.Entrypoint, []string{"/pause", "-x"}) {
		t.Errorf("config: os %q, architecture %q, entrypoint %q: want linux, %s, [/pause -x]", cf.OS, cf.Architecture, cf.Config.Entrypoint, runtime.GOARCH)
	}
	var names []string
	for _, e := range layerEntries(t, img) {
		names = append(names, e.name)
		if e.name == "pause" && (e.mode != 0o755 || !bytes.Equal(e.data, want)) {
			t.Errorf("/pause in the layer: mode %o, %d bytes: want 755 and the %d bytes of %s", e.mode, len(e.data), len(want), bin)
		}
	}
	if !slices.Equal(names, []string{"pause"}) {
		t.Errorf("layer entries %q, want [pause]", names)
	}
}

// entry is one entry of an image's layer.
type entry struct {
	name string
	mode int64
	data []byte
}

// layerEntries are the entries of img's one layer, in their order.
func layerEntries(t *testing.T, img v1.Image) []entry {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers (%v), want 1", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var out []entry
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		out = append(out, entry{h.Name, h.Mode, data})
	}
}

// readArchive extracts the OCI layout archive at path and returns the
// image its index names ref, containerd's name for it full.
func readArchive(t *testing.T, path, ref, full string) v1.Image {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("tar", "-xf", path, "-C", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("tar -xf %s: %v: %s", path, err, out)
	}
	lp, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 {
		t.Fatalf("index.json lists %d manifests, want 1", len(m.Manifests))
	}
	d := m.Manifests[0]
	tag, _ := name.NewTag(ref)
	if got := d.Annotations["io.containerd.image.name"]; got != full {
		t.Errorf("io.containerd.image.name %q, want %q", got, full)
	}
	if got := d.Annotations["org.opencontainers.image.ref.name"]; got != tag.TagStr() {
		t.Errorf("org.opencontainers.image.ref.name %q, want %q", got, tag.TagStr())
	}
	img, err := idx.Image(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestWriteTree writes an image of two files under directories, named as
// Docker Hub's, and reads back its name (containerd's docker.io/...), its
// layer's entries and its entrypoint.
func TestWriteTree(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if err := errors.Join(os.WriteFile(a, []byte("A"), 0o600), os.WriteFile(b, []byte("BB"), 0o600)); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "tree.tar")
	if err := WriteTree(path, "redis:7", map[string]string{"/usr/bin/redis-server": a, "/lib/x/libb.so": b}, "redis-server"); err != nil {
		t.Fatal(err)
	}
	img := readArchive(t, path, "redis:7", "docker.io/library/redis:7")
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{"redis-server"}) || !slices.Contains(cf.Config.Env, "PATH=/usr/local/bin:/usr/bin:/bin") {
		t.Errorf("entrypoint %q, env %q", cf.Config.Entrypoint, cf.Config.Env)
	}
	var entries []string
	for _, e := range layerEntries(t, img) {
		entries = append(entries, fmt.Sprintf("%s %o %s", e.name, e.mode, e.data))
	}
	want := []string{"lib/ 755 ", "lib/x/ 755 ", "usr/ 755 ", "usr/bin/ 755 ", "lib/x/libb.so 755 BB", "usr/bin/redis-server 755 A"}
	if !slices.Equal(entries, want) {
		t.Errorf("layer entries %q, want %q", entries, want)
	}
}

// TestWriteBadName: a reference without a valid name is refused with an
// error that shows a good one.
func TestWriteBadName(t *testing.T) {
	err := Write(filepath.Join(t.TempDir(), "x.tar"), "Not A Name", os.Args[0])
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("localhost/locksuite/pause:1")) {
		t.Errorf("Write with a bad name: %v, want an error that shows a valid reference", err)
	}
}

// ExampleWrite makes the image of a static program of this repository,
// for a cluster that pulls from no registry.
func ExampleWrite() {
	ctx := context.Background()
	bin, err := Static(ctx, os.TempDir(), PausePackage)
	if err != nil {
		panic(err)
	}
	if err := Write(filepath.Join(os.TempDir(), "pause.tar"), "localhost/locksuite/pause:1", bin); err != nil {
		panic(err)
	}
	// kubecluster.Cluster.ImportImage, ctr images import or docker load
	// then take pause.tar.
}

// TestDockerfile checks the repository's Dockerfile without an engine: its
// build stage uses the Go release go.mod asks for, its build line (run
// here by sh in the module's root, with /out a temporary directory) makes
// a static binary, and the final stage is that binary alone on scratch,
// as its entrypoint.
func TestDockerfile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the locksuite CLI with go build")
	}
	const root = "../.."
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var goVersion string
	for _, l := range strings.Split(string(gomod), "\n") {
		if v, ok := strings.CutPrefix(l, "go "); ok {
			f := strings.Split(strings.TrimSpace(v), ".")
			goVersion = f[0] + "." + f[1]
		}
	}
	var froms, runs, copies, entry []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		switch rest := strings.TrimSpace(l[len(f[0]):]); f[0] {
		case "FROM":
			froms = append(froms, rest)
		case "RUN":
			runs = append(runs, rest)
		case "COPY":
			copies = append(copies, rest)
		case "ENTRYPOINT":
			entry = append(entry, rest)
		}
	}
	if want := []string{"golang:" + goVersion + " AS build", "scratch"}; !slices.Equal(froms, want) {
		t.Errorf("FROM lines %q, want %q (go.mod says go %s)", froms, want, goVersion)
	}
	if !slices.Contains(copies, "--from=build /out/locksuite /locksuite") || !slices.Equal(entry, []string{`["/locksuite"]`}) {
		t.Errorf("final stage: COPY %q, ENTRYPOINT %q: want /out/locksuite copied to /locksuite, its entrypoint", copies, entry)
	}
	i := slices.IndexFunc(runs, func(r string) bool { return strings.Contains(r, "go build") })
	if i < 0 {
		t.Fatalf("no RUN line with go build in %q", runs)
	}
	out := t.TempDir()
	ctx, cancel := testContext(t)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", strings.ReplaceAll(runs[i], "/out/", out+"/"))
	cmd.Dir = root
	// On the deadline, the go command goes with the shell.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if o, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", runs[i], err, o)
	}
	if err := static(filepath.Join(out, "locksuite")); err != nil {
		t.Errorf("the Dockerfile's binary cannot run on scratch: %v", err)
	}
}

// testContext ends a minute before the test binary's -timeout, so that a
// build it bounds is killed before the binary panics and orphans it.
func testContext(t *testing.T) (context.Context, context.CancelFunc) {
	if d, ok := t.Deadline(); ok {
		return context.WithDeadline(context.Background(), d.Add(-time.Minute))
	}
	return context.WithCancel(context.Background())
}

// static is nil if the ELF file at path has no program interpreter (it
// needs no dynamic loader and no libc).
func static(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked (it has a program interpreter)", path)
		}
	}
	return nil
}
