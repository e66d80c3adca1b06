package envbuild

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A Debian build with python3-minimal gives a root whose python3 runs and
// holds every file dpkg says the package installed.
func TestDebianPython3Minimal(t *testing.T) {
	root := sharedRoot(t)
	target, err := os.Readlink(filepath.Join(root, "usr/bin/python3"))
	if err != nil {
		t.Fatalf("no /usr/bin/python3 in the root: %v", err)
	}
	if st, err := os.Stat(filepath.Join(root, "usr/bin", target)); err != nil || st.Mode()&0o111 == 0 {
		t.Fatalf("/usr/bin/python3 -> %s: not an executable in the root (%v)", target, err)
	}
	f, err := os.Open(filepath.Join(root, "var/lib/dpkg/info/python3-minimal.list"))
	if err != nil {
		t.Fatalf("dpkg knows no python3-minimal in the root: %v", err)
	}
	defer f.Close()
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); n++ {
		if _, err := os.Lstat(filepath.Join(root, sc.Text())); err != nil {
			t.Errorf("python3-minimal's %s is missing: %v", sc.Text(), err)
		}
	}
	if n < 5 {
		t.Fatalf("python3-minimal lists %d files", n)
	}
	// The root's own interpreter runs (chroot: the test's check, not the product's).
	out, err := exec.Command("chroot", root, "/usr/bin/python3", "-c", "import sys; print(sys.version_info[:2] >= (3, 9))").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "True" {
		t.Fatalf("python3 in the root: %v %q", err, out)
	}
	// No proxy setting is left in the root (the proxy existed for the build only).
	if b, _ := exec.Command("grep", "-rl", "127.0.0.1:3128", filepath.Join(root, "etc")).Output(); len(b) > 0 {
		t.Fatalf("the build's proxy is named in the root: %s", b)
	}
}

// The build's only way out is the proxy, which allows the mirror alone: a
// probe run inside the build reaches no host listener, directly or through
// the proxy (judged by the listeners, on the host).
func TestDebianBuildReachesOnlyItsMirror(t *testing.T) {
	sharedRoot(t)
	if !shared.probeRan {
		t.Fatalf("the probe did not run inside the build; log:\n%s", tailOf(shared.log))
	}
	if n := shared.heard.count.Load(); n != 0 {
		t.Fatalf("the host's listeners %v got %d connections from inside the build; probe:\n%s", shared.heard.addrs, n, shared.probe)
	}
	if strings.Contains(shared.probe, "CONNECTED") {
		t.Fatalf("the probe connected:\n%s", shared.probe)
	}
	// The proxy was there, and refused (not a probe that never got as far).
	if !strings.Contains(shared.probe, "403") {
		t.Fatalf("the proxy did not refuse the probe's requests:\n%s", shared.probe)
	}
	t.Logf("probe inside the build:\n%s", shared.probe)
}

// An unknown package fails with apt's own words, and leaves nothing.
func TestDebianUnknownPackageLeavesNothing(t *testing.T) {
	sharedRoot(t) // fills the .deb cache this build reuses
	dst := filepath.Join(t.TempDir(), "root")
	var log strings.Builder
	err := Debian(context.Background(), DebianOptions{Packages: []string{"codecage-no-such-package"}, CacheDir: sharedCache()}, dst, &log)
	if !errors.Is(err, ErrBuild) || !strings.Contains(err.Error(), "codecage-no-such-package") || !strings.Contains(err.Error(), "E: ") {
		t.Fatalf("want apt's error naming the package, got %v\n%s", err, tailOf(log.String()))
	}
	if _, serr := os.Lstat(dst); !os.IsNotExist(serr) {
		t.Fatalf("the failed build left %s (%v)", dst, serr)
	}
	t.Logf("error: %v", err)
}

// Bad options are refused before anything runs, each named.
func TestDebianBadRecipes(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "exists")
	if err := os.Mkdir(existing, 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		opts DebianOptions
		dst  string
		want string
	}{
		{"option as package", DebianOptions{Packages: []string{"--allow-unauthenticated"}}, filepath.Join(dir, "a"), "package name"},
		{"comma in package", DebianOptions{Packages: []string{"a,b"}}, filepath.Join(dir, "a"), "package name"},
		{"suite", DebianOptions{Suite: "../x"}, filepath.Join(dir, "a"), "suite"},
		{"mirror scheme", DebianOptions{Mirror: "file:///srv/debian"}, filepath.Join(dir, "a"), "mirror"},
		{"mirror quote", DebianOptions{Mirror: "http://a'b/"}, filepath.Join(dir, "a"), "mirror"},
		{"variant", DebianOptions{Variant: "buildd"}, filepath.Join(dir, "a"), "variant"},
		{"hook size", DebianOptions{CustomizeHooks: []string{strings.Repeat("x", maxHookBytes+1)}}, filepath.Join(dir, "a"), "hook"},
		{"too many packages", DebianOptions{Packages: make([]string, maxPackages+1)}, filepath.Join(dir, "a"), "packages"},
		{"relative dst", DebianOptions{}, "root", "absolute"},
		{"dst exists", DebianOptions{}, existing, "exists"},
		{"no parent", DebianOptions{}, filepath.Join(dir, "no/root"), "does not exist"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Debian(context.Background(), c.opts, c.dst, nil)
			if !errors.Is(err, ErrBadRecipe) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want ErrBadRecipe naming %q, got %v", c.want, err)
			}
		})
	}
	if _, err := os.Stat(existing); err != nil {
		t.Fatalf("a refused build touched the existing destination: %v", err)
	}
}
