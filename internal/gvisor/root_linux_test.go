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
