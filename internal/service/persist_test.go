package service_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/leftovers"
	"github.com/codecage/codecage/internal/service"
)

// hostCPUOfUID is the CPU time (clock ticks) the host's processes running
// as uid have used: a native session's sandbox, judged from the host.
func hostCPUOfUID(uid int) (ticks int64, procs int) {
	for _, p := range leftovers.HostProcesses() {
		if p.UID() != uid {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.PID), "stat"))
		if err != nil {
			continue
		}
		// The fields after the command's closing parenthesis: utime is
		// the 12th of them, stime the 13th.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 12 {
			u, _ := strconv.ParseInt(f[11], 10, 64)
			s, _ := strconv.ParseInt(f[12], 10, 64)
			ticks += u + s
			procs++
		}
	}
	return ticks, procs
}

// workspaceUID is the host uid the session's files belong to.
func workspaceUID(t *testing.T, stateDir, id string) int {
	t.Helper()
	return workspaceUIDOf(t, filepath.Join(stateDir, "sessions", id))
}

// workspaceUIDOf is the host uid directory dir belongs to.
func workspaceUIDOf(t *testing.T, dir string) int {
	t.Helper()
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	return int(fi.Sys().(*syscall.Stat_t).Uid)
}

// A paused session keeps its variables, its threads and its files, and
// runs nothing: natively its processes use no CPU on the host while it is
// paused (a thread of it spins). A resume, or the next request, lets it
// run on. A second pause is refused.
func TestSessionPauseKeepsStateAndStopsIt(t *testing.T) {
	var stateDir string
	svc := sessionService(t, func(c *config.Config) { stateDir = c.StateDir })
	ctx := context.Background()
	id := newSession(t, svc, "alice")
	res := inSession(t, svc, id, "alice", "x = 41\nopen('kept.txt', 'w').write('kept')\nimport threading\n"+
		"def spin():\n    while True: pass\nthreading.Thread(target=spin, daemon=True).start()")
	if !res.Success {
		t.Fatalf("setup: %+v", res)
	}
	info, err := svc.PauseSession(ctx, id, "alice", service.PauseMode{KeepMemory: true})
	if err != nil || info.State != "paused" || info.PausedAt == nil {
		t.Fatalf("PauseSession: %+v, %v", info, err)
	}
	if _, err := svc.PauseSession(ctx, id, "alice", service.PauseMode{KeepMemory: true}); !errors.Is(err, service.ErrSessionPaused) {
		t.Fatalf("a second pause: %v, want ErrSessionPaused", err)
	}
	if got, _ := svc.GetSession(ctx, id, "alice"); got == nil || got.State != "paused" {
		t.Fatalf("GetSession of a paused session: %+v", got)
	}
	if testBackend(t) == config.IsolationNative {
		uid := workspaceUID(t, stateDir, id)
		c0, n := hostCPUOfUID(uid)
		time.Sleep(500 * time.Millisecond)
		c1, _ := hostCPUOfUID(uid)
		if n == 0 || c1 != c0 {
			t.Fatalf("paused, the session's %d processes (uid %d) used %d ticks of CPU in 500 ms", n, uid, c1-c0)
		}
	}
	info, resumed, err := svc.ResumeSession(ctx, id, "alice")
	if err != nil || !resumed || info.State != "running" {
		t.Fatalf("ResumeSession: %+v, %v, %v", info, resumed, err)
	}
	if _, resumed, err := svc.ResumeSession(ctx, id, "alice"); err != nil || resumed {
		t.Fatalf("resuming a running session: resumed %v, %v", resumed, err)
	}
	if out := inSession(t, svc, id, "alice", "print(x + 1, open('kept.txt').read(), threading.active_count())").Stdout; out != "42 kept 2\n" {
		t.Fatalf("after the resume: %q", out)
	}
	// The next request resumes a paused session (auto-resume, the default).
	if _, err := svc.PauseSession(ctx, id, "alice", service.PauseMode{KeepMemory: true}); err != nil {
		t.Fatal(err)
	}
	if out := inSession(t, svc, id, "alice", "x += 1\nprint(x)").Stdout; out != "42\n" {
		t.Fatalf("a request to the paused session: %q", out)
	}
	if got, _ := svc.GetSession(ctx, id, "alice"); got.State != "running" {
		t.Fatalf("after a request resumed it: %+v", got)
	}
}

// A session with manual resume answers a request with ErrSessionPaused
// until it is resumed; another owner cannot pause or resume it.
func TestSessionPauseManualResumeAndOwners(t *testing.T) {
	svc := sessionService(t)
	ctx := context.Background()
	info, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "alice", ManualResume: true})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	inSession(t, svc, id, "alice", "y = 7")
	if _, err := svc.PauseSession(ctx, id, "bob", service.PauseMode{KeepMemory: true}); !errors.Is(err, service.ErrSessionNotFound) {
		t.Fatalf("bob pausing alice's session: %v", err)
	}
	if _, err := svc.PauseSession(ctx, id, "alice", service.PauseMode{KeepMemory: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Execute(ctx, service.Request{SessionID: id, Owner: "alice", Code: "print(y)", Timeout: 10 * time.Second}); !errors.Is(err, service.ErrSessionPaused) {
		t.Fatalf("a request to a paused session with manual resume: %v, want ErrSessionPaused", err)
	}
	if _, _, err := svc.ResumeSession(ctx, id, "bob"); !errors.Is(err, service.ErrSessionNotFound) {
		t.Fatalf("bob resuming alice's session: %v", err)
	}
	if _, _, err := svc.ResumeSession(ctx, id, "alice"); err != nil {
		t.Fatal(err)
	}
	if out := inSession(t, svc, id, "alice", "print(y)").Stdout; out != "7\n" {
		t.Fatalf("after the resume: %q", out)
	}
}

// A pause that keeps no memory ends the sandbox and frees its slot; the
// workspace stays, and a resume starts a fresh interpreter on it.
func TestSessionPauseWithoutMemoryFreesTheSlot(t *testing.T) {
	svc := sessionService(t, func(c *config.Config) { // nothing kept ready refills the budget
		c.SessionPoolSize, c.GVisorSessionPoolSize, c.GVisorPoolSize, c.GVisorDataPoolSize, c.DataPoolSize = 0, 0, 0, 0, 0
		c.MachinePoolSize = 0
	})
	ctx := context.Background()
	id := newSession(t, svc, "alice")
	inSession(t, svc, id, "alice", "z = 1\nopen('f.txt', 'w').write('on disk')")
	before := svc.Budget().InUse
	if _, err := svc.PauseSession(ctx, id, "alice", service.PauseMode{KeepMemory: false}); err != nil {
		t.Fatal(err)
	}
	// The slot comes back once the sandbox is gone (gVisor's takes a moment).
	for end := time.Now().Add(5 * time.Second); svc.Budget().InUse != before-1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("sandboxes in use: %d before the pause, %d 5 s after; want one fewer", before, svc.Budget().InUse)
		}
	}
	if _, _, err := svc.ResumeSession(ctx, id, "alice"); err != nil {
		t.Fatal(err)
	}
	out := inSession(t, svc, id, "alice", "print(open('f.txt').read(), 'z' in globals())").Stdout
	if out != "on disk False\n" {
		t.Fatalf("after a resume without memory: %q", out)
	}
	// A restart of such a paused session starts its fresh interpreter.
	if _, err := svc.PauseSession(ctx, id, "alice", service.PauseMode{KeepMemory: false}); err != nil {
		t.Fatal(err)
	}
	info, err := svc.RestartSession(ctx, id, "alice")
	if err != nil || info.State != "running" {
		t.Fatalf("RestartSession of a paused session: %+v, %v", info, err)
	}
	if out := inSession(t, svc, id, "alice", "print(open('f.txt').read())").Stdout; out != "on disk\n" {
		t.Fatalf("after the restart: %q", out)
	}
}

// waitPausedAtTimeout waits for alice's session id, whose 2 s lifetime
// ends in a pause, to be paused, not ended.
func waitPausedAtTimeout(t *testing.T, svc *service.Service, id string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := svc.GetSession(context.Background(), id, "alice")
		if err != nil {
			t.Fatalf("the session ended instead of pausing: %v", err)
		}
		if got.State == "paused" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not paused 10 s after a 2 s lifetime: %+v", got)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A session whose lifetime ends in a pause (E2B's autoPause) is paused at
// its deadline, not closed, and answers again after a resume.
func TestSessionOnTimeoutPause(t *testing.T) {
	svc := sessionService(t)
	ctx := context.Background()
	info, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "alice", OnTimeout: "pause", ManualResume: true, Lifetime: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	inSession(t, svc, info.ID, "alice", "w = 'still here'")
	waitPausedAtTimeout(t, svc, info.ID)
	resumed, _, err := svc.ResumeSession(ctx, info.ID, "alice")
	if err != nil {
		t.Fatal(err)
	}
	// Paused because its lifetime ran out, it gets that lifetime again.
	if left := time.Until(resumed.ExpiresAt); left < 1500*time.Millisecond {
		t.Fatalf("resumed after its timeout pause, it has %v left of a 2 s lifetime", left)
	}
	if out := inSession(t, svc, info.ID, "alice", "print(w)").Stdout; out != "still here\n" {
		t.Fatalf("after the resume: %q", out)
	}
}

// A session whose lifetime ends in a pause without memory (E2B's
// autoPauseMemory false) is paused at its deadline with its sandbox ended:
// from the host, nothing of it runs; a resume starts a fresh interpreter
// on its files.
func TestSessionOnTimeoutPauseFiles(t *testing.T) {
	svc, stateDir := snapshotService(t)
	ctx := context.Background()
	info, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "alice", OnTimeout: "pause_files", ManualResume: true, Lifetime: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	inSession(t, svc, info.ID, "alice", "w = 'in memory'\nopen('kept.txt', 'w').write('on disk')\nopen('id-"+info.ID+"', 'w')")
	uid := markedUID(t, stateDir, info.ID)
	waitPausedAtTimeout(t, svc, info.ID)
	if _, n := hostCPUOfUID(uid); n != 0 {
		t.Fatalf("paused without memory, %d processes of the session still run on the host", n)
	}
	if _, _, err := svc.ResumeSession(ctx, info.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	res := inSession(t, svc, info.ID, "alice", "print(open('kept.txt').read())\nw")
	if res.Stdout != "on disk\n" || res.Error == nil || res.Error.Type != "NameError" {
		t.Fatalf("after the resume: %q %+v", res.Stdout, res.Error)
	}
}

// snapshotService is a service whose snapshots live under its state dir.
func snapshotService(t *testing.T, mutate ...func(*config.Config)) (*service.Service, string) {
	t.Helper()
	var stateDir string
	svc := sessionService(t, append(mutate, func(c *config.Config) { stateDir = c.StateDir })...)
	return svc, stateDir
}

// A snapshot keeps the session's variables, functions, classes and
// files; the session goes on, and a session started from the snapshot has
// them all, in a workspace of its own: a write in one is not seen in the
// other. Natively a generator cannot be saved and is named; under gVisor
// the memory image keeps it.
func TestSessionSnapshotAndStartFromIt(t *testing.T) {
	svc, stateDir := snapshotService(t)
	ctx := context.Background()
	id := newSession(t, svc, "alice")
	setup := "x = 41\ndef inc(v):\n    return v + 1\nclass Box:\n    def __init__(self, v): self.v = v\nb = Box('boxed')\n" +
		"g = (i for i in range(10))\nnext(g)\nopen('data.txt', 'w').write('saved file')"
	if res := inSession(t, svc, id, "alice", setup); !res.Success {
		t.Fatalf("setup: %+v", res.Error)
	}
	snap, err := svc.SnapshotSession(ctx, id, "alice", "first")
	if err != nil {
		t.Fatalf("SnapshotSession: %v", err)
	}
	if snap.ID == "" || snap.Name != "first" || snap.SessionID != id || snap.SizeBytes <= 0 {
		t.Fatalf("snapshot: %+v", snap)
	}
	gvisor := testBackend(t) == config.IsolationGVisor
	if named := strings.Join(snap.NotSaved, "\n"); gvisor != (named == "") || (!gvisor && !strings.Contains(named, "g ")) {
		t.Fatalf("not saved (gVisor %v): %q", gvisor, snap.NotSaved)
	}
	// The session goes on, unchanged by the snapshot.
	if out := inSession(t, svc, id, "alice", "x += 100\nopen('data.txt', 'w').write('changed')\nprint(x)").Stdout; out != "141\n" {
		t.Fatalf("the session after its snapshot: %q", out)
	}
	info, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "alice", FromSnapshot: snap.ID})
	if err != nil {
		t.Fatalf("CreateSession from the snapshot: %v", err)
	}
	if info.ID == id || info.FromSnapshot != snap.ID {
		t.Fatalf("the copy: %+v", info)
	}
	code := "print(inc(x), b.v, open('data.txt').read())"
	want := "42 boxed saved file\n"
	if gvisor {
		code, want = "print(inc(x), b.v, open('data.txt').read(), next(g))", "42 boxed saved file 1\n"
	}
	if out := inSession(t, svc, info.ID, "alice", code).Stdout; out != want {
		t.Fatalf("the session started from the snapshot: %q, want %q", out, want)
	}
	// Its workspace is its own, on the host too, owned by its sandbox's uid.
	// (Found by its file: a session that came from a spare has the
	// spare's workspace directory.)
	inSession(t, svc, info.ID, "alice", "open('only-in-copy.txt', 'w').write('c')")
	found, _ := filepath.Glob(filepath.Join(stateDir, "sessions", "*", "only-in-copy.txt"))
	if len(found) != 1 {
		t.Fatalf("the copy's file is in %d workspaces: %v", len(found), found)
	}
	if uid := fileUID(t, filepath.Dir(found[0])); uid == 0 {
		t.Fatalf("the copy's workspace belongs to root")
	}
	list, err := svc.ListSnapshots(ctx, "alice", service.SnapshotFilter{})
	if err != nil || len(list) != 1 || list[0].ID != snap.ID {
		t.Fatalf("ListSnapshots: %+v, %v", list, err)
	}
	if list, _ := svc.ListSnapshots(ctx, "bob", service.SnapshotFilter{}); len(list) != 0 {
		t.Fatalf("bob sees alice's snapshots: %+v", list)
	}
	if _, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "bob", FromSnapshot: snap.ID}); !errors.Is(err, service.ErrSnapshotNotFound) {
		t.Fatalf("bob starting from alice's snapshot: %v, want ErrSnapshotNotFound", err)
	}
	if err := svc.DeleteSnapshot(ctx, "bob", snap.ID); !errors.Is(err, service.ErrSnapshotNotFound) {
		t.Fatalf("bob deleting alice's snapshot: %v", err)
	}
	if err := svc.DeleteSnapshot(ctx, "alice", snap.ID); err != nil {
		t.Fatal(err)
	}
	if err := svc.DeleteSnapshot(ctx, "alice", snap.ID); !errors.Is(err, service.ErrSnapshotNotFound) {
		t.Fatalf("deleting it twice: %v", err)
	}
}

// A fork makes live copies of a session now: each has its state and its
// files, and each goes its own way.
func TestSessionFork(t *testing.T) {
	svc, _ := snapshotService(t)
	ctx := context.Background()
	id := newSession(t, svc, "alice")
	inSession(t, svc, id, "alice", "n = 1\nopen('f.txt', 'w').write('parent')")
	forks, err := svc.ForkSession(ctx, id, "alice", 3, 0)
	if err != nil || len(forks) != 3 {
		t.Fatalf("ForkSession: %+v, %v", forks, err)
	}
	seen := map[string]bool{id: true}
	for i, f := range forks {
		if f.Error != nil || f.Session == nil || seen[f.Session.ID] {
			t.Fatalf("copy %d: %+v %+v", i, f.Session, f.Error)
		}
		seen[f.Session.ID] = true
		code := "n += " + strconv.Itoa(10*(i+1)) + "\nopen('f.txt', 'a').write(' " + strconv.Itoa(i) + "')"
		inSession(t, svc, f.Session.ID, "alice", code)
	}
	for i, f := range forks {
		want := strconv.Itoa(1+10*(i+1)) + " parent " + strconv.Itoa(i) + "\n"
		if out := inSession(t, svc, f.Session.ID, "alice", "print(n, open('f.txt').read())").Stdout; out != want {
			t.Fatalf("copy %d: %q, want %q", i, out, want)
		}
	}
	if out := inSession(t, svc, id, "alice", "print(n, open('f.txt').read())").Stdout; out != "1 parent\n" {
		t.Fatalf("the parent after its copies wrote: %q", out)
	}
	if list, _ := svc.ListSnapshots(ctx, "alice", service.SnapshotFilter{}); len(list) != 0 {
		t.Fatalf("a fork left its snapshot behind: %+v", list)
	}
	for _, n := range []int{0, service.MaxForks + 1} {
		if _, err := svc.ForkSession(ctx, id, "alice", n, 0); !errors.Is(err, service.ErrInvalidRequest) {
			t.Fatalf("a fork into %d: %v, want ErrInvalidRequest", n, err)
		}
	}
}

// A snapshot altered in the store is refused before any of it is used
// (no session is opened); one over the owner's count is refused.
func TestSnapshotTamperedOrOverTheLimitIsRefused(t *testing.T) {
	svc, stateDir := snapshotService(t, func(c *config.Config) { c.SnapshotMaxCount = 1 })
	ctx := context.Background()
	id := newSession(t, svc, "alice")
	inSession(t, svc, id, "alice", "secret = 'kept'\nopen('w.txt', 'w').write('workspace')")
	snap, err := svc.SnapshotSession(ctx, id, "alice", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.SnapshotSession(ctx, id, "alice", ""); !errors.Is(err, service.ErrTooLarge) {
		t.Fatalf("a second snapshot over a count of 1: %v, want ErrTooLarge", err)
	}
	blobs, _ := filepath.Glob(filepath.Join(stateDir, "snapshots", "owners", "*", snap.ID, "blobs", "workspace"))
	if len(blobs) != 1 {
		t.Fatalf("the workspace blob on disk: %v", blobs)
	}
	b, err := os.ReadFile(blobs[0])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 1
	if err := os.WriteFile(blobs[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
	before := svc.SessionCount()
	if _, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "alice", FromSnapshot: snap.ID}); !errors.Is(err, service.ErrSnapshotUnusable) {
		t.Fatalf("a tampered snapshot: %v, want ErrSnapshotUnusable", err)
	}
	if got := svc.SessionCount(); got != before {
		t.Fatalf("sessions: %d before, %d after the refused start", before, got)
	}
}

// A session's running command pauses with it (its sandbox is frozen
// too: on the host its processes use no CPU), and goes on after the
// resume to its end; a pause without memory ends it.
func TestSessionPausePausesItsCommands(t *testing.T) {
	native := testBackend(t) == config.IsolationNative
	var stateDir string
	svc := sessionService(t, func(c *config.Config) { stateDir = c.StateDir })
	ctx := context.Background()
	id := newSession(t, svc, "alice")
	uid := workspaceUID(t, stateDir, id)
	done := make(chan *service.CommandResult, 1)
	go func() {
		// It spins for 1.5 s of its own CPU time, which a pause stops, so
		// it cannot end before the pause however slow the host.
		res, err := svc.RunCommand(ctx, service.CommandRequest{SessionID: id, Owner: "alice", Timeout: 60 * time.Second,
			Command: "python3 -c 'import time\nopen(\"spinning.txt\", \"w\").close()\nwhile time.process_time() < 1.5: pass\nopen(\"spun.txt\", \"w\").write(\"done\")'"})
		if err != nil {
			t.Errorf("RunCommand: %v", err)
		}
		done <- res
	}()
	// The spinner runs: its first file is there.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := svc.StatFile(ctx, id, "alice", "spinning.txt"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the spinning command did not start within 30 s")
		}
	}
	if _, err := svc.PauseSession(ctx, id, "alice", service.PauseMode{KeepMemory: true}); err != nil {
		t.Fatalf("pausing a session whose command runs: %v", err)
	}
	// Natively the host shows the command's processes; under gVisor they
	// are its kernel's, and the fleet's tests judge its cgroup.
	c0, n := hostCPUOfUID(uid)
	time.Sleep(700 * time.Millisecond)
	c1, _ := hostCPUOfUID(uid)
	if native && (n == 0 || c1 != c0) {
		t.Fatalf("paused, the session's %d processes (its command's among them) used %d ticks of CPU in 700 ms", n, c1-c0)
	}
	select {
	case res := <-done:
		t.Fatalf("the command ended while its session was paused: %+v", res)
	default:
	}
	if _, _, err := svc.ResumeSession(ctx, id, "alice"); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-done:
		if res == nil || !res.Success {
			t.Fatalf("the command after the resume: %+v", res)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the command did not end within 20 s of the resume")
	}
	if out := inSession(t, svc, id, "alice", "print(open('spun.txt').read())").Stdout; out != "done\n" {
		t.Fatalf("the command's file: %q", out)
	}
}
