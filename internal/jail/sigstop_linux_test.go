package jail

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startWithoutCgroups starts a sandbox of two spinning processes as on a
// host without cgroups (a pod's read-only /sys/fs/cgroup), and waits until
// the host sees both run.
func startWithoutCgroups(t testing.TB) (*Sandbox, []int) {
	t.Helper()
	host := ProbeHost()
	host.Cgroup = cgroupHost{reason: "taken away by the test"}
	sb, err := startOn(context.Background(), Spec{Argv: python(`import os
os.fork()
while True:
    pass`), Limits: Limits{Timeout: time.Minute, CPUTime: time.Minute}}, host)
	if err != nil {
		t.Fatal(err)
	}
	if sb.cg != nil {
		t.Fatal("the sandbox has a cgroup")
	}
	t.Cleanup(func() {
		sb.Kill(LimitNone)
		sb.Wait()
		_ = sb.Channel().Close()
	})
	ns, err := pidNSOf(sb.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var pys []int
		pids, _ := pidsInNS(ns)
		for _, pid := range pids {
			if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm"); err == nil && strings.HasPrefix(string(b), "python") {
				pys = append(pys, pid)
			}
		}
		if len(pys) == 2 {
			return sb, pys
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sandbox's two spinners did not start: %v", pys)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Without a cgroup freezer a sandbox is paused by stopping each of its
// processes: judged from the host, every process is stopped (T) and uses
// no CPU; resumed, each runs again; killed while paused, none is left.
func TestPauseWithoutAFreezerStopsEveryProcess(t *testing.T) {
	sb, pids := startWithoutCgroups(t)
	if err := sb.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := sb.Pause(); err != nil || !sb.Paused() {
		t.Fatalf("a second Pause: %v (paused %v)", err, sb.Paused())
	}
	p0 := procCPU(pids)
	time.Sleep(300 * time.Millisecond)
	p1 := procCPU(pids)
	t.Logf("paused 300 ms: processes %v -> %v ticks, states %q", p0, p1, states(pids))
	for i, st := range states(pids) {
		if !strings.HasPrefix(st, "T") {
			t.Errorf("process %d is %q while paused, want stopped", pids[i], st)
		}
		if p1[i] != p0[i] {
			t.Errorf("process %d: CPU %d -> %d ticks while paused", pids[i], p0[i], p1[i])
		}
	}
	// The init too: nothing of the sandbox runs.
	if st := states([]int{sb.cmd.Process.Pid}); len(st) != 1 || !strings.HasPrefix(st[0], "T") {
		t.Errorf("the init is %q while paused", st)
	}
	if err := sb.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	for i, pid := range pids {
		for procCPU([]int{pid})[0] <= p1[i] {
			if time.Since(resumed) > time.Minute {
				t.Fatalf("process %d did not run again in a minute", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// Paused again, then killed: nothing is left.
	if err := sb.Pause(); err != nil {
		t.Fatal(err)
	}
	sb.Kill(LimitNone)
	select {
	case <-sb.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("a paused sandbox did not end within 10 s of its Kill; states %q", states(pids))
	}
	for _, pid := range pids {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
			t.Errorf("process %d outlived the sandbox (%q)", pid, states([]int{pid}))
		}
	}
	if err := sb.Resume(); !errors.Is(err, ErrEnded) {
		t.Errorf("Resume of a killed sandbox: %v, want ErrEnded", err)
	}
}

// Processes of another pid namespace (the host's, here this test's own
// children) are never signalled.
func TestSignalPidNSTouchesNoOtherNamespace(t *testing.T) {
	sb, _ := startWithoutCgroups(t)
	ns, _ := pidNSOf(sb.cmd.Process.Pid)
	self, _ := pidNSOf(os.Getpid())
	if ns == self {
		t.Fatal("the sandbox shares this test's pid namespace")
	}
	n, err := signalPidNS(ns, 0) // signal 0: only counts
	if err != nil || n < 3 {
		t.Fatalf("the sandbox's namespace: %d processes, %v (want its init and two spinners)", n, err)
	}
	if st := states([]int{os.Getpid()}); strings.HasPrefix(st[0], "T") {
		t.Fatal("this test was stopped")
	}
}
