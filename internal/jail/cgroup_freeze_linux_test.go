package jail

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// v2's freezer (cgroup.freeze, cgroup.events) is a core file of every v2
// cgroup, not a controller: it works on a hybrid host's unified mount too,
// where it is tested when the host's cgroups are v1.
func v2Root(t *testing.T) string {
	for _, dir := range []string{cgroupRoot, filepath.Join(cgroupRoot, "unified")} {
		var st unix.Statfs_t
		if unix.Statfs(dir, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return dir
		}
	}
	t.Skip("no cgroup v2 mount on this host")
	return ""
}

func TestFreezeV2StopsAndKillEndsAFrozenCgroup(t *testing.T) {
	dir := filepath.Join(v2Root(t), cgroupName("freeze-test-"+NewID()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cg := &cgroup{version: 2, dirs: map[string]string{"": dir}}
	defer cg.destroy()
	cmd := exec.Command("/bin/sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(waited) }()
	defer func() { _ = cmd.Process.Kill() }()
	if err := cg.addProcess(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	pids := []int{cmd.Process.Pid}
	time.Sleep(50 * time.Millisecond)
	if err := cg.freeze(); err != nil {
		t.Fatal(err)
	}
	if err := cg.freeze(); err != nil {
		t.Fatalf("a second freeze: %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	p0 := procCPU(pids)
	time.Sleep(300 * time.Millisecond)
	p1 := procCPU(pids)
	t.Logf("frozen: %v -> %v ticks, %q, events %q", p0, p1, states(pids), b)
	if p1[0] != p0[0] {
		t.Errorf("the frozen loop ran: %d -> %d ticks", p0[0], p1[0])
	}
	if err := cg.thaw(); err != nil {
		t.Fatal(err)
	}
	// The host is shared: the thawed loop gets what it gets, but it runs.
	for deadline := time.Now().Add(10 * time.Second); procCPU(pids)[0] <= p1[0]; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the thawed loop did not run in 10 s: %d ticks", p1[0])
		}
	}
	if err := cg.freeze(); err != nil {
		t.Fatal(err)
	}
	if err := cg.kill(true); err != nil {
		t.Fatal(err)
	}
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Fatalf("the frozen process outlived its kill: %q", states(pids))
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pids[0])); err == nil {
		t.Fatal("the process is still there")
	}
}
