package jail

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	MaybeRunInit()
	if os.Getenv(uidHolderEnv) != "" {
		os.Exit(holdSandbox()) // another codecage process, for uid_linux_test.go
	}
	os.Exit(m.Run())
}

func python(code string) []string {
	return []string{"/usr/bin/python3", "-I", "-c", code}
}

func startAndWait(t *testing.T, spec Spec) (Exit, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	spec.Stdout, spec.Stderr = &out, &errOut
	sb, err := Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer sb.Channel().Close()
	return sb.Wait(), out.String(), errOut.String()
}

func TestHostWorkspaceIsBoundReadWrite(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil { // the sandbox's host uid is not ours
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "in.txt"), []byte("from host"), 0o644); err != nil {
		t.Fatal(err)
	}
	exit, out, errOut := startAndWait(t, Spec{
		Argv:      python("print(open('/workspace/in.txt').read()); open('/workspace/out.txt', 'w').write('from sandbox')"),
		Workspace: dir,
	})
	if exit.ExitCode != 0 || out != "from host\n" {
		t.Fatalf("exit %+v out %q err %q", exit, out, errOut)
	}
	b, err := os.ReadFile(filepath.Join(dir, "out.txt"))
	if err != nil || string(b) != "from sandbox" {
		t.Fatalf("host does not see the sandbox's file: %q %v", b, err)
	}
}

func TestWorkspaceSymlinkIsRefused(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "ws")
	if err := os.Symlink("/etc", link); err != nil {
		t.Fatal(err)
	}
	sb, err := Start(context.Background(), Spec{Argv: []string{"/bin/true"}, Workspace: link})
	if err == nil {
		sb.Kill(LimitNone)
		sb.Wait()
		t.Fatal("a symlinked workspace was mounted")
	}
}

func TestCgroupIsRemovedAfterExit(t *testing.T) {
	h := ProbeHost()
	if h.CgroupVersion() == 0 {
		t.Fatalf("this test runs where cgroups are available: %s", h.CgroupReason())
	}
	sb, err := Start(context.Background(), Spec{Argv: python("pass")})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Channel().Close()
	var dirs []string
	for _, parent := range h.Cgroup.parents {
		dir := filepath.Join(parent, cgroupName(sb.ID()))
		if _, err := os.Stat(dir); err != nil {
			t.Fatalf("running sandbox has no cgroup %s: %v", dir, err)
		}
		dirs = append(dirs, dir)
	}
	if exit := sb.Wait(); exit.ExitCode != 0 {
		t.Fatalf("exit %+v", exit)
	}
	for _, dir := range dirs {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("cgroup left behind: %s (%v)", dir, err)
		}
	}
}

func TestExitStatusAndSignal(t *testing.T) {
	exit, _, _ := startAndWait(t, Spec{Argv: python("import sys; sys.exit(5)")})
	if exit.ExitCode != 5 || exit.Signal != 0 || exit.Limit != LimitNone {
		t.Fatalf("exit %+v", exit)
	}
	exit, _, _ = startAndWait(t, Spec{Argv: python("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")})
	if exit.Signal != 11 || exit.ExitCode != -1 {
		t.Fatalf("signal exit %+v", exit)
	}
}

func TestTimeoutKillsEverything(t *testing.T) {
	start := time.Now()
	exit, _, _ := startAndWait(t, Spec{
		Argv:   []string{"/bin/sh", "-c", "sleep 100 & sleep 100 & wait"},
		Limits: Limits{Timeout: 300 * time.Millisecond},
	})
	if exit.Limit != LimitTimeout || time.Since(start) > 10*time.Second {
		t.Fatalf("exit %+v after %v", exit, time.Since(start))
	}
}

func TestLimitsWithDefaults(t *testing.T) {
	l := Limits{MemoryBytes: 1 << 20}.WithDefaults()
	if l.MemoryBytes != 1<<20 || l.Timeout != DefaultLimits.Timeout || l.OutputBytes != DefaultLimits.OutputBytes {
		t.Fatalf("%+v", l)
	}
}

func TestLayersReportMissingLayers(t *testing.T) {
	h := Host{LandlockABI: 0, Cgroup: cgroupHost{reason: "test"}}
	l := h.Layers()
	if l.Cgroup != "none" || len(l.Warnings) != 2 || !strings.Contains(l.Warnings[0], "RLIMIT_AS") {
		t.Fatalf("%+v", l)
	}
}

func TestStaleCgroupsOfDeadSupervisorsAreReaped(t *testing.T) {
	h := ProbeHost()
	if h.CgroupVersion() == 0 {
		t.Fatalf("this test runs where cgroups are available: %s", h.CgroupReason())
	}
	// A pid that cannot be alive: above the kernel's pid_max.
	var stale []string
	for _, parent := range h.Cgroup.parents {
		dir := filepath.Join(parent, "99999999-stale")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		stale = append(stale, dir)
	}
	reapStaleCgroups(h.Cgroup, false)
	for _, dir := range stale {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("stale cgroup kept: %s", dir)
		}
	}
}

func TestForwardHandsLoopbackConnectionsOut(t *testing.T) {
	handled := make(chan string, 4)
	fwd := &Forward{Port: 3128, Handle: func(c net.Conn) {
		defer c.Close()
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c, buf); err != nil {
			handled <- "read: " + err.Error()
			return
		}
		handled <- string(buf)
		c.Write([]byte("pong"))
	}}
	exit, out, errOut := startAndWait(t, Spec{Forward: fwd, Argv: python(`import socket
s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
s.sendall(b"ping")
print(s.recv(4).decode())
try:
    socket.create_connection(("127.0.0.1", 3129), timeout=5)
    print("other port reachable")
except OSError as e:
    print("other port", e.errno)`)})
	if exit.ExitCode != 0 || !strings.HasPrefix(out, "pong\nother port ") {
		t.Fatalf("exit %+v out %q err %q", exit, out, errOut)
	}
	if got := <-handled; got != "ping" {
		t.Fatalf("handler got %q", got)
	}
}
