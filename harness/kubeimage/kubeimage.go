// Package kubeimage makes the container images of the harness's Kubernetes
// cluster without a Docker engine or a registry: each is one static binary
// (built with Static) in an OCI image (Write) that is imported into the
// cluster's containerd (kubecluster.Cluster.ImportImage) and run by pods
// with imagePullPolicy Never.
package kubeimage

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// PausePackage is the harness's pause program (a pod's sandbox process).
const PausePackage = "github.com/locksuite/locksuite/harness/kubeimage/pause"

// Static builds the Go main package pkg (an import path, or a directory as
// `go build` takes it, resolved in the current directory's module) for
// linux/GOARCH of this process with CGO_ENABLED=0 and -trimpath into dir,
// and returns the binary's path. It runs the go command: without one it
// fails with an error that says so.
func Static(ctx context.Context, dir, pkg string) (string, error) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("kubeimage: build %s: no go command in PATH (install Go, or build the binary yourself with CGO_ENABLED=0 and pass it to Write): %w", pkg, err)
	}
	out := filepath.Join(dir, filepath.Base(strings.TrimSuffix(pkg, "/")))
	cmd := exec.CommandContext(ctx, gobin, "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("kubeimage: go build %s: %w: %s", pkg, err, bytes.TrimSpace(b))
	}
	return out, nil
}

// Write writes an OCI image named ref (a full reference with a tag, such
// as "localhost/locksuite/pause:1") to path as an OCI image layout archive
// (a tar of oci-layout, index.json and blobs/), which `ctr images import`,
// `docker load` (Docker 25 and later), `kind load image-archive` and
// `skopeo copy oci-archive:` read. The index names the image with the
// annotations io.containerd.image.name (ref in full, as containerd names
// it: docker.io/library/redis:7 for redis:7) and
// org.opencontainers.image.ref.name (its tag). The image is one layer
// holding the file bin at /<its base name> (mode 0755, owned by root) and
// nothing else; its entrypoint is that file followed by args, for
// linux/GOARCH of this process. bin must be a static binary: the image has
// no libc.
func Write(path, ref, bin string, args ...string) error {
	img, tag, err := Image(ref, bin, args...)
	if err != nil {
		return err
	}
	return writeImage(path, img, tag)
}

// writeImage writes img, named tag, to path as Write describes.
func writeImage(path string, img v1.Image, tag name.Tag) error {
	ref := tag.String()
	dir, err := os.MkdirTemp(filepath.Dir(path), ".kubeimage-")
	if err != nil {
		return fmt.Errorf("kubeimage: %w", err)
	}
	defer os.RemoveAll(dir)
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("kubeimage: %w", err)
	}
	// containerd and the kubelet name Docker Hub's images docker.io/...,
	// go-containerregistry index.docker.io/...
	full := tag.Name()
	if tag.RegistryStr() == name.DefaultRegistry {
		full = "docker.io/" + strings.TrimPrefix(full, name.DefaultRegistry+"/")
	}
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          full,
		"org.opencontainers.image.ref.name": tag.TagStr(),
	})); err != nil {
		return fmt.Errorf("kubeimage: %s: %w", ref, err)
	}
	if err := tarDir(path, dir); err != nil {
		return fmt.Errorf("kubeimage: write %s: %w", path, err)
	}
	return nil
}

// Image is the image Write writes, and ref parsed.
func Image(ref, bin string, args ...string) (v1.Image, name.Tag, error) {
	return treeImage(ref, map[string]string{"/" + filepath.Base(bin): bin}, "/", append([]string{"/" + filepath.Base(bin)}, args...))
}

// WriteTree writes, as Write does, an image whose one layer holds the files
// of files (each file's path in the image, absolute, to the file of this
// machine whose content it gets, symbolic links followed; mode 0755, owned
// by root) and the directories above them, whose entrypoint is entrypoint
// and whose PATH is /usr/local/bin:/usr/bin:/bin. With Dynamic's files, it
// is an image of a dynamically linked program of this machine.
func WriteTree(path, ref string, files map[string]string, entrypoint ...string) error {
	img, tag, err := treeImage(ref, files, "/usr/local/bin:/usr/bin:/bin", entrypoint)
	if err != nil {
		return err
	}
	return writeImage(path, img, tag)
}

// Dynamic is the files of program bin of this machine, a dynamically linked
// executable, for WriteTree: bin itself at image path as, and every shared
// library ldd lists for it (the dynamic loader included) at its own path.
func Dynamic(ctx context.Context, bin, as string) (map[string]string, error) {
	out, err := exec.CommandContext(ctx, "ldd", bin).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("kubeimage: ldd %s: %w: %s", bin, err, bytes.TrimSpace(out))
	}
	files := map[string]string{as: bin}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/") {
			files[f[2]] = f[2] // libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)
		} else if len(f) >= 1 && strings.HasPrefix(f[0], "/") {
			files[f[0]] = f[0] // /lib64/ld-linux-x86-64.so.2 (0x...)
		}
	}
	return files, nil
}

// treeImage is an image of files (see WriteTree) with entrypoint and PATH
// path, for linux/GOARCH of this process.
func treeImage(ref string, files map[string]string, path string, entrypoint []string) (v1.Image, name.Tag, error) {
	tag, err := name.NewTag(ref)
	if err != nil {
		return nil, tag, fmt.Errorf("kubeimage: image name %q: %w (want a reference with a tag, such as localhost/locksuite/pause:1)", ref, err)
	}
	layer, err := treeLayer(files)
	if err != nil {
		return nil, tag, err
	}
	base := mutate.MediaType(mutate.ConfigMediaType(empty.Image, types.OCIConfigJSON), types.OCIManifestSchema1)
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return nil, tag, fmt.Errorf("kubeimage: %s: %w", ref, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, tag, fmt.Errorf("kubeimage: %s: %w", ref, err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.Entrypoint = entrypoint
	cf.Config.Env = []string{"PATH=" + path}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, tag, fmt.Errorf("kubeimage: %s: %w", ref, err)
	}
	return img, tag, nil
}

// tarDir writes the files under dir to a tar archive at path, with names
// relative to dir.
func tarDir(path, dir string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name, h.Uid, h.Gid, h.Uname, h.Gname = filepath.ToSlash(rel), 0, 0, "", ""
		if d.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if cerr := tw.Close(); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
	}
	return err
}

// treeLayer is an OCI layer (gzip-compressed) of files (see WriteTree):
// its directories (mode 0755), then its files, in the order of their
// paths.
func treeLayer(files map[string]string) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	names := slices.Sorted(maps.Keys(files))
	for _, n := range names {
		rel := strings.TrimPrefix(filepath.Clean("/"+n), "/")
		for d := filepath.Dir(rel); d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	for _, d := range slices.Sorted(maps.Keys(dirs)) {
		if err := tw.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}); err != nil {
			return nil, fmt.Errorf("kubeimage: %w", err)
		}
	}
	for _, n := range names {
		b, err := os.ReadFile(files[n])
		if err != nil {
			return nil, fmt.Errorf("kubeimage: %w", err)
		}
		hdr := &tar.Header{Name: strings.TrimPrefix(filepath.Clean("/"+n), "/"), Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(b)),
			ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("kubeimage: %w", err)
		}
		if _, err := tw.Write(b); err != nil {
			return nil, fmt.Errorf("kubeimage: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("kubeimage: %w", err)
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
