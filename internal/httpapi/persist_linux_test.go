package httpapi_test

import (
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/leftovers"
)

// Pause judged from the host: the session's sandbox processes (this test
// process's sandbox uids; the test runs without warm pools, so they are
// the session's) use no CPU while paused, though a thread of its code
// spins.
func TestPausedSessionUsesNoCPUOnTheHost(t *testing.T) {
	ts := startServer(t, twoKeys, noPools)
	s := ts.openSession(t, aliceKey, map[string]any{})
	ts.run(t, aliceKey, s.ID, "x = 41\nimport threading\ndef spin():\n    while True: pass\nthreading.Thread(target=spin, daemon=True).start()")
	if procs := leftovers.SandboxProcesses(); len(procs) == 0 {
		t.Fatal("no sandbox process found on the host for the session")
	}
	// The spinner runs (the host is shared: it gets what it gets), or the
	// measure below would prove nothing.
	waitCPU(t, 30*time.Millisecond, 5*time.Second, "the spinning thread, before the pause")
	if resp := ts.call(t, "POST", "/sessions/"+s.ID+"/pause", aliceKey, nil, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("pause: %d", resp.StatusCode)
	}
	p0 := sandboxCPU(t)
	time.Sleep(500 * time.Millisecond)
	paused := sandboxCPU(t) - p0
	t.Logf("paused 500 ms: CPU +%v", paused)
	if paused > 10*time.Millisecond { // a clock tick of slack: the host's accounting
		t.Fatalf("the paused session used %v of CPU in 500 ms", paused)
	}
	ts.call(t, "POST", "/sessions/"+s.ID+"/resume", aliceKey, nil, nil)
	waitCPU(t, 30*time.Millisecond, 5*time.Second, "the spinning thread, resumed")
	if out := ts.run(t, aliceKey, s.ID, "print(x + 1)"); out != "42\n" {
		t.Fatalf("after the resume: %q", out)
	}
}

// A pause without memory keeps the workspace only: the sandbox ends, and
// the resumed session has the file but a fresh interpreter.
func TestPauseWithoutMemoryKeepsFilesOnly(t *testing.T) {
	ts := startServer(t, twoKeys, noPools)
	s := ts.openSession(t, aliceKey, map[string]any{})
	ts.run(t, aliceKey, s.ID, "z = 5\nopen('kept.txt', 'w').write('kept')")
	var paused sessionInfo
	if resp := ts.call(t, "POST", "/sessions/"+s.ID+"/pause", aliceKey, map[string]any{"keep_memory": false}, &paused); resp.StatusCode != http.StatusOK || paused.State != "paused" {
		t.Fatalf("pause without memory: status %d, %+v", resp.StatusCode, paused)
	}
	waitNoSandboxProcesses(t, 10*time.Second)
	ts.call(t, "POST", "/sessions/"+s.ID+"/resume", aliceKey, nil, nil)
	out := ts.run(t, aliceKey, s.ID, "print(open('kept.txt').read(), 'z' in globals())")
	if out != "kept False\n" {
		t.Fatalf("after a pause without memory: %q", out)
	}
}

// sandboxCPU is the CPU time (user and system) of this process's sandbox
// processes, read from /proc on the host.
func sandboxCPU(t *testing.T) time.Duration {
	t.Helper()
	var ticks int64
	for _, p := range leftovers.SandboxProcesses() {
		pid, _, _ := strings.Cut(p, " ")
		b, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			continue // ended meanwhile
		}
		// Fields after the command's closing parenthesis: state is the
		// first, utime and stime the 12th and 13th.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) < 13 {
			t.Fatalf("/proc/%s/stat: %q", pid, b)
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += u + s
	}
	return time.Duration(ticks) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

// waitNoSandboxProcesses waits until none of this process's sandbox
// processes is left.
func waitNoSandboxProcesses(t *testing.T, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var procs []string
		for _, p := range leftovers.SandboxProcesses() {
			pid, _, _ := strings.Cut(p, " ")
			if b, err := os.ReadFile("/proc/" + pid + "/status"); err == nil && !strings.Contains(string(b), "State:\tZ") {
				procs = append(procs, p) // a zombie is dead, reaped when the host's init will
			}
		}
		if len(procs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox processes left %v after a pause without memory: %v", within, procs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitCPU waits until this process's sandboxes have used d more of CPU.
func waitCPU(t *testing.T, d, within time.Duration, what string) {
	t.Helper()
	c0, start := sandboxCPU(t), time.Now()
	for sandboxCPU(t)-c0 < d {
		if time.Since(start) > within {
			t.Fatalf("%s used only %v of CPU in %v", what, sandboxCPU(t)-c0, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%s: %v of CPU within %v", what, d, time.Since(start).Round(time.Millisecond))
}
