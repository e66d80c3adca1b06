package jail

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// spinPython keeps two processes busy until each has used cpuSecs of
// CPU time (no GIL between them): unthrottled, they take two cores.
func spinPython(cpuSecs float64) []string {
	return python(`import os, time
pid = os.fork()
while time.process_time() < ` + strconv.FormatFloat(cpuSecs, 'f', -1, 64) + `:
    pass
if pid:
    os.waitpid(pid, 0)
`)
}

// hostQuota reads the CPU bandwidth of a sandbox's cgroup from the host's
// cgroup files, in cores (-1: unlimited).
func hostQuota(t *testing.T, cg *cgroup) float64 {
	t.Helper()
	var quota, period string
	if cg.version == 2 {
		b, err := os.ReadFile(filepath.Join(cg.dirs[""], "cpu.max"))
		if err != nil {
			t.Fatal(err)
		}
		quota, period, _ = strings.Cut(strings.TrimSpace(string(b)), " ")
	} else {
		dir := cg.dirs["cpu"]
		if cg.cpuInCpuacct {
			dir = cg.dirs["cpuacct"]
		}
		q, err := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
		if err != nil {
			t.Fatal(err)
		}
		p, err := os.ReadFile(filepath.Join(dir, "cpu.cfs_period_us"))
		if err != nil {
			t.Fatal(err)
		}
		quota, period = strings.TrimSpace(string(q)), strings.TrimSpace(string(p))
	}
	if quota == "max" || quota == "-1" {
		return -1
	}
	q, err1 := strconv.ParseFloat(quota, 64)
	p, err2 := strconv.ParseFloat(period, 64)
	if err1 != nil || err2 != nil || p == 0 {
		t.Fatalf("unreadable quota %q / period %q", quota, period)
	}
	return q / p
}

func TestSandboxCPUBandwidthIsLimited(t *testing.T) {
	if err := ProbeHost().CPUBandwidth(); err != nil {
		t.Fatalf("this test runs where the cpu controller is available: %v", err)
	}
	// Each of two processes spins for half a second of its own CPU time:
	// however loaded the host, the work is the same, and only how long it
	// takes shows the limit.
	sb, err := Start(context.Background(), Spec{Argv: spinPython(0.5), Limits: Limits{CPUCores: 0.3, Timeout: 5 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Channel().Close()
	if got := hostQuota(t, sb.cg); got < 0.29 || got > 0.31 {
		t.Errorf("the cgroup's quota is %g cores, want 0.3", got)
	}
	if err := sb.SetCPU(0.25); err != nil {
		t.Fatal(err)
	}
	if got := hostQuota(t, sb.cg); got < 0.24 || got > 0.26 {
		t.Errorf("after SetCPU(0.25) the cgroup's quota is %g cores", got)
	}
	exit := sb.Wait()
	// CPUTime is the cgroup's accounting, read by the supervisor.
	cores := exit.CPUTime.Seconds() / exit.Duration.Seconds()
	t.Logf("%.2fs of CPU in %.2fs: %.2f cores", exit.CPUTime.Seconds(), exit.Duration.Seconds(), cores)
	if exit.ExitCode != 0 || cores > 0.25*1.3 || exit.CPUTime < 900*time.Millisecond {
		t.Fatalf("two spinning processes limited to 0.25 core used %.2f cores (exit %+v)", cores, exit)
	}
}

func TestDefaultCPUBandwidthIsOneCore(t *testing.T) {
	if err := ProbeHost().CPUBandwidth(); err != nil {
		t.Fatalf("this test runs where the cpu controller is available: %v", err)
	}
	sb, err := Start(context.Background(), Spec{Argv: python("pass")})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Channel().Close()
	if got := hostQuota(t, sb.cg); got != 1 {
		t.Errorf("default quota %g cores, want 1", got)
	}
	sb.Wait()
}

func TestCellCgroupsAreRecycledByCPUBandwidth(t *testing.T) {
	if a, b := (cellKey{1, 2, cpuQuota(0.5)}), (cellKey{1, 2, cpuQuota(1)}); a == b {
		t.Fatal("cells with different CPU bandwidths share a recycled cgroup")
	}
	if cpuQuota(0) != 1000 || cpuQuota(1) != 100_000 || cpuQuota(1e9) != 1024*100_000 {
		t.Errorf("cpuQuota bounds: %d %d %d", cpuQuota(0), cpuQuota(1), cpuQuota(1e9))
	}
}

func TestLayersReportAMissingCPUController(t *testing.T) {
	h := Host{LandlockABI: 3, Cgroup: cgroupHost{version: 1, noCPU: "cgroup v1 controller cpu is not mounted"}}
	l := h.Layers()
	if len(l.Warnings) != 1 || !strings.Contains(l.Warnings[0], "CPU bandwidth") || !strings.Contains(l.Warnings[0], "not mounted") {
		t.Fatalf("%+v", l)
	}
	if h.CPUBandwidth() == nil {
		t.Fatal("CPUBandwidth reports a missing cpu controller as available")
	}
}
