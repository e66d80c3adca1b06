package fleet_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/leftovers"
)

// testBackend is the backend these tests run on: CODECAGE_TEST_BACKEND
// (native by default; gvisor with the pinned runsc).
func testBackend(t *testing.T) string {
	t.Helper()
	switch b := os.Getenv("CODECAGE_TEST_BACKEND"); b {
	case "", fleet.Native:
		return fleet.Native
	case fleet.GVisor:
		if info := fleet.ProbeGVisor("", ""); !info.Available {
			t.Fatalf("CODECAGE_TEST_BACKEND=gvisor, but gVisor does not work here: %s", info.Error)
		}
		return fleet.GVisor
	default:
		t.Fatalf("CODECAGE_TEST_BACKEND=%q: want native or gvisor", b)
		return ""
	}
}

// startSession starts a real session sandbox (the harness) on backend.
func startSession(t *testing.T, backend string) (*fleet.Fleet, *fleet.Lease) {
	t.Helper()
	f := fleet.New(fleet.Config{MaxSandboxes: 2, Starters: map[string]fleet.Starter{
		fleet.Native: fleet.NativeStarter{}, fleet.GVisor: fleet.NewGVisorStarter("", ""),
	}})
	t.Cleanup(f.Close)
	ws := t.TempDir()
	if err := os.Chmod(ws, 0o777); err != nil {
		t.Fatal(err)
	}
	w := fleet.Work{Kind: fleet.Session, Interpreter: "/usr/bin/python3", Workspace: ws, Site: t.TempDir(),
		Limits: fleet.Limits{MemoryBytes: 256 << 20, CPUCores: 2}, Lifetime: time.Minute}
	l, err := f.Start(context.Background(), backend, w.Spec())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return f, l
}

// run runs code in the session and returns its standard output.
func run(t *testing.T, l *fleet.Lease, code string) string {
	t.Helper()
	l.Arm(context.Background(), 30*time.Second, 30*time.Second)
	o := l.Run(fleet.HarnessRequest{Code: code, KeepAlive: true}, nil, nil)
	if o.Reply == nil || o.Ended {
		t.Fatalf("run %q: no reply (exit %+v, stderr %q)", code, o.Exit, o.Stderr)
	}
	l.Arm(context.Background(), time.Minute, time.Minute) // idle: the session's own lifetime
	return o.Stdout
}

// A paused session uses no CPU, even with a thread of its code spinning,
// and answers its next request with the variables it had.
func TestPausedSessionKeepsItsStateAndUsesNoCPU(t *testing.T) {
	backend := testBackend(t)
	_, l := startSession(t, backend)
	run(t, l, "x = 41\nimport threading\ndef spin():\n    while True: pass\nthreading.Thread(target=spin, daemon=True).start()")
	// The spinner runs (the host is shared: it gets what it gets), or the
	// measure below would prove nothing.
	b0, running := l.CPUUsage(), time.Now()
	for l.CPUUsage()-b0 < 30*time.Millisecond {
		if time.Since(running) > 10*time.Second {
			t.Fatalf("the spinning thread used only %v of CPU in 10 s", l.CPUUsage()-b0)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("%s: running, 30 ms of CPU used within %v", backend, time.Since(running))
	if err := l.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := l.Pause(); err != nil || !l.Paused() {
		t.Fatalf("a second Pause: %v (paused %v)", err, l.Paused())
	}
	c0 := l.CPUUsage() // the cgroup's count, read on the host
	time.Sleep(300 * time.Millisecond)
	c1 := l.CPUUsage()
	t.Logf("%s: paused 300 ms, CPU +%v", backend, c1-c0)
	// Natively nothing at all; under gVisor its kernel may tick.
	if c1-c0 > 15*time.Millisecond || (backend == fleet.Native && c1 != c0) {
		t.Errorf("the paused session used %v of CPU in 300 ms", c1-c0)
	}
	if err := l.Resume(); err != nil {
		t.Fatal(err)
	}
	// The host is shared: the spinner gets what it gets, but it runs.
	resumed := time.Now()
	for l.CPUUsage()-c1 < 30*time.Millisecond {
		if time.Since(resumed) > 5*time.Second {
			t.Fatalf("resumed, the spinning thread used only %v in 5 s", l.CPUUsage()-c1)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("%s: resumed, 30 ms of CPU used within %v", backend, time.Since(resumed))
	if out := run(t, l, "print(x + 1)"); out != "42\n" {
		t.Fatalf("after the resume: %q", out)
	}
	// A request to a paused session resumes it rather than hanging.
	if err := l.Pause(); err != nil {
		t.Fatal(err)
	}
	if out := run(t, l, "x += 1\nprint(x)"); out != "42\n" || l.Paused() {
		t.Fatalf("a run on the paused session: %q (paused %v)", out, l.Paused())
	}
}

// Closing a paused session leaves no process and no cgroup behind, and a
// resume then says the sandbox has ended.
func TestClosingAPausedSessionLeavesNothing(t *testing.T) {
	backend := testBackend(t)
	_, l := startSession(t, backend)
	run(t, l, "import subprocess\np = subprocess.Popen(['sleep', '600'])")
	if err := l.Pause(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { l.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("closing a paused session did not end it within 20 s")
	}
	if err := l.Resume(); !errors.Is(err, fleet.ErrEnded) {
		t.Errorf("Resume of a closed session: %v, want ErrEnded", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		procs, cgs := live(leftovers.SandboxProcesses()), leftovers.Cgroups(os.Getpid())
		if len(procs) == 0 && len(cgs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("left behind: processes %v, cgroups %v", procs, cgs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// live drops zombies (dead; reaped by the host's init when it will).
func live(procs []string) []string {
	var out []string
	for _, p := range procs {
		pid, _, _ := strings.Cut(p, " ")
		if b, err := os.ReadFile("/proc/" + pid + "/status"); err == nil && !strings.Contains(string(b), "State:\tZ") {
			out = append(out, p)
		}
	}
	return out
}

// A zygote's cell (a pooled, stateless run) cannot be paused: a clear
// error, and the run goes on.
func TestPauseOfACellIsRefused(t *testing.T) {
	lim := fleet.Limits{Timeout: time.Minute, CPUTime: 10 * time.Second, MemoryBytes: 256 << 20, OutputBytes: 1 << 20}
	spec := fleet.Work{Kind: fleet.Pooled, Interpreter: "/usr/bin/python3", Limits: lim}.Spec()
	f := fleet.New(fleet.Config{MaxSandboxes: 2, Interpreter: "/usr/bin/python3",
		Starters: map[string]fleet.Starter{fleet.Native: fleet.NativeStarter{}},
		Classes:  []fleet.ClassSpec{{Backend: fleet.Native, Name: "basic", Ready: 1, Spec: spec, Zygote: true}}})
	defer f.Close()
	l, ok, err := f.Take(context.Background(), fleet.Native, "basic", lim)
	if !ok || err != nil {
		t.Fatalf("Take: %v %v", ok, err)
	}
	defer l.Release()
	if err := l.Pause(); !errors.Is(err, fleet.ErrCannotPause) || !strings.Contains(err.Error(), "cell") {
		t.Fatalf("Pause of a cell: %v", err)
	}
	if o := l.Run(fleet.HarnessRequest{Code: "print(6 * 7)"}, nil, nil); o.Stdout != "42\n" {
		t.Fatalf("the cell's run after a refused Pause: %q %+v", o.Stdout, o.Exit)
	}
}

// A paused sandbox keeps its slot of the budget; released, it would never
// end on its own (its limits are held): Release ends it and the slot
// comes back.
func TestReleasingAPausedSandboxFreesItsSlot(t *testing.T) {
	backend := testBackend(t)
	f, l := startSession(t, backend)
	run(t, l, "x = 1")
	if err := l.Pause(); err != nil {
		t.Fatal(err)
	}
	if got := f.Budget().InUse; got != 1 {
		t.Fatalf("a paused sandbox holds %d slots, want 1", got)
	}
	l.Release()
	select {
	case <-l.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("a released paused sandbox did not end")
	}
	deadline := time.Now().Add(5 * time.Second)
	for f.Budget().InUse != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the slot of a released paused sandbox was not freed: %+v", f.Budget())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
