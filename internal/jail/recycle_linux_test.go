package jail

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// runInCell runs argv as the first process of a new cell with limits lim
// and returns the cell once it has ended.
func runInCell(t *testing.T, lim Limits, argv ...string) *Cell {
	t.Helper()
	cell, err := NewCell(NewID(), lim, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cell.ClosePassed()
	// The process waits for its cell (a line on stdin) before it runs argv.
	cmd := exec.Command("/bin/sh", append([]string{"-c", `read go; exec "$@"`, "sh"}, argv...)...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := cell.Attach(context.Background(), fd); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	select {
	case <-cell.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the cell did not end")
	}
	return cell
}

// keepRecycling keeps the cgroups of a test's cells for reuse however
// slowly the test goes.
func keepRecycling(t *testing.T) {
	cellCgroups.Lock()
	old := idleRelease
	idleRelease = time.Hour
	cellCgroups.Unlock()
	t.Cleanup(func() {
		cellCgroups.Lock()
		idleRelease = old
		cellCgroups.Unlock()
		ReleaseCellCgroups()
	})
	ReleaseCellCgroups() // a free list of earlier tests would serve this one
}

// waitFree waits until cg is in the free list. Meanwhile it has the
// kernel give back what is charged to the cgroup in advance (see
// drainCharges).
func waitFree(t *testing.T, cg *cgroup) {
	t.Helper()
	deadline := time.Now().Add(settleWait)
	for time.Now().Before(deadline) {
		drainCharges(t, cg)
		cellCgroups.Lock()
		for _, f := range cellCgroups.free[cg.key] {
			if f == cg {
				cellCgroups.Unlock()
				return
			}
		}
		cellCgroups.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the cgroup of the ended cell was not recycled")
}

func readCgroupFile(t *testing.T, cg *cgroup, ctrl, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cg.dirs[ctrl], name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// drainCharges makes the kernel give back the memory charged to the
// cgroup of an ended cell in advance: each CPU keeps a stock of charges
// for the last few cgroups that used it, which on a busy host other
// cgroups' charges soon push out, and on an idle one nothing does.
func drainCharges(t *testing.T, cg *cgroup) {
	t.Helper()
	if cg.version == 1 && cg.readIntOK(cgPidsCurrent) == 0 {
		_ = os.WriteFile(filepath.Join(cg.dirs["memory"], "memory.force_empty"), []byte("0"), 0)
	}
}

// The cgroup of an ended cell serves the next cell with the same limits,
// and that cell sees nothing of the first: no CPU time, no peak, the pids
// limit of a new cgroup, no memory charged.
func TestCellCgroupIsRecycledLikeNew(t *testing.T) {
	h := ProbeHost()
	if h.CgroupVersion() == 0 {
		t.Fatalf("this test runs where cgroups are available: %s", h.CgroupReason())
	}
	keepRecycling(t)
	lim := Limits{Timeout: 20 * time.Second, MemoryBytes: 64 << 20, MaxProcesses: 9}
	ctrl := map[int]string{1: "pids", 2: ""}[h.CgroupVersion()]
	mctrl := map[int]string{1: "memory", 2: ""}[h.CgroupVersion()]

	// The first cell burns CPU and raises its peak.
	first := runInCell(t, lim, "/bin/sh", "-c", "x=$(seq 100000); i=0; while [ $i -lt 50000 ]; do i=$((i+1)); done")
	e1 := first.Wait()
	if e1.CPUTime < 50*time.Millisecond || e1.PeakMemoryBytes < 1<<20 || e1.Limit != LimitNone {
		t.Fatalf("first cell: %+v", e1)
	}
	cg := first.cg
	waitFree(t, cg)
	if cg.memoryPeak() != 0 || cg.cpuUsage() != 0 || cg.oomKills() != 0 {
		t.Fatalf("a recycled cgroup reads peak %d cpu %v oom %d", cg.memoryPeak(), cg.cpuUsage(), cg.oomKills())
	}
	if got, want := readCgroupFile(t, cg, ctrl, "pids.max"), strconv.Itoa(lim.MaxProcesses+initHeadroom); got != want {
		t.Fatalf("pids.max %s, want %s", got, want)
	}

	// Other limits: another cgroup.
	other, err := NewCell(NewID(), Limits{MemoryBytes: 32 << 20, MaxProcesses: 9}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if other.cg == cg {
		t.Fatal("a cell with other limits got the recycled cgroup")
	}
	other.ClosePassed()
	other.Abandon()

	// The same limits: the same cgroup, like new.
	second, err := NewCell(NewID(), lim, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if second.cg != cg {
		t.Fatal("a cell with the same limits did not get the recycled cgroup")
	}
	if got := readCgroupFile(t, cg, mctrl, map[int]string{1: "memory.usage_in_bytes", 2: "memory.current"}[h.CgroupVersion()]); got != "0" {
		t.Fatalf("memory still charged to the recycled cgroup: %s", got)
	}
	second.ClosePassed()
	second.Abandon()

	// A cell in the recycled cgroup reports its own run only.
	waitFree(t, cg)
	third := runInCell(t, lim, "/bin/true")
	if third.cg != cg {
		t.Fatal("the third cell did not get the recycled cgroup")
	}
	e3 := third.Wait()
	if e3.OOMKilled || e3.Limit != LimitNone || e3.CPUTime >= e1.CPUTime/2 || e3.PeakMemoryBytes >= e1.PeakMemoryBytes/2 {
		t.Fatalf("the next cell sees the first one's run: first %+v, next %+v", e1, e3)
	}

	// Released: removed.
	waitFree(t, cg)
	dirs := cg.dirs
	ReleaseCellCgroups()
	for _, dir := range dirs {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("a released cgroup is left: %s (%v)", dir, err)
		}
	}
}

// An OOM kill cannot be reset (the count only grows): a recycled cgroup
// counts from what it read when it was reset.
func TestCellCgroupResetHidesEarlierOOMKills(t *testing.T) {
	if ProbeHost().CgroupVersion() == 0 {
		t.Fatalf("this test runs where cgroups are available: %s", ProbeHost().CgroupReason())
	}
	keepRecycling(t)
	lim := Limits{Timeout: 20 * time.Second, MemoryBytes: 32 << 20, MaxProcesses: 9}
	cell := runInCell(t, lim, "/usr/bin/python3", "-c", "x = bytearray(200 << 20)")
	if e := cell.Wait(); !e.OOMKilled || e.Limit != LimitMemory {
		t.Fatalf("not OOM-killed: %+v", e)
	}
	cg := cell.cg
	for cg.readIntOK(cgPidsCurrent) != 0 {
		time.Sleep(5 * time.Millisecond)
	}
	_ = cg.reset() // false while the memory is not all given back
	if n := cg.oomKills(); n != 0 {
		t.Fatalf("oomKills %d after a reset", n)
	}
	if n := cg.readKey(cgOOM, "oom_kill"); n == 0 {
		t.Fatal("the kernel's count is gone: the test proves nothing")
	}
}

// A Kill of a cell that has ended must not reach the cell that got its
// cgroup since.
func TestKillOfAnEndedCellSparesTheNextInItsCgroup(t *testing.T) {
	if ProbeHost().CgroupVersion() == 0 {
		t.Fatalf("this test runs where cgroups are available: %s", ProbeHost().CgroupReason())
	}
	keepRecycling(t)
	lim := Limits{Timeout: 20 * time.Second, MaxProcesses: 7}
	first := runInCell(t, lim, "/bin/true")
	waitFree(t, first.cg)
	next, err := NewCell(NewID(), lim, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if next.cg != first.cg {
		t.Fatal("the next cell did not get the recycled cgroup")
	}
	next.ClosePassed()
	cmd, fd := startPidfd(t, "/bin/sleep", "30")
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if err := next.Attach(context.Background(), fd); err != nil {
		t.Fatal(err)
	}
	first.Kill(LimitNone)
	// A Kill signals before it returns: had it reached the next cell's
	// process, that one would be dead or hold a pending SIGKILL now.
	select {
	case <-next.Done():
		t.Fatal("a Kill of the ended cell killed the next one")
	default:
	}
	if why := killedOrDying(t, cmd.Process.Pid); why != "" {
		t.Fatalf("a Kill of the ended cell reached the next one's process: %s", why)
	}
	next.Kill(LimitNone)
	_ = cmd.Wait()
	next.Wait()
}

// The cgroup of a cell is removed, not kept, once recycling is released.
func TestCellCgroupIsRemovedAfterRelease(t *testing.T) {
	if ProbeHost().CgroupVersion() == 0 {
		t.Fatalf("this test runs where cgroups are available: %s", ProbeHost().CgroupReason())
	}
	lim := Limits{Timeout: 20 * time.Second, MaxProcesses: 5}
	cell, err := NewCell(NewID(), lim, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ReleaseCellCgroups() // the owner closes while the cell runs
	cell.ClosePassed()
	cmd, fd := startPidfd(t, "/bin/sleep", "0.1")
	if err := cell.Attach(context.Background(), fd); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	cell.Wait()
	deadline := time.Now().Add(3 * time.Second)
	for _, dir := range cell.cg.dirs {
		for {
			_, err := os.Stat(dir)
			if os.IsNotExist(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the cgroup of a cell that ended after the release is left: %s", dir)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// Recycling stops when no cell has been made for a while: an idle service
// keeps no cgroup for nobody.
func TestIdleRecyclingKeepsNothing(t *testing.T) {
	if ProbeHost().CgroupVersion() == 0 {
		t.Fatalf("this test runs where cgroups are available: %s", ProbeHost().CgroupReason())
	}
	keepRecycling(t)
	lim := Limits{Timeout: 20 * time.Second, MaxProcesses: 6}
	cell := runInCell(t, lim, "/bin/true")
	waitFree(t, cell.cg)
	cellCgroups.Lock()
	idleRelease = 10 * time.Millisecond // the last NewCell was long ago
	cellCgroups.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for _, dir := range cell.cg.dirs {
		for {
			if _, err := os.Stat(dir); os.IsNotExist(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("an idle free list keeps %s", dir)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// killedOrDying tells, from /proc, whether process pid has ended or has a
// SIGKILL pending (sent, not yet acted on): "" when neither.
func killedOrDying(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return err.Error()
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimSpace(v)
		switch k {
		case "State":
			if strings.HasPrefix(v, "Z") || strings.HasPrefix(v, "X") {
				return "state " + v
			}
		case "SigPnd", "ShdPnd":
			if mask, err := strconv.ParseUint(v, 16, 64); err != nil || mask&(1<<(int(syscall.SIGKILL)-1)) != 0 {
				return k + " " + v
			}
		}
	}
	return ""
}
