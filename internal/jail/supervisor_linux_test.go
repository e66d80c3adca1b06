package jail

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestStaleCgroupsOfReusedPidsAreReaped: the cgroups named after a pid
// that now runs another process (its supervisor lock free: the codecage
// that made them died, and the pid was given out again) are removed; those
// of a live codecage (its lock held), of a pid whose maker cannot be told
// (no lock file: an older codecage) and this process's own are kept, and
// no process named by them is touched. At start, before this process
// makes any, those named after its own pid are a predecessor's.
func TestStaleCgroupsOfReusedPidsAreReaped(t *testing.T) {
	h := ProbeHost()
	if h.CgroupVersion() == 0 {
		t.Fatalf("this test runs where cgroups are available: %s", h.CgroupReason())
	}
	if supervisorLock == nil {
		t.Fatal("this process holds no supervisor lock")
	}
	if got := supervisorOf(os.Getpid()); got != supervisorLive {
		t.Fatalf("this process's own lock is judged %d, want live", got)
	}
	// Live processes that are no codecage, whose pids name cgroups.
	var pids []int
	for range 3 {
		cmd := exec.Command("sleep", "300")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		pids = append(pids, cmd.Process.Pid)
	}
	reused, unknown, live := pids[0], pids[1], pids[2]
	lockPath := func(pid int) string { return filepath.Join(supervisorDir(), strconv.Itoa(pid)+".lock") }
	// reused: a dead codecage's lock file, free.
	if err := os.WriteFile(lockPath(reused), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(lockPath(reused)) })
	// unknown: no lock file at all.
	_ = os.Remove(lockPath(unknown))
	// live: its lock held (here by this test, as its codecage would).
	f, err := os.OpenFile(lockPath(live), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(lockPath(live)); f.Close() })
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}

	made := map[string][]string{}
	for _, parent := range h.Cgroup.parents {
		for name, pid := range map[string]int{"reused": reused, "unknown": unknown, "live": live, "own": os.Getpid()} {
			dir := filepath.Join(parent, strconv.Itoa(pid)+"-test"+name)
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = unix.Rmdir(dir) })
			made[name] = append(made[name], dir)
		}
	}
	reapStaleCgroups(h.Cgroup, false)
	for name, dirs := range made {
		for _, dir := range dirs {
			_, err := os.Stat(dir)
			switch gone := os.IsNotExist(err); {
			case name == "reused" && !gone:
				t.Errorf("the cgroup of a pid given to another process is kept: %s", dir)
			case name != "reused" && gone:
				t.Errorf("%s cgroup removed: %s", name, dir)
			}
		}
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err != nil {
			t.Errorf("process %d named by a cgroup was touched: %v", pid, err)
		}
	}
	if !staleSupervisor(os.Getpid(), true) || staleSupervisor(os.Getpid(), false) {
		t.Error("at start, this process's own pid names a predecessor's cgroups; later, its own")
	}
}
