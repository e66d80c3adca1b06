package gvisor

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/envfixture"
	"github.com/codecage/codecage/internal/jail"
	"golang.org/x/sys/unix"
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
	_, err := writeBundle(dir, spec, identity{host: 1500000000})
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
	mounts, err := writeBundle(dir, spec, identity{host: 1500000000})
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

// The bundle of a machine with root inside: a user namespace mapping ids
// 0 to MachineIDs-1 onto the block, the first process root with root
// inside's capabilities, its init serving sudo (sudod.py), the user
// 1000 inside, everything the bundle made root inside's (the block's
// first id on the host), and the host's system directories bound into
// the root read-only, nosuid and nodev (runsc overlays the root with
// memory), unmounted with the bundle.
func TestBundleOfAMachineWithRootInside(t *testing.T) {
	first := jail.HostUIDBase + 7*jail.MachineIDs
	spec := jail.Spec{Argv: []string{"/usr/bin/python3", "-c", "pass"}, Machine: true, RootInside: true, HostUID: first + jail.SandboxUID}
	spec.Limits = spec.Limits.WithDefaults()
	dir := t.TempDir()
	who := identityOf(spec, spec.HostUID)
	if !who.rootInside() || who.first != first || who.user() != jail.SandboxUID {
		t.Fatalf("identity %+v", who)
	}
	mounts, err := writeBundle(dir, spec, who)
	if err != nil {
		t.Fatal(err)
	}
	defer removeBundle(dir)
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg ociSpec
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(cfg.Linux.Namespaces, ociNamespace{"user"}) || len(cfg.Linux.UIDMappings) != 1 ||
		cfg.Linux.UIDMappings[0] != (ociIDMapping{ContainerID: 0, HostID: uint32(first), Size: jail.MachineIDs}) ||
		!slices.Equal(cfg.Linux.GIDMappings, cfg.Linux.UIDMappings) {
		t.Errorf("namespaces %v, uid map %v, gid map %v", cfg.Linux.Namespaces, cfg.Linux.UIDMappings, cfg.Linux.GIDMappings)
	}
	p := cfg.Process
	if p.User != (ociUser{}) || !slices.Equal(p.Capabilities.Bounding, jail.RootInsideCapabilityNames()) || !p.NoNewPrivileges {
		t.Errorf("the first process: user %+v, capabilities %v, no_new_privs %v", p.User, p.Capabilities.Bounding, p.NoNewPrivileges)
	}
	if !slices.Equal(p.Args, spec.Argv) || !slices.Contains(p.Env, "CODECAGE_SUDO=1000:"+jail.SudoSocket) || !slices.Contains(p.Env, "CODECAGE_SUDO_SERVER="+sudod) {
		t.Errorf("the first process does not serve sudo and run the program as 1000: %q %d variables", p.Args, len(p.Env))
	}
	passwd, _ := os.ReadFile(filepath.Join(dir, "rootfs/etc/passwd"))
	if !strings.Contains(string(passwd), "sandbox:x:1000:1000:") || !strings.Contains(string(passwd), "_apt:x:42:42:") {
		t.Errorf("passwd:\n%s", passwd)
	}
	for _, rel := range []string{"etc/passwd", "root", "var/lib/dpkg/status", "var/tmp", "bin", jail.SudoPath[1:]} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dir, "rootfs", rel), &st); err != nil || int(st.Uid) != first {
			t.Errorf("%s: %v, owner %d, want %d", rel, err, st.Uid, first)
		}
	}
	for _, m := range mounts {
		if m.Source == "/usr" {
			t.Errorf("/usr is a mount of runsc's (%+v), which it would not overlay", m)
		}
	}
	info, _ := os.ReadFile("/proc/self/mountinfo")
	var usr string
	for _, l := range strings.Split(string(info), "\n") {
		if f := strings.Fields(l); len(f) > 5 && f[4] == filepath.Join(dir, "rootfs/usr") {
			usr = f[5]
		}
	}
	for _, opt := range []string{"ro", "nosuid", "nodev"} {
		if !slices.Contains(strings.Split(usr, ","), opt) {
			t.Errorf("the bundle's /usr is mounted %q, without %s", usr, opt)
		}
	}
	removeBundle(dir)
	if left := mountsUnder(dir); len(left) != 0 {
		t.Errorf("left mounted: %v", left)
	}
	if _, err := os.Stat("/usr/bin/env"); err != nil {
		t.Fatalf("the host's /usr after the bundle went: %v", err)
	}
}
