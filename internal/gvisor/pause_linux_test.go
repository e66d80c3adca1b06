package gvisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/jail"
)

// startSpinner starts a gVisor sandbox whose two processes spin, and waits
// until the program says it runs (a byte on its channel) and the host sees
// its cgroup use CPU. CPU alone is not enough: the Sentry's boot uses CPU
// before runsc has saved the container's state, and a pause then finds no
// container (it failed in CI that way).
func startSpinner(t testing.TB) *Sandbox {
	t.Helper()
	if info := Probe(Runtime{}); !info.Available {
		t.Fatalf("gVisor does not work here: %s", info.Error)
	}
	sb, err := Start(context.Background(), Runtime{StateDir: t.TempDir()}, jail.Spec{
		Argv:   []string{"/usr/bin/python3", "-I", "-S", "-c", "import os\nif os.fork(): os.write(0, b'r')\nwhile True: pass"},
		Env:    []string{"PATH=/usr/bin:/bin"},
		Limits: jail.Limits{Timeout: time.Hour, CPUTime: time.Hour, CPUCores: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sb.Kill(jail.LimitNone)
		sb.Wait()
		_ = sb.Channel().Close()
	})
	deadline := time.Now().Add(20 * time.Second)
	_ = sb.Channel().SetReadDeadline(deadline)
	if n, err := sb.Channel().Read(make([]byte, 1)); n != 1 {
		t.Fatalf("the spinner did not say it runs: %v", err)
	}
	// They spin once they have used CPU since saying so: a sum, not a
	// rate, since a loaded host gives them a small share of its cores.
	deadline = time.Now().Add(60 * time.Second)
	for c0 := sb.CPUUsage(); ; {
		time.Sleep(50 * time.Millisecond)
		if c := sb.CPUUsage(); c-c0 > 200*time.Millisecond {
			return sb
		} else if time.Now().After(deadline) {
			t.Fatalf("the spinners did not start: %v of CPU in 60 s", c-c0)
		}
	}
}

// hostCPU is the CPU time of the sandbox's host processes (runsc, the
// Sentry, the Gofer, systrap's stubs), from /proc/PID/stat of each
// process its cgroup lists, in clock ticks; and the cgroup's own count.
func hostCPU(t *testing.T, sb *Sandbox) (ticks int64, cgroup time.Duration) {
	t.Helper()
	b, err := os.ReadFile(sb.cg.ProcsFiles()[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Fields(string(b)) {
		st, err := os.ReadFile("/proc/" + f + "/stat")
		if err != nil {
			continue
		}
		s := string(st)
		fs := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		u, _ := strconv.ParseInt(fs[11], 10, 64)
		k, _ := strconv.ParseInt(fs[12], 10, 64)
		ticks += u + k
	}
	return ticks, sb.CPUUsage()
}

func TestPauseStopsAGVisorSandboxAndResumeRunsIt(t *testing.T) {
	sb := startSpinner(t)
	start := time.Now()
	if err := sb.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Logf("runsc pause took %v", time.Since(start))
	if err := sb.Pause(); err != nil || !sb.Paused() {
		t.Fatalf("a second Pause: %v (paused %v)", err, sb.Paused())
	}
	t0, c0 := hostCPU(t, sb)
	time.Sleep(300 * time.Millisecond)
	t1, c1 := hostCPU(t, sb)
	t.Logf("paused 300 ms: %d ticks of the host processes, cgroup +%v", t1-t0, c1-c0)
	// Two spinners take 600 ms in 300 ms; what remains is the Sentry's
	// own housekeeping, if anything.
	if c1-c0 > 15*time.Millisecond || t1-t0 > 1 {
		t.Errorf("the paused sandbox used %v of CPU (%d ticks) in 300 ms", c1-c0, t1-t0)
	}
	start = time.Now()
	if err := sb.Resume(); err != nil {
		t.Fatal(err)
	}
	t.Logf("runsc resume took %v", time.Since(start))
	if err := sb.Resume(); err != nil || sb.Paused() {
		t.Fatalf("a second Resume: %v (paused %v)", err, sb.Paused())
	}
	// The host is shared: the spinners get what they get, but they run.
	resumed := time.Now()
	for {
		t2, c2 := hostCPU(t, sb)
		if c2-c1 >= 50*time.Millisecond && t2 > t1 {
			break
		}
		if time.Since(resumed) > 30*time.Second {
			t.Fatalf("resumed, the spinners used only %v (%d ticks) in 30 s", c2-c1, t2-t1)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("resumed: 50 ms of CPU within %v", time.Since(resumed))
}

func TestKillingAPausedGVisorSandboxLeavesNothing(t *testing.T) {
	sb := startSpinner(t)
	procs := sb.cg.ProcsFiles()
	dir := sb.dir
	if err := sb.Pause(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(procs[0])
	pids := strings.Fields(string(b))
	killed := time.Now()
	sb.Kill(jail.LimitNone)
	select {
	case <-sb.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("a paused gVisor sandbox did not end within 20 s of its Kill")
	}
	t.Logf("killed paused sandbox gone in %v", time.Since(killed))
	for _, pid := range pids {
		// Dead, at most a zombie: runsc's children are reparented to the
		// host's init when runsc dies, which reaps them when it will.
		if st, err := os.ReadFile("/proc/" + pid + "/status"); err == nil && !strings.Contains(string(st), "State:\tZ") {
			t.Errorf("process %s outlived the sandbox: %.200q", pid, st)
		}
	}
	for _, f := range procs {
		if _, err := os.Stat(filepath.Dir(f)); !os.IsNotExist(err) {
			t.Errorf("cgroup %s outlived the sandbox: %v", filepath.Dir(f), err)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the bundle %s outlived the sandbox: %v", dir, err)
	}
	if err := sb.Resume(); !errors.Is(err, jail.ErrEnded) {
		t.Errorf("Resume of a killed sandbox: %v, want ErrEnded", err)
	}
}

// The time a sandbox spends paused does not count against its timeout.
// Judged by wall time from the arming, which load only lengthens: a 1 s
// timeout with 1.5 s paused in it ends no sooner than about 2.5 s after
// the arming (a pause that took long to land counts, as it should).
func TestPausedGVisorTimeDoesNotCountAgainstTheTimeout(t *testing.T) {
	// The timeout leaves room for the pause to come late: on a loaded
	// host (the unit suite beside it) a 300 ms sleep once took over a
	// second, past a 1 s timeout, and the pause found the sandbox ended.
	const timeout, paused = 5 * time.Second, 1500 * time.Millisecond
	sb := startSpinner(t)
	armed := time.Now()
	sb.Arm(context.Background(), timeout, time.Hour) // as a session idles: its own lifetime
	time.Sleep(300 * time.Millisecond)
	if err := sb.Pause(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sb.Done():
		t.Fatalf("killed while paused: %+v", sb.Wait())
	case <-time.After(paused):
	}
	if err := sb.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	select {
	case <-sb.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the resumed sandbox outlived its timeout by far")
	}
	total, after := time.Since(armed), time.Since(resumed)
	exit := sb.Wait()
	t.Logf("ended %v after the arming, %v after the resume: %+v", total, after, exit)
	if exit.Limit != jail.LimitTimeout || total < timeout+paused-200*time.Millisecond {
		t.Fatalf("ended %v after the arming (%v after the resume), want at least the timeout plus the pause: %+v", total, after, exit)
	}
}

// BenchmarkGVisorPauseResume measures runsc pause and resume of a sandbox
// that spins (the goal: 100 ms to pause, 400 ms to resume).
//
//	CGO_ENABLED=0 go test -run '^$' -bench GVisorPauseResume -benchtime 20x ./internal/gvisor/
func BenchmarkGVisorPauseResume(b *testing.B) {
	sb := startSpinner(b)
	var paused, resumed time.Duration
	for b.Loop() {
		t0 := time.Now()
		if err := sb.Pause(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := sb.Resume(); err != nil {
			b.Fatal(err)
		}
		paused += t1.Sub(t0)
		resumed += time.Since(t1)
	}
	b.ReportMetric(float64(paused.Microseconds())/float64(b.N)/1000, "pause-ms")
	b.ReportMetric(float64(resumed.Microseconds())/float64(b.N)/1000, "resume-ms")
}
