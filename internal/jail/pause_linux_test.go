package jail

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Pausing is judged from the host: the CPU time of the sandbox's
// processes, as the kernel reports it in /proc, and its cgroup's files.

// startSpinner starts a sandbox whose two processes spin (no GIL between
// them) and waits until the host sees both of them run.
func startSpinner(t testing.TB, lim Limits) *Sandbox {
	t.Helper()
	if h := ProbeHost(); h.CgroupVersion() == 0 {
		t.Fatalf("this test runs where cgroups are available: %s", h.CgroupReason())
	}
	lim.CPUCores = 2
	sb, err := Start(context.Background(), Spec{Argv: python(`import os
os.fork()
while True:
    pass`), Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sb.Kill(LimitNone)
		_ = sb.cg.thaw() // should a Kill fail to: the test has failed already
		sb.Wait()
		_ = sb.Channel().Close()
	})
	deadline := time.Now().Add(10 * time.Second)
	for len(pythons(t, sb)) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the sandbox's two spinners did not start: %v", pythons(t, sb))
		}
		time.Sleep(10 * time.Millisecond)
	}
	return sb
}

// pythons lists the host pids of the sandbox's python processes (those of
// its cgroup, not its init).
func pythons(t testing.TB, sb *Sandbox) []int {
	t.Helper()
	pids, err := sb.cg.procs()
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, pid := range pids {
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm"); err == nil && strings.HasPrefix(string(b), "python") {
			out = append(out, pid)
		}
	}
	return out
}

// procCPU is the CPU time (utime+stime, in clock ticks) of each process,
// from /proc/PID/stat; -1 for one that is gone.
func procCPU(pids []int) []int64 {
	out := make([]int64, len(pids))
	for i, pid := range pids {
		out[i] = -1
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		// Fields after the command (which may hold spaces): state is the
		// first, utime the 12th, stime the 13th.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		out[i] = u + st
	}
	return out
}

// hostCgroupCPU is the cgroup's CPU time, read from its file on the host.
func hostCgroupCPU(t testing.TB, cg *cgroup) time.Duration {
	t.Helper()
	if cg.version == 2 {
		b, err := os.ReadFile(filepath.Join(cg.dirs[""], "cpu.stat"))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return time.Duration(n) * time.Microsecond
			}
		}
		t.Fatalf("no usage_usec in cpu.stat: %q", b)
	}
	b, err := os.ReadFile(filepath.Join(cg.dirs["cpuacct"], "cpuacct.usage"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(n)
}

// states are the State lines of the processes' /proc/PID/status.
func states(pids []int) []string {
	var out []string
	for _, pid := range pids {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "State:"); ok {
				out = append(out, strings.TrimSpace(v))
			}
		}
	}
	return out
}

func TestPauseStopsEveryProcessAndResumeRunsThemAgain(t *testing.T) {
	sb := startSpinner(t, Limits{Timeout: time.Minute, CPUTime: time.Minute})
	pids := pythons(t, sb)
	running := states(pids)
	if err := sb.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := sb.Pause(); err != nil || !sb.Paused() {
		t.Fatalf("a second Pause: %v (paused %v)", err, sb.Paused())
	}
	cg0, p0 := hostCgroupCPU(t, sb.cg), procCPU(pids)
	time.Sleep(300 * time.Millisecond)
	cg1, p1 := hostCgroupCPU(t, sb.cg), procCPU(pids)
	frozen := states(pids)
	t.Logf("paused 300 ms: cgroup CPU +%v, processes %v -> %v ticks; states running %q, paused %q", cg1-cg0, p0, p1, running, frozen)
	if cg1 != cg0 {
		t.Errorf("the paused sandbox's cgroup used %v of CPU in 300 ms", cg1-cg0)
	}
	for i := range pids {
		if p0[i] < 0 || p1[i] != p0[i] {
			t.Errorf("process %d: CPU %d -> %d ticks while paused", pids[i], p0[i], p1[i])
		}
	}
	// The kernel reports a frozen task as sleeping (D under v1's freezer,
	// S under v2's), never running.
	for i, st := range frozen {
		if strings.HasPrefix(st, "R") {
			t.Errorf("process %d is %q while paused", pids[i], st)
		}
	}
	if err := sb.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := sb.Resume(); err != nil || sb.Paused() {
		t.Fatalf("a second Resume: %v (paused %v)", err, sb.Paused())
	}
	// The host is shared: the spinners get what they get, but they run
	// (under two busy loops and the suite, 34 ms in the first 5 s once).
	resumed := time.Now()
	for hostCgroupCPU(t, sb.cg)-cg1 < 50*time.Millisecond {
		if time.Since(resumed) > time.Minute {
			t.Fatalf("resumed, the spinners used only %v of CPU in a minute", hostCgroupCPU(t, sb.cg)-cg1)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i, pid := range pids {
		for procCPU([]int{pid})[0] <= p1[i] {
			if time.Since(resumed) > time.Minute {
				t.Fatalf("process %d did not run again in a minute: %d ticks", pid, p1[i])
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	t.Logf("resumed: 50 ms of CPU, and each process ran, within %v", time.Since(resumed))
}

// v1 delivers no signal to a frozen task: a Kill must still end a paused
// sandbox, and leave no process and no cgroup behind.
func TestKillingAPausedSandboxLeavesNothing(t *testing.T) {
	sb := startSpinner(t, Limits{Timeout: time.Minute, CPUTime: time.Minute})
	pids := pythons(t, sb)
	dirs := sb.cg.dirs
	if err := sb.Pause(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	sb.Kill(LimitNone)
	select {
	case <-sb.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("a paused sandbox did not end within 10 s of its Kill; states %q", states(pids))
	}
	t.Logf("killed paused sandbox gone in %v", time.Since(start))
	for _, pid := range pids {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
			t.Errorf("process %d outlived the sandbox (%q)", pid, states([]int{pid}))
		}
	}
	for c, dir := range dirs {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("the %s cgroup %s outlived the sandbox: %v", c, dir, err)
		}
	}
	if left := uidProcesses(sb.HostUID()); len(left) > 0 {
		t.Errorf("processes of the sandbox's uid %d left: %v", sb.HostUID(), left)
	}
	if err := sb.Resume(); !errors.Is(err, ErrEnded) {
		t.Errorf("Resume of a killed sandbox: %v, want ErrEnded", err)
	}
	if err := sb.Pause(); !errors.Is(err, ErrEnded) {
		t.Errorf("Pause of a killed sandbox: %v, want ErrEnded", err)
	}
}

// uidProcesses lists the host pids whose real uid is uid.
func uidProcesses(uid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Uid:"); ok {
				if f := strings.Fields(v); len(f) > 0 && f[0] == strconv.Itoa(uid) {
					out = append(out, pid)
				}
			}
		}
	}
	return out
}

// The time a sandbox spends paused does not count against its timeout:
// past its deadline while paused, it lives on, and once resumed it has
// what was left when it was paused.
func TestPausedTimeDoesNotCountAgainstTheTimeout(t *testing.T) {
	if h := ProbeHost(); h.CgroupVersion() == 0 {
		t.Fatalf("this test runs where cgroups are available: %s", h.CgroupReason())
	}
	sb, err := Start(context.Background(), Spec{Argv: python("import time\ntime.sleep(60)"), Limits: Limits{Timeout: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Channel().Close()
	defer sb.Kill(LimitNone)
	const timeout = 2 * time.Second
	armed := time.Now()
	sb.Arm(context.Background(), timeout, time.Minute) // as a session idles: its own lifetime
	time.Sleep(300 * time.Millisecond)                 // some of it passes running
	if err := sb.Pause(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	select {
	case <-sb.Done():
		t.Fatalf("killed while paused, %v after the pause: %+v", time.Since(paused), sb.Wait())
	case <-time.After(timeout + 500*time.Millisecond): // well past the deadline
	}
	resumed := time.Now()
	if err := sb.Resume(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sb.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the resumed sandbox outlived its timeout by far")
	}
	ended := time.Now()
	exit := sb.Wait()
	t.Logf("ended %v after the resume, %v after the arming: %+v", ended.Sub(resumed), ended.Sub(armed), exit)
	if exit.Limit != LimitTimeout {
		t.Fatalf("exit %+v, want the timeout", exit)
	}
	// Judged by wall time from the arming, which load only lengthens: the
	// time it was paused (at least from Pause's return to Resume's call)
	// does not count, so the timeout ends no sooner than that much after
	// its own span (less a tick of the enforcer's).
	if least := timeout + resumed.Sub(paused) - 100*time.Millisecond; ended.Sub(armed) < least {
		t.Fatalf("ended %v after the arming, want at least %v: the paused time was counted", ended.Sub(armed), least)
	}
}

// The host says how sandboxes are paused.
func TestHostSaysHowSandboxesArePaused(t *testing.T) {
	if by := (Host{Cgroup: cgroupHost{version: 1, noFreezer: "cgroup v1 controller freezer is not mounted"}}).PauseBy(); !strings.Contains(by, "SIGSTOP") || !strings.Contains(by, "freezer is not mounted") {
		t.Fatalf("v1 without a freezer: %s", by)
	}
	if by := (Host{Cgroup: cgroupHost{version: 2}}).PauseBy(); by != "the cgroup freezer" {
		t.Fatalf("v2: %s", by)
	}
	if by := ProbeHost().PauseBy(); by != "the cgroup freezer" {
		t.Fatalf("this host (v1 with a freezer, or v2): %s", by)
	}
}
