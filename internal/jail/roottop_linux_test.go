package jail

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// writeRootFiles adds files (path: body) to root, parents 0755.
func writeRootFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, body := range files {
		dst := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// startHeld starts a shell script on root that ends reading its input
// (exec cat), so that its mounts can be judged from the host meanwhile.
func startHeld(t *testing.T, root, script string) (sb *Sandbox, pid int, finish func() (Exit, string, string)) {
	t.Helper()
	var out, errOut bytes.Buffer
	sb, err := Start(context.Background(), Spec{Root: root, Argv: []string{"/bin/sh", "-c", script + "; exec cat"}, Stdin: true,
		Stdout: &out, Stderr: &errOut, Limits: Limits{Timeout: 20 * time.Second}})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { sb.Kill(LimitNone); sb.Channel().Close() })
	// The held cat, which reads its stdin: not a cat the script ran
	// before it on a file, which a loaded host may still show exiting.
	deadline := time.Now().Add(30 * time.Second)
	for pid == 0 {
		for _, p := range uidProcesses(sb.HostUID()) {
			if b, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/cmdline"); string(b) == "cat\x00" {
				pid = p
			}
		}
		if pid == 0 && time.Now().After(deadline) {
			t.Fatalf("no held cat process of uid %d", sb.HostUID())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return sb, pid, func() (Exit, string, string) {
		if err := sb.CloseInput(); err != nil {
			t.Fatal(err)
		}
		exit := sb.Wait()
		return exit, out.String(), errOut.String()
	}
}

// mountsOf is pid's mountinfo from the host: mount point -> (source
// within its filesystem, options).
func mountsOf(t *testing.T, pid int) map[string][2]string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string][2]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		m[f[4]] = [2]string{f[3], f[5]}
	}
	return m
}

// An image's own top-level directories (/app, /opt/...) are in the
// sandbox, read-only, nosuid, nodev, from beneath the root (judged from
// the host); the root's etc, home and tmp are not, nor the jail's own
// /opt/codecage.
func TestRootContainmentTopLevelDirs(t *testing.T) {
	root := minimalRoot(t)
	writeRootFiles(t, root, map[string]string{
		"app/main.py":         "print('app main')\n",
		"opt/tool/x":          "#!/bin/sh\necho tool ran\n",
		"opt/codecage/site/m": "ROOT-CODECAGE",
		"srv/data.txt":        "srv data",
		"etc/root-marker":     "ROOT-ETC",
		"home/user/marker":    "ROOT-HOME",
		"tmp/marker":          "ROOT-TMP",
		"var/marker":          "ROOT-VAR",
	})
	if err := os.Symlink("app/main.py", filepath.Join(root, "entry")); err != nil {
		t.Fatal(err)
	}
	// Writable by all in the image: only the mount refuses the write.
	if err := os.Chmod(filepath.Join(root, "app/main.py"), 0o666); err != nil {
		t.Fatal(err)
	}
	script := "python3 /app/main.py; cat /srv/data.txt; echo; /opt/tool/x; " +
		"for f in /etc/root-marker /home/user/marker /tmp/marker /var/marker /opt/codecage/site/m; do test -e $f && echo LEAK $f; done; " +
		"python3 -c \"import os\nprint(os.readlink('/entry'))\nfor f in (lambda: open('/app/new', 'w'), lambda: open('/app/main.py', 'a'), lambda: os.mkdir('/opt/tool/d')):\n try: f()\n except OSError as e: print(e.strerror)\""
	_, pid, finish := startHeld(t, root, script)
	mounts := mountsOf(t, pid)
	for _, p := range []string{"/app", "/opt/tool", "/srv"} {
		m, ok := mounts[p]
		if !ok {
			t.Errorf("no mount at %s", p)
			continue
		}
		if m[0] != root+p {
			t.Errorf("%s comes from %s, want %s", p, m[0], root+p)
		}
	}
	for _, p := range []string{"/etc", "/home", "/tmp", "/var", "/opt", "/opt/codecage"} {
		if m, ok := mounts[p]; ok && strings.HasPrefix(m[0], root) {
			t.Errorf("%s is the root's %s", p, m[0])
		}
	}
	checkRootMounts(t, pid, root, "/app", "/opt/tool", "/srv")
	exit, out, errOut := finish()
	want := "app main\nsrv data\ntool ran\napp/main.py\n"
	if exit.ExitCode != 0 || !strings.HasPrefix(out, want) || strings.Contains(out, "LEAK") ||
		strings.Count(out, "Read-only file system") != 3 {
		t.Fatalf("exit %+v stdout %q stderr %q", exit, out, errOut)
	}
}

// A top-level symlink of the root is recreated as a link in the sandbox,
// never followed on the host: app -> / shows the sandbox's root.
func TestRootContainmentTopLevelLinkToHost(t *testing.T) {
	for _, p := range []string{"/usr/bin/perl", "/etc/shadow"} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("the host lacks %s: %v", p, err)
		}
	}
	root := minimalRoot(t)
	for name, target := range map[string]string{"app": "/", "up": "../../../..", "data": "/etc"} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	script := "for f in /app/usr/bin/perl /app/etc/shadow /up/usr/bin/perl /up/etc/shadow /data/shadow; do test -e $f && echo HOST $f; done; " +
		"python3 -c \"import os; print(os.readlink('/app'))\""
	_, pid, finish := startHeld(t, root, script)
	for p, m := range mountsOf(t, pid) {
		if p == "/app" || p == "/up" || p == "/data" || strings.HasPrefix(p, "/app/") {
			t.Errorf("a mount at %s (%v): the link was followed", p, m)
		}
	}
	checkRootMounts(t, pid, root, "/app", "/up", "/data")
	exit, out, errOut := finish()
	if exit.ExitCode != 0 || out != "/\n" {
		t.Fatalf("exit %+v stdout %q stderr %q", exit, out, errOut)
	}
}

// A root of 100 top-level directories gives a bounded sandbox: the first
// MaxRootTopDirs by name, the rest left out; names that are not plain are
// never taken.
func TestRootContainmentTopLevelBounded(t *testing.T) {
	root := minimalRoot(t)
	files := map[string]string{}
	for i := range 100 {
		files[fmt.Sprintf("d%03d/f", i)] = "x"
	}
	files[".hidden/f"] = "x"
	files["a.b/f"] = "x"
	writeRootFiles(t, root, files)
	_, pid, finish := startHeld(t, root, "python3 -c \"import os; print(len([n for n in os.listdir('/') if n.startswith('d0')]))\"; test -e /.hidden/f && echo LEAK hidden; test -e /a.b/f && echo LEAK dotted; true")
	n := 0
	for p, m := range mountsOf(t, pid) {
		if strings.HasPrefix(p, "/d") && strings.HasPrefix(m[0], root+"/d") {
			n++
		}
		if p == "/.hidden" || p == "/a.b" {
			t.Errorf("a mount at %s", p)
		}
	}
	extra := 0
	mounts := mountsOf(t, pid)
	for p := range mounts {
		if !strings.HasPrefix(p, "/d") && strings.HasPrefix(mounts[p][0], root+"/") && !rootMountPoints()[p] {
			extra++
		}
	}
	if n != MaxRootTopDirs || extra > MaxRootTopDirs {
		t.Errorf("%d mounts of the root's d* directories (%d others), want %d", n, extra, MaxRootTopDirs)
	}
	if _, ok := mounts["/d000"]; !ok {
		t.Error("no /d000: the first by name should be taken")
	}
	if _, ok := mounts["/d099"]; ok {
		t.Error("/d099 was taken past the bound")
	}
	exit, out, errOut := finish()
	if exit.ExitCode != 0 || out != strconv.Itoa(MaxRootTopDirs)+"\n" {
		t.Fatalf("exit %+v stdout %q stderr %q", exit, out, errOut)
	}
}
