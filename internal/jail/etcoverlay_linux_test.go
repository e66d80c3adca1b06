package jail

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Root inside changes its machine's /etc as a computer's root does, the
// changes stay across a restart, and the host's /etc never changes.
func TestMachineEtcIsRootsToKeep(t *testing.T) {
	spec, first := rootInsideSpec(t)
	root := spec.MachineRoot
	hostFiles := map[string][]byte{}
	for _, p := range []string{"/etc/hosts", "/etc/passwd", "/etc/hostname"} {
		hostFiles[p], _ = os.ReadFile(p)
	}
	sb := startMachine(t, spec)
	exit, out, errOut := spawnAs(t, sb, true, `echo 'deb [trusted=yes] http://127.0.0.1:9/ ./' > /etc/apt/sources.list.d/cage.list &&
echo '10.0.0.7 cage-db' >> /etc/hosts && echo 'alice:x:1001:1001::/home/alice:/bin/sh' >> /etc/passwd && rm /etc/hostname &&
ln -s /usr/bin/true /etc/alternatives/cage-alt && stat -c %U /etc/hosts /etc/apt/sources.list.d/cage.list && echo done`)
	if exit.ExitCode != 0 || out != "root\nroot\ndone\n" {
		t.Fatalf("root in /etc: exit %+v out %q err %q", exit, out, errOut)
	}
	exit, out, errOut = spawnAs(t, sb, false, "echo x >> /etc/hosts; echo user $?")
	if out != "user 2\n" {
		t.Fatalf("the user wrote /etc/hosts: exit %+v out %q err %q", exit, out, errOut)
	}
	// Judged from the host: the changes are in the machine's root, root
	// inside's; the host's /etc is as it was.
	fi, err := os.Lstat(filepath.Join(root, "usr/.etc-upper/apt/sources.list.d/cage.list"))
	if err != nil {
		t.Fatalf("the machine's root on the host: %v", err)
	}
	if uid := int(fi.Sys().(*syscall.Stat_t).Uid); uid != first {
		t.Errorf("the source list is %d's on the host, want root inside's %d", uid, first)
	}
	for p, before := range hostFiles {
		if b, _ := os.ReadFile(p); !bytes.Equal(b, before) {
			t.Errorf("the host's %s changed", p)
		}
	}
	for _, p := range []string{"/etc/apt/sources.list.d/cage.list", "/etc/alternatives/cage-alt"} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("the host has %s: %v", p, err)
		}
	}
	// What codecage wrote stays in the machine root's etc, where the file
	// API reads it; root's changes are not there.
	if b, err := os.ReadFile(filepath.Join(root, "etc/passwd")); err != nil || bytes.Contains(b, []byte("alice")) || !bytes.HasPrefix(b, []byte("root:")) {
		t.Errorf("the machine root's etc/passwd: %q %v", b, err)
	}
	etc := mountAt(sb, "/etc")
	if !strings.Contains(etc, " - overlay ") || !strings.Contains(etc, "nosuid") {
		t.Errorf("/etc is not a nosuid overlay: %q", etc)
	}
	sb.Kill(LimitNone)
	sb.Wait()

	again := startMachine(t, spec)
	exit, out, errOut = spawnAs(t, again, false, `cat /etc/apt/sources.list.d/cage.list && grep -c cage-db /etc/hosts &&
cut -d: -f1 /etc/passwd | tr '\n' ' ' && echo && test ! -e /etc/hostname && /etc/alternatives/cage-alt && test -s /etc/ld.so.cache && echo kept`)
	if out != "deb [trusted=yes] http://127.0.0.1:9/ ./\n1\nroot _apt sandbox nobody alice \nkept\n" {
		t.Fatalf("after a restart: exit %+v out %q err %q", exit, out, errOut)
	}
}
