package jail

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// startIn starts n sleeping processes in cgroup dir, as a container's
// PID 1 and its other processes sit in the cgroup codecage is given.
func startIn(t *testing.T, dir string, n int) []*exec.Cmd {
	var cmds []*exec.Cmd
	for range n {
		cmd := exec.Command("/bin/sleep", "600")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	return cmds
}

// aV2Controller is a controller the v2 cgroup dir may enable for its
// children (on a hybrid host's unified mount only hugetlb may be there).
func aV2Controller(t *testing.T, dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		t.Skip("no controller is available on this host's cgroup v2 mount")
	}
	return "+" + f[0]
}

func removeCgroupTree(dir string) {
	_ = os.Remove(filepath.Join(dir, "codecage-supervisor"))
	_ = os.Remove(dir)
}

// The kernel's no-internal-process rule: a cgroup holding processes may not
// enable controllers for its children. A container's cgroup holds its PID 1
// (tini) beside codecage; every process in it moves to a leaf, then the
// controllers are enabled.
func TestEnableV2ControllersMovesEveryProcessToALeaf(t *testing.T) {
	root := v2Root(t)
	want := aV2Controller(t, root)
	rootCtl := filepath.Join(root, "cgroup.subtree_control")
	if b, _ := os.ReadFile(rootCtl); !strings.Contains(string(b), want[1:]) {
		// Put the host back as it was.
		t.Cleanup(func() { _ = os.WriteFile(rootCtl, []byte("-"+want[1:]), 0) })
	}
	if err := os.WriteFile(rootCtl, []byte(want), 0); err != nil {
		t.Fatalf("enable %s at %s: %v", want, root, err)
	}
	dir := filepath.Join(root, cgroupName("v2-leaf-test-"+NewID()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmds := startIn(t, dir, 3)
	t.Cleanup(func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_, _ = c.Process.Wait()
		}
		removeCgroupTree(dir)
	})
	// The trap itself, as the kernel sets it: what moving only ourselves hit.
	if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(want), 0); !errors.Is(err, unix.EBUSY) {
		t.Fatalf("enabling %s in a cgroup with processes: %v, want EBUSY", want, err)
	}
	if err := enableV2Controllers(dir, want); err != nil {
		t.Fatalf("enableV2Controllers: %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if !strings.Contains(string(b), strings.TrimPrefix(want, "+")) {
		t.Errorf("subtree_control %q, want %s", b, want)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs")); len(strings.Fields(string(b))) != 0 {
		t.Errorf("processes left in the parent: %q", b)
	}
	// Judged from each process's own view of its cgroup.
	leaf := strings.TrimPrefix(filepath.Join(dir, "codecage-supervisor"), root)
	for _, c := range cmds {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(c.Process.Pid) + "/cgroup")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "0::"+leaf+"\n") {
			t.Errorf("process %d is not in %s: %q", c.Process.Pid, leaf, b)
		}
	}
}

// A cgroup mount that is read-only (the runtime's default without
// cgroup_writable) is named as the cause, with the fix.
func TestEnableV2ControllersNamesAReadOnlyMount(t *testing.T) {
	root := v2Root(t)
	want := aV2Controller(t, root)
	dir := filepath.Join(root, cgroupName("v2-ro-test-"+NewID()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeCgroupTree(dir) })
	ro := t.TempDir()
	if err := unix.Mount(dir, ro, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(ro, unix.MNT_DETACH) })
	if err := unix.Mount("", ro, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	err := enableV2Controllers(ro, want)
	if !errors.Is(err, unix.EROFS) || !strings.Contains(err.Error(), "cgroup_writable") {
		t.Fatalf("enableV2Controllers on a read-only mount: %v, want EROFS naming cgroup_writable", err)
	}
}

// A controller the parent did not delegate is named, never a bare EBUSY
// or ENOENT.
func TestPrepareV2ParentNamesAControllerNotDelegated(t *testing.T) {
	root := v2Root(t)
	dir := filepath.Join(root, cgroupName("v2-nodelegate-test-"+NewID()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeCgroupTree(dir) })
	b, _ := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if strings.Contains(string(b), "memory") && strings.Contains(string(b), "pids") {
		t.Skip("this host delegates memory and pids to every cgroup of its v2 mount")
	}
	_, err := prepareV2Parent(dir)
	if err == nil || !strings.Contains(err.Error(), "is not delegated to "+dir) {
		t.Fatalf("prepareV2Parent without memory or pids: %v", err)
	}
}
