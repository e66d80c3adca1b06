package gvisor_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/codecage/codecage/internal/gvisor"
	"github.com/codecage/codecage/internal/jail"
)

// podEnv makes the test binary play a pod's container (podContainer).
const podEnv = "CODECAGE_TEST_GVISOR_POD"

// podBase is the first host id of the simulated pod's 65536: far from the
// jail's sandbox uids (jail.HostUIDBase) and from any account.
const podBase = 3_000_000

// The chart's default tier runs codecage as root of the pod's own user
// namespace, with the runtime's default capabilities: no CAP_SYS_ADMIN.
// runsc's gofer then cannot make its mount namespace in ours, nor its
// Sentry a minimal chroot with directfs; each sandbox has a user namespace
// of its own and the gofer serves the files. This runs a gVisor sandbox
// so, in a user namespace mapping ids 0-65535 onto host ids 3000000+
// without CAP_SYS_ADMIN in it, with cgroups handed to the pod's root (as a
// cgroup_writable runtime handler does on cgroup v2); judged from the
// host: runsc's processes run, none of them as a host id outside the pod's.
func TestGVisorInAPodWithoutCapSysAdmin(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the pod is simulated as root")
	}
	if info := gvisor.Probe(gvisor.Runtime{}); !info.Available {
		t.Fatalf("gVisor does not work here: %s", info.Error)
	}
	// The pod's root must be able to run this binary.
	dir := t.TempDir()
	for d := dir; d != "/"; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o005 != 0o005 {
			_ = os.Chmod(d, fi.Mode().Perm()|0o005)
		}
	}
	exe := filepath.Join(dir, "gvisor.test")
	copyFile(t, "/proc/self/exe", exe)
	cgroups := podCgroups(t)

	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), podEnv+"=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: podBase, Size: 65536}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: podBase, Size: 65536}},
		Credential:  &syscall.Credential{Uid: 0, Gid: 0},
		Pdeathsig:   syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Into the pod's cgroups before it goes on (it waits on stdin).
	for _, cg := range cgroups {
		if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
			t.Fatal(err)
		}
	}
	stdin.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	seen := map[string]int{} // runsc's processes by role, and their host uid
	var outside []string
	deadline := time.After(3 * time.Minute)
watch:
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("the pod: %v\n%s", err, out.String())
			}
			break watch
		case <-deadline:
			_ = cmd.Process.Kill()
			t.Fatalf("the pod did not finish:\n%s", out.String())
		case <-time.After(20 * time.Millisecond):
		}
		for _, pid := range cgroupPids(cgroups[0]) {
			uid, cmdline := hostUID(pid), procCmdline(pid)
			if uid < 0 {
				continue
			}
			if uid < podBase || uid >= podBase+65536 {
				outside = append(outside, fmt.Sprintf("%d (uid %d): %s", pid, uid, cmdline))
			}
			for _, role := range []string{"runsc-gofer", "runsc-sandbox"} {
				if strings.HasPrefix(cmdline, role) {
					seen[role] = uid
				}
			}
		}
	}
	t.Logf("the pod:\n%s", out.String())
	if !strings.Contains(out.String(), "gvisor says 42") {
		t.Fatalf("the sandbox did not run")
	}
	if len(outside) > 0 {
		t.Errorf("processes of the pod ran as host ids outside its own: %v", outside)
	}
	if len(seen) != 2 {
		t.Errorf("runsc's gofer and sandbox were not both seen in the pod's cgroup: %v", seen)
	}
	t.Logf("host uids of runsc's processes: %v", seen)
}

// podContainer is the pod's container, in two steps. First it is root of
// the new user namespace with every capability there: it makes /run and
// /tmp its own and mounts its pid namespace's /proc, as a runtime does,
// then gives up CAP_SYS_ADMIN for good (the bounding set) and starts
// again. Then it runs a gVisor sandbox.
func podContainer() int {
	if os.Getenv(podEnv) == "1" {
		_, _ = io.Copy(io.Discard, os.Stdin) // the test has placed us in the cgroups
		for _, m := range []struct{ src, dst, fstype, data string }{
			{"", "/", "", ""}, {"tmpfs", "/run", "tmpfs", "mode=755"}, {"tmpfs", "/tmp", "tmpfs", "mode=1777"}, {"proc", "/proc", "proc", ""},
		} {
			flags := uintptr(0)
			if m.dst == "/" {
				flags = unix.MS_REC | unix.MS_PRIVATE
			}
			if err := unix.Mount(m.src, m.dst, m.fstype, flags, m.data); err != nil {
				fmt.Printf("mount %s: %v\n", m.dst, err)
				return 1
			}
		}
		runtime.LockOSThread() // the bounding set is the thread's
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, unix.CAP_SYS_ADMIN, 0, 0, 0); err != nil {
			fmt.Println("drop CAP_SYS_ADMIN:", err)
			return 1
		}
		os.Setenv(podEnv, "2")
		err := syscall.Exec("/proc/self/exe", os.Args, os.Environ())
		fmt.Println("exec:", err)
		return 1
	}
	status, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(l, "CapEff:") {
			fmt.Println(l)
		}
	}
	var stdout, stderr bytes.Buffer
	sb, err := gvisor.Start(context.Background(), gvisor.Runtime{StateDir: "/tmp"}, jail.Spec{
		Argv:   []string{"/usr/bin/python3", "-I", "-S", "-c", "import time; time.sleep(1); print('gvisor says', 6*7)"},
		Env:    []string{"PATH=/usr/bin:/bin"},
		Stdout: &stdout, Stderr: &stderr,
	})
	if err != nil {
		fmt.Println("gvisor.Start:", err)
		return 1
	}
	exit := sb.Wait()
	fmt.Printf("exit %+v\nstdout %s\nstderr %s\n", exit, stdout.String(), stderr.String())
	if exit.ExitCode != 0 {
		fmt.Println(sb.Log())
		return 1
	}
	return 0
}

// podCgroups makes the pod's cgroups, owned by its root: one directory
// per v1 controller the jail uses, or one v2 directory. The first holds
// all of the pod's processes.
func podCgroups(t *testing.T) []string {
	name := "codecage-test-pod-" + jail.NewID()
	var dirs []string
	if _, err := os.Stat("/sys/fs/cgroup/memory/cgroup.procs"); err == nil {
		for _, c := range []string{"memory", "pids", "cpu", "cpuacct", "freezer"} {
			if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", c)); err == nil {
				dirs = append(dirs, filepath.Join("/sys/fs/cgroup", c, name))
			}
		}
	} else {
		dirs = []string{filepath.Join("/sys/fs/cgroup", name)}
	}
	for _, d := range dirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { removeCgroups(d) })
		if err := filepath.Walk(d, func(p string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, podBase, podBase)
		}); err != nil {
			t.Fatal(err)
		}
	}
	return dirs
}

// removeCgroups removes a cgroup tree, deepest first, once its
// processes have gone.
func removeCgroups(dir string) {
	var all []string
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.IsDir() {
			all = append(all, p)
		}
		return nil
	})
	for i := len(all) - 1; i >= 0; i-- {
		for range 100 {
			if err := os.Remove(all[i]); err == nil || os.IsNotExist(err) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// cgroupPids lists the processes in a cgroup tree.
func cgroupPids(dir string) []int {
	var pids []int
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() || fi.Name() != "cgroup.procs" {
			return nil
		}
		b, _ := os.ReadFile(p)
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				pids = append(pids, n)
			}
		}
		return nil
	})
	return pids
}

// hostUID is pid's real uid as the host sees it, or -1 once it is gone.
func hostUID(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Uid:"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				n, _ := strconv.Atoi(f[0])
				return n
			}
		}
	}
	return -1
}

func procCmdline(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.ReplaceAll(string(b), "\x00", " ")
}

func copyFile(t *testing.T, from, to string) {
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}
