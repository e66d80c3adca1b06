package gvisor

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/codecage/codecage/internal/jail"
)

// A root-inside machine's bundle on its own root, from a root the code
// has made hostile (links where the skeleton's directories go, to
// directories of the host's): the writer replaces the links and writes
// nothing through them, no mount lands outside the bundle, what the
// skeleton placed is root inside's on the host, /usr and /etc are
// overlays, and taking the bundle down leaves the machine's root with its
// files. Judged from the host's mount table and files.
func TestBundleOfAMachineOnItsOwnRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root: a machine with root inside is made by a server running as root")
	}
	first := jail.HostUIDBase + 9*jail.MachineIDs
	user := first + jail.SandboxUID
	own := filepath.Join(t.TempDir(), "root")
	if err := os.Mkdir(own, 0o755); err != nil {
		t.Fatal(err)
	}
	// The host's directories the links lead to, each with a file to keep.
	host := map[string]string{}
	for _, name := range []string{"etc", "var", "tmp", "opt"} {
		d := t.TempDir()
		if err := os.WriteFile(filepath.Join(d, "keep"), []byte("host"), 0o644); err != nil {
			t.Fatal(err)
		}
		host[name] = d
		if err := os.Symlink(d, filepath.Join(own, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(own, "app"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(own, "app", "main.py"), []byte("print(1)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{own, filepath.Join(own, "app"), filepath.Join(own, "app", "main.py")} {
		if err := os.Lchown(p, user, user); err != nil {
			t.Fatal(err)
		}
	}
	spec := jail.Spec{Argv: []string{"/usr/bin/python3", "-c", "pass"}, Machine: true, RootInside: true, HostUID: user, MachineRoot: own}
	spec.Limits = spec.Limits.WithDefaults()
	who := identityOf(spec, user)
	if !ownsRoot(spec, who) {
		t.Fatalf("a root-inside machine with a root (%+v) does not run on it", who)
	}
	dir := t.TempDir()
	if _, err := writeBundle(dir, spec, who); err != nil {
		t.Fatal(err)
	}
	bundleDown := false
	defer func() {
		if !bundleDown {
			removeBundle(dir)
		}
	}()

	for name, d := range host {
		entries, _ := os.ReadDir(d)
		if len(entries) != 1 || entries[0].Name() != "keep" {
			t.Errorf("the host's directory behind the root's %s link changed: %v", name, entries)
		}
		if b, _ := os.ReadFile(filepath.Join(d, "keep")); string(b) != "host" {
			t.Errorf("the host's file behind the root's %s link: %q", name, b)
		}
		if fi, err := os.Lstat(filepath.Join(own, name)); err != nil || !fi.IsDir() {
			t.Errorf("the root's %s is not a directory now: %v", name, err)
		}
	}
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string][]string{}
	for _, l := range strings.Split(string(info), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 {
			continue
		}
		for _, d := range append(slices.Collect(maps.Values(host)), own) {
			if f[4] == d || strings.HasPrefix(f[4], d+"/") {
				t.Errorf("a mount outside the bundle: %s", l)
			}
		}
		if rel, ok := strings.CutPrefix(f[4], filepath.Join(dir, "rootfs")); ok {
			if i := slices.Index(f, "-"); i > 0 && i+1 < len(f) {
				kinds[rel] = append(kinds[rel], f[i+1])
			}
			if !strings.Contains(f[5], "nosuid") || !strings.Contains(f[5], "nodev") {
				t.Errorf("the bundle's %s is mounted %s", f[4], f[5])
			}
		}
	}
	usr := kinds["/usr"]
	if len(usr) != 2 || usr[1] != "overlay" || !slices.Equal(kinds["/etc"], []string{"overlay"}) || len(kinds[""]) != 1 {
		t.Errorf("the bundle's mounts: %v, want its root, /usr (the host's, and an overlay over it) and /etc (an overlay)", kinds)
	}
	for _, rel := range []string{"etc/passwd", "root", "var/lib/dpkg/status", "var/tmp", "tmp", "usr/.upper", jail.SudoPath[1:]} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(own, rel), &st); err != nil || int(st.Uid) != first {
			t.Errorf("%s in the machine's root: %v, owner %d, want %d (root inside)", rel, err, st.Uid, first)
		}
	}
	// Through the bundle, /etc is the overlay over the root's etc.
	if b, err := os.ReadFile(filepath.Join(dir, "rootfs/etc/passwd")); err != nil || !strings.Contains(string(b), "sandbox:x:1000:1000:") {
		t.Errorf("the bundle's /etc/passwd: %v\n%s", err, b)
	}

	removeBundle(dir)
	bundleDown = true
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the bundle is still there: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(own, "app", "main.py")); err != nil || string(b) != "print(1)\n" {
		t.Errorf("the code's file after the bundle went: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(own, "etc", "passwd")); err != nil {
		t.Errorf("the root's /etc after the bundle went: %v", err)
	}
}
