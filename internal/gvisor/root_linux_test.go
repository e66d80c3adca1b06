package gvisor_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/envfixture"
	"github.com/codecage/codecage/internal/gvisor"
	"github.com/codecage/codecage/internal/jail"
)

// runRoot runs argv in a gVisor sandbox whose system directories come
// from root.
func runRoot(t *testing.T, root string, argv ...string) (jail.Exit, string, string, error) {
	t.Helper()
	if info := gvisor.Probe(gvisor.Runtime{}); !info.Available {
		t.Fatalf("gVisor does not work here: %s", info.Error)
	}
	var stdout, stderr bytes.Buffer
	sb, err := gvisor.Start(context.Background(), gvisor.Runtime{StateDir: t.TempDir()}, jail.Spec{
		Root: root, Argv: argv, Env: []string{"PATH=/usr/bin:/bin"}, Stdout: &stdout, Stderr: &stderr,
	})
	if err != nil {
		return jail.Exit{}, "", "", err
	}
	exit := sb.Wait()
	return exit, stdout.String(), stderr.String() + sb.Log(), nil
}

// A gVisor sandbox with a root runs the root's Python; numpy and perl,
// which only the host has, are absent.
func TestRootContainmentRunsTheRootsPython(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	if err := envfixture.MinimalPythonRoot(root); err != nil {
		t.Fatal(err)
	}
	exit, out, errOut, err := runRoot(t, root, "/usr/bin/python3", "-c",
		"import sys, os\nprint(sys.version)\nprint(os.path.exists('/usr/bin/perl'))\ntry:\n import numpy\nexcept ImportError:\n print('no numpy')")
	if err != nil {
		t.Fatal(err)
	}
	if exit.ExitCode != 0 || !strings.HasPrefix(out, "3.") || !strings.HasSuffix(out, "\nFalse\nno numpy\n") {
		t.Fatalf("exit %+v stdout %q stderr %q", exit, out, errOut)
	}
}

// A hostile root's symlinks never redirect a mount to the host: usr -> /
// is a link inside the sandbox (to the sandbox's own root), etc links to
// host files lead nowhere, and a refused root never starts.
func TestRootContainmentHostileRootUnderGVisor(t *testing.T) {
	for _, kind := range []string{envfixture.UsrToHost, envfixture.CacheToShadow, envfixture.AlternativesToEtc} {
		root := filepath.Join(t.TempDir(), "root")
		if err := envfixture.HostileRoot(root, kind); err != nil {
			t.Fatal(err)
		}
		exit, out, errOut, err := runRoot(t, root, "/bin/sh", "-c",
			"for f in /usr/bin/perl /usr/bin/python3 /etc/shadow /etc/alternatives/shadow /usr/etc/shadow /etc/ssl/certs; do test -e $f && echo HOST $f; done; "+
				"read -r l < /etc/ld.so.cache; case $l in root:*) echo HOST cache;; esac; echo done")
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if exit.ExitCode != 0 || out != "done\n" {
			t.Fatalf("%s: exit %+v stdout %q stderr %q", kind, exit, out, errOut)
		}
	}
	root := filepath.Join(t.TempDir(), "root")
	if err := envfixture.HostileRoot(root, envfixture.WritableRoot); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := runRoot(t, root, "/bin/sh", "-c", "true"); err == nil || !strings.Contains(err.Error(), "writable by group or others") {
		t.Fatalf("a world-writable root: %v", err)
	}
	if _, err := os.Stat("/etc/shadow"); err != nil {
		t.Fatalf("the host has no /etc/shadow to hide: %v", err)
	}
}

// A gVisor sandbox with a root shows the root's own top-level directories
// (/app, /opt/tool) read-only, beside the sandbox's own binds beneath /opt;
// the root's /etc files and its /opt/codecage do not show.
func TestRootContainmentTopLevelDirsUnderGVisor(t *testing.T) {
	if info := gvisor.Probe(gvisor.Runtime{}); !info.Available {
		t.Fatalf("gVisor does not work here: %s", info.Error)
	}
	root := filepath.Join(t.TempDir(), "root")
	if err := envfixture.MinimalPythonRoot(root); err != nil {
		t.Fatal(err)
	}
	for p, body := range map[string]string{"app/main.py": "print('app main')\n", "opt/tool/x": "tool",
		"opt/codecage/site/m": "ROOT", "etc/root-marker": "ROOT"} {
		dst := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, []byte(body), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(root, "app/main.py"), 0o666); err != nil { // only the mount refuses
		t.Fatal(err)
	}
	site := t.TempDir()
	if err := os.WriteFile(filepath.Join(site, "s"), []byte("site"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(site, 0o755); err != nil {
		t.Fatal(err)
	}
	code := "import os\nexec(open('/app/main.py').read())\nprint(open('/opt/tool/x').read())\nprint(open('/opt/codecage/site/s').read())\n" +
		"print(os.path.exists('/opt/codecage/site/m'), os.path.exists('/etc/root-marker'))\n" +
		"for f in (lambda: open('/app/new', 'w'), lambda: open('/app/main.py', 'a')):\n try: f(); print('WROTE')\n except OSError as e: print(e.strerror)\n"
	var stdout, stderr bytes.Buffer
	sb, err := gvisor.Start(context.Background(), gvisor.Runtime{StateDir: t.TempDir()}, jail.Spec{
		Root: root, Argv: []string{"/usr/bin/python3", "-c", code}, Env: []string{"PATH=/usr/bin:/bin"},
		Binds:  []jail.Bind{{Host: site, Path: "/opt/codecage/site"}},
		Stdout: &stdout, Stderr: &stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	exit := sb.Wait()
	// Creating in /app (the root's, 0755) is refused by its mode first.
	want := "app main\ntool\nsite\nFalse False\nPermission denied\nRead-only file system\n"
	if exit.ExitCode != 0 || stdout.String() != want {
		t.Fatalf("exit %+v stdout %q, want %q; stderr %q", exit, stdout.String(), want, stderr.String()+sb.Log())
	}
}
