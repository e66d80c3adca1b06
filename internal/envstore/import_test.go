package envstore_test

import (
	"archive/tar"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/codecage/codecage/internal/envfixture"
	"github.com/codecage/codecage/internal/envstore"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// baseLayer and topLayer exercise whiteouts, opaque directories, links,
// a FIFO, a device node and modes an environment must not keep.
var baseLayer = []envfixture.TarEntry{
	{Name: "usr/", Type: tar.TypeDir},
	{Name: "usr/bin/", Type: tar.TypeDir},
	{Name: "usr/bin/python3", Body: []byte("#!interp\n"), Mode: 0o4755},
	{Name: "etc/shared.conf", Body: []byte("a=1\n"), Mode: 0o666},
	{Name: "opt/old/x", Body: []byte("x")},
	{Name: "opt/old/sub/y", Body: []byte("y")},
	{Name: "gone.txt", Body: []byte("bye")},
	{Name: "gonedir/deep/file", Body: []byte("bye")},
	{Name: "dev/null", Type: tar.TypeChar},
}

var topLayer = []envfixture.TarEntry{
	{Name: ".wh.gone.txt"},
	{Name: ".wh.gonedir"},
	{Name: "opt/old/.wh..wh..opq"},
	{Name: "opt/old/new", Body: []byte("new")},
	{Name: "usr/local/bin/python3", Type: tar.TypeSymlink, Linkname: "/usr/bin/python3"},
	{Name: "usr/bin/python3-hard", Type: tar.TypeLink, Linkname: "usr/bin/python3"},
	{Name: "run/fifo", Type: tar.TypeFifo, Mode: 0o600},
}

type format struct {
	name  string
	write func(path string, img v1.Image) error
	dir   bool
}

var formats = []format{
	{name: "docker-archive", write: envfixture.WriteDockerArchive},
	{name: "oci-layout", write: envfixture.WriteOCILayout, dir: true},
	{name: "oci-archive", write: envfixture.WriteOCIArchive},
}

func writeImage(t testing.TB, f format, layers ...v1.Layer) string {
	t.Helper()
	img, err := envfixture.Image(layers...)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "image")
	if err := f.write(p, img); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestImportEachFormat(t *testing.T) {
	uncompressed := format{name: "docker-archive-uncompressed", write: envfixture.WriteDockerArchive}
	for _, f := range append(formats, uncompressed) {
		t.Run(f.name, func(t *testing.T) {
			var layers []v1.Layer
			for _, e := range [][]envfixture.TarEntry{baseLayer, topLayer} {
				if f.name == uncompressed.name {
					layers = append(layers, mustLayer(t)(envfixture.UncompressedLayer(e)))
				} else {
					layers = append(layers, mustLayer(t)(envfixture.Layer(e)))
				}
			}
			ref := writeImage(t, f, layers...)
			s := openStore(t)
			st := stage(t, s)
			var log strings.Builder
			cfg, err := s.ImportImage(context.Background(), st, ref, &log)
			if err != nil {
				t.Fatalf("import: %v\nlog:\n%s", err, log.String())
			}
			want := envstore.ImageConfig{Env: envfixture.DefaultConfig.Env, WorkingDir: "/work", Entrypoint: []string{"/usr/bin/env"}, Cmd: []string{"python3"}}
			if !reflect.DeepEqual(cfg, want) {
				t.Errorf("config = %+v, want %+v", cfg, want)
			}
			if !strings.Contains(log.String(), "layer 2/2") || !strings.Contains(log.String(), `skipped device node "dev/null"`) {
				t.Errorf("log lacks the layer progress or the skipped device:\n%s", log.String())
			}
			assertTree(t, st.Root())
			if py, err := envstore.FindPython(st.Root()); err != nil || py != "/usr/local/bin/python3" {
				t.Errorf("FindPython = %q, %v; want /usr/local/bin/python3", py, err)
			}
			if err := envstore.CheckRoot(st.Root()); err != nil {
				t.Errorf("CheckRoot: %v", err)
			}
			e, err := s.Commit(st, envstore.Env{Name: "img-" + f.name, Source: envstore.Source{Kind: "image", Ref: ref}})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(e.RootDir, filepath.Join(s.Dir(), "roots")+"/") || e.LayerDir != "" || !strings.HasPrefix(e.ID, "sha256:") || e.Size == 0 {
				t.Errorf("record = %+v", e)
			}
			fi, err := os.Stat(filepath.Join(e.RootDir, "etc/shared.conf"))
			if err != nil || fi.Mode().Perm() != 0o644 {
				t.Errorf("etc/shared.conf committed as %v (%v), want 0644: group/other write stripped", fi.Mode(), err)
			}
			if got := entries(t, s, "staging"); len(got) != 0 {
				t.Errorf("staging holds %v after commit", got)
			}
		})
	}
}

// assertTree checks what baseLayer then topLayer must give.
func assertTree(t *testing.T, root string) {
	t.Helper()
	for _, gone := range []string{"gone.txt", "gonedir", "opt/old/x", "opt/old/sub", "dev/null"} {
		if _, err := os.Lstat(filepath.Join(root, gone)); !os.IsNotExist(err) {
			t.Errorf("%s survived (err %v), want it whited out or skipped", gone, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(root, "opt/old/new")); err != nil || string(b) != "new" {
		t.Errorf("opt/old/new = %q, %v: the opaque layer's own entry must stay", b, err)
	}
	fi, err := os.Lstat(filepath.Join(root, "usr/bin/python3"))
	if err != nil || fi.Mode()&os.ModeSetuid != 0 || fi.Mode().Perm() != 0o755 {
		t.Errorf("usr/bin/python3 mode %v (%v), want 0755 without setuid", fi.Mode(), err)
	}
	hard, err := os.Lstat(filepath.Join(root, "usr/bin/python3-hard"))
	if err != nil || !os.SameFile(fi, hard) {
		t.Errorf("usr/bin/python3-hard is not a hard link of usr/bin/python3 (%v)", err)
	}
	if l, err := os.Readlink(filepath.Join(root, "usr/local/bin/python3")); err != nil || l != "/usr/bin/python3" {
		t.Errorf("usr/local/bin/python3 -> %q, %v", l, err)
	}
	if fi, err := os.Lstat(filepath.Join(root, "run/fifo")); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("run/fifo: %v, %v", fi, err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(root, "etc/shared.conf"), &st); err != nil || st.Uid != uint32(os.Getuid()) {
		t.Errorf("etc/shared.conf owner %d (%v), want the operator %d", st.Uid, err, os.Getuid())
	}
}
