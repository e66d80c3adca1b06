package gvisor

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/envfixture"
	"github.com/codecage/codecage/internal/jail"
)

// TestBundleStaysInItsRoot: a minimal root whose links would lead a mount
// point out of the bundle (an absolute directory link, then a file below
// it) is refused, and nothing is created outside.
func TestBundleStaysInItsRoot(t *testing.T) {
	outside := t.TempDir()
	spec := jail.Spec{Argv: []string{"/bin/true"},
		Programs:      &jail.Programs{Links: map[string]string{"/escape": outside}},
		ReadOnlyBinds: []string{"/escape/sub/lib.so"}, // bound at its own path, below the link
	}
	spec.Limits = spec.Limits.WithDefaults()
	dir := t.TempDir()
	_, err := writeBundle(dir, spec, 1500000000)
	if err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("writeBundle: %v, want a refusal naming the symlink", err)
	}
	if left, _ := os.ReadDir(outside); len(left) != 0 {
		t.Fatalf("created outside the bundle: %v", left)
	}
}

// The bundle of a sandbox with a root binds the root's own top-level
// directories read-only, nosuid, nodev, from beneath the root; a top-level
// link is written as a link, and the root's etc and /opt/codecage (the
// sandbox's own) are never bound.
func TestBundleBindsTheRootsTopLevelDirs(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	if err := envfixture.MinimalPythonRoot(root); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"app", "opt/tool", "opt/codecage/site", "srv"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/", filepath.Join(root, "up")); err != nil {
		t.Fatal(err)
	}
	spec := jail.Spec{Argv: []string{"/bin/true"}, Root: root, Binds: []jail.Bind{{Host: t.TempDir(), Path: "/opt/codecage/site"}}}
	spec.Limits = spec.Limits.WithDefaults()
	dir := t.TempDir()
	mounts, err := writeBundle(dir, spec, 1500000000)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]ociMount{}
	for _, m := range mounts {
		if strings.HasPrefix(m.Source, root) {
			got[m.Destination] = m
		}
	}
	for _, p := range []string{"/app", "/opt/tool", "/srv"} {
		m, ok := got[p]
		if !ok || m.Source != root+p || !slices.Equal(m.Options, []string{"rbind", "ro", "nosuid", "nodev"}) {
			t.Errorf("%s: %+v (bound %v)", p, m, ok)
		}
	}
	for p, m := range got {
		if p == "/opt" || strings.HasPrefix(p, "/opt/codecage") || strings.HasPrefix(p, "/etc/root") || p == "/up" {
			t.Errorf("%s bound from the root: %+v", p, m)
		}
	}
	if l, err := os.Readlink(filepath.Join(dir, "rootfs", "up")); err != nil || l != "/" {
		t.Errorf("/up: %q %v, want the link as it is", l, err)
	}
}
