package gvisor_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/gvisor"
	"github.com/codecage/codecage/internal/jail"
)

// start runs python code in a gVisor sandbox and waits for it. It fails,
// never skips, where gVisor does not work (scripts/setup.sh installs it).
func start(t *testing.T, code string, lim jail.Limits) (jail.Exit, string, string, string) {
	t.Helper()
	if info := gvisor.Probe(gvisor.Runtime{}); !info.Available {
		t.Fatalf("gVisor does not work here: %s", info.Error)
	}
	state := t.TempDir()
	var stdout, stderr bytes.Buffer
	sb, err := gvisor.Start(context.Background(), gvisor.Runtime{StateDir: state}, jail.Spec{
		Argv:   []string{"/usr/bin/python3", "-I", "-S", "-c", code},
		Env:    []string{"PATH=/usr/bin:/bin"},
		Limits: lim, Stdout: &stdout, Stderr: &stderr,
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	exit := sb.Wait()
	left, _ := os.ReadDir(state)
	if len(left) != 0 {
		t.Errorf("the bundle outlived the sandbox: %v", left)
	}
	return exit, stdout.String(), stderr.String(), sb.Log()
}

func TestExitStatusAndOutput(t *testing.T) {
	exit, out, errOut, log := start(t, "import sys, os\nprint('out', os.getuid() != 0)\nsys.stderr.write('err\\n')\nsys.exit(3)", jail.Limits{})
	if exit.ExitCode != 3 || exit.Signal != 0 || exit.Limit != jail.LimitNone || out != "out True\n" || errOut != "err\n" {
		t.Fatalf("exit %+v stdout %q stderr %q log %s", exit, out, errOut, log)
	}
	exit, _, _, _ = start(t, "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)", jail.Limits{})
	if exit.Signal != 11 || exit.ExitCode != -1 {
		t.Fatalf("killed by SIGSEGV: %+v", exit)
	}
}

func TestLimits(t *testing.T) {
	exit, _, _, _ := start(t, "while True: pass", jail.Limits{Timeout: time.Second})
	if exit.Limit != jail.LimitTimeout {
		t.Fatalf("timeout: %+v", exit)
	}
	exit, _, _, _ = start(t, "while True: pass", jail.Limits{Timeout: 20 * time.Second, CPUTime: time.Second})
	if exit.Limit != jail.LimitCPU {
		t.Fatalf("cpu: %+v", exit)
	}
	exit, out, _, _ := start(t, "while True: print('x' * 1000)", jail.Limits{OutputBytes: 10000})
	if exit.Limit != jail.LimitOutput || !exit.Truncated || len(out) != 10000 {
		t.Fatalf("output: %+v, %d bytes", exit, len(out))
	}
	exit, _, _, _ = start(t, "x = bytearray(512 << 20)", jail.Limits{MemoryBytes: 64 << 20})
	if exit.Limit != jail.LimitMemory || !exit.OOMKilled {
		t.Fatalf("memory: %+v", exit)
	}
	exit, out, _, _ = start(t, `
import os
for p in ("/tmp/f", "/workspace/f"):
    try:
        open(p, "wb").write(b"x" * (2 << 20))
        print(p, "written")
    except OSError as e:
        print(p, e.errno)
`, jail.Limits{FileSizeBytes: 1 << 20})
	if exit.ExitCode != 0 || strings.Contains(out, "written") {
		t.Fatalf("file size: %+v %q", exit, out)
	}
}

func TestWorkspaceIsBoundIn(t *testing.T) {
	ws := t.TempDir()
	if err := os.Chmod(ws, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "from-host"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	sb, err := gvisor.Start(context.Background(), gvisor.Runtime{StateDir: t.TempDir()}, jail.Spec{
		Argv:      []string{"/usr/bin/python3", "-I", "-S", "-c", "open('made-inside', 'w').write('hi'); print(open('/workspace/from-host').read())"},
		Workspace: ws, Stdout: &stdout,
	})
	if err != nil {
		t.Fatal(err)
	}
	exit := sb.Wait()
	b, err := os.ReadFile(filepath.Join(ws, "made-inside"))
	if exit.ExitCode != 0 || stdout.String() != "hello\n" || err != nil || string(b) != "hi" {
		t.Fatalf("exit %+v stdout %q file %q %v log %s", exit, stdout.String(), b, err, sb.Log())
	}
	fi, _ := os.Stat(filepath.Join(ws, "made-inside"))
	if uid := fileUID(fi); uid != sb.HostUID() || uid == 0 {
		t.Fatalf("a file the code made belongs to uid %d, the sandbox's is %d", uid, sb.HostUID())
	}
}

func fileUID(fi os.FileInfo) int {
	if fi == nil {
		return -1
	}
	return int(fi.Sys().(*syscall.Stat_t).Uid)
}
