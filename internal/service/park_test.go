package service_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/service"
)

// sessionState is what a parked session must bring back: a variable, a
// function, a class and a file.
const (
	sessionStateSetup = "x = 41\ndef inc(v):\n    return v + 1\nclass Box:\n    def __init__(self, v): self.v = v\nb = Box('boxed')\n" +
		"open('kept.txt', 'w').write('kept')"
	sessionStateCheck = "print(inc(x), b.v, open('kept.txt').read())"
	sessionStateWant  = "42 boxed kept\n"
)

// markedUID is the host uid of the workspace holding the file id-<id>
// (a session's workspace is named by the sandbox it began in).
func markedUID(t *testing.T, stateDir, id string) int {
	t.Helper()
	found, _ := filepath.Glob(filepath.Join(stateDir, "sessions", "*", "id-"+id))
	if len(found) != 1 {
		t.Fatalf("the workspace of session %s: %v", id, found)
	}
	return workspaceUIDOf(t, filepath.Dir(found[0]))
}

// sandboxGone waits until nothing runs on the host as uid, and no
// workspace of it is left: the session was parked, not kept.
func sandboxGone(t *testing.T, stateDir string, uid int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, n := hostCPUOfUID(uid)
		left := 0
		dirs, _ := filepath.Glob(filepath.Join(stateDir, "sessions", "*"))
		for _, d := range dirs {
			if fi, err := os.Stat(d); err == nil && int(fi.Sys().(*syscall.Stat_t).Uid) == uid {
				left++
			}
		}
		if n == 0 && left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("uid %d still on the host: %d processes, %d workspaces", uid, n, left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A server that stops parks its sessions in the snapshot store, and the
// next server on the same state directory brings them back, each as it
// was: one paused by its owner (manual resume: it waits for a resume),
// one that was running (it answers the next request, whatever its resume
// choice: no one paused it), one paused without its memory (its files
// only), and one closed while parked. Judged from the host: nothing of
// them runs while they are parked.
func TestSessionParkedAcrossRestart(t *testing.T) {
	stateDir := t.TempDir()
	mk := func() *service.Service {
		return sessionService(t, func(c *config.Config) { c.StateDir = stateDir })
	}
	ctx := context.Background()
	svc := mk()
	open := func(manual bool) string {
		info, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "alice", ManualResume: manual})
		if err != nil {
			t.Fatal(err)
		}
		if res := inSession(t, svc, info.ID, "alice", sessionStateSetup+"\nopen('id-"+info.ID+"', 'w')"); !res.Success {
			t.Fatalf("setup: %+v", res.Error)
		}
		return info.ID
	}
	paused, running, cold, closed := open(true), open(true), open(false), open(false)
	uids := map[string]int{}
	for _, id := range []string{paused, running, cold, closed} {
		uids[id] = markedUID(t, stateDir, id)
	}
	for _, p := range []struct {
		id   string
		keep bool
	}{{paused, true}, {cold, false}, {closed, true}} {
		if _, err := svc.PauseSession(ctx, p.id, "alice", service.PauseMode{KeepMemory: p.keep}); err != nil {
			t.Fatal(err)
		}
	}
	if err := svc.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	for _, uid := range uids {
		sandboxGone(t, stateDir, uid)
	}

	svc = mk()
	list := svc.ListSessions(ctx, "alice")
	states := map[string]string{}
	for _, s := range list {
		states[s.ID] = s.State
	}
	if len(list) != 4 || states[paused] != "paused" || states[running] != "running" || states[cold] != "paused" || states[closed] != "paused" {
		t.Fatalf("the sessions after the restart: %+v", list)
	}
	if got, err := svc.GetSession(ctx, paused, "alice"); err != nil || got.State != "paused" || got.PausedAt == nil || got.AutoResume {
		t.Fatalf("GetSession of a parked session: %+v, %v", got, err)
	}
	if _, err := svc.GetSession(ctx, paused, "bob"); !errors.Is(err, service.ErrSessionNotFound) {
		t.Fatalf("bob sees alice's parked session: %v", err)
	}
	if _, err := svc.PauseSession(ctx, paused, "alice", service.PauseMode{KeepMemory: true}); !errors.Is(err, service.ErrSessionPaused) {
		t.Fatalf("pausing a parked session: %v, want ErrSessionPaused", err)
	}
	// Manual resume: a request is refused until the resume.
	if _, err := svc.Execute(ctx, service.Request{SessionID: paused, Owner: "alice", Code: "x"}); !errors.Is(err, service.ErrSessionPaused) {
		t.Fatalf("a request to a parked session with manual resume: %v, want ErrSessionPaused", err)
	}
	info, resumed, err := svc.ResumeSession(ctx, paused, "alice")
	if err != nil || !resumed || info.ID != paused || info.State != "running" {
		t.Fatalf("ResumeSession: %+v %v %v", info, resumed, err)
	}
	if out := inSession(t, svc, paused, "alice", sessionStateCheck).Stdout; out != sessionStateWant {
		t.Fatalf("the resumed session: %q, want %q", out, sessionStateWant)
	}
	// Parked running: the next request brings it back.
	if out := inSession(t, svc, running, "alice", sessionStateCheck).Stdout; out != sessionStateWant {
		t.Fatalf("the session parked running: %q, want %q", out, sessionStateWant)
	}
	// Paused without memory: its files, a fresh interpreter.
	res := inSession(t, svc, cold, "alice", "print(open('kept.txt').read())\nx")
	if res.Stdout != "kept\n" || res.Error == nil || res.Error.Type != "NameError" {
		t.Fatalf("the session paused without memory: %q %+v", res.Stdout, res.Error)
	}
	if err := svc.CloseSession(ctx, closed, "alice"); err != nil {
		t.Fatalf("closing a parked session: %v", err)
	}
	if _, err := svc.GetSession(ctx, closed, "alice"); !errors.Is(err, service.ErrSessionNotFound) {
		t.Fatalf("a closed parked session: %v", err)
	}
	if list := svc.ListSessions(ctx, "alice"); len(list) != 3 {
		t.Fatalf("after the close: %+v", list)
	}
	// Nothing of them is left in the store: the snapshots' list and the
	// owner's count are empty.
	if snaps, err := svc.ListSnapshots(ctx, "alice", service.SnapshotFilter{}); err != nil || len(snaps) != 0 {
		t.Fatalf("snapshots: %+v %v", snaps, err)
	}
}

// A session paused in memory past SANDBOX_PAUSED_IN_MEMORY_TTL is parked:
// its sandbox ends on the host; the next request brings it back whole.
func TestSessionLongPauseIsParked(t *testing.T) {
	svc, stateDir := snapshotService(t, func(c *config.Config) { c.PausedInMemoryTTL = 300 * time.Millisecond })
	ctx := context.Background()
	id := newSession(t, svc, "alice")
	if res := inSession(t, svc, id, "alice", sessionStateSetup); !res.Success {
		t.Fatalf("setup: %+v", res.Error)
	}
	inSession(t, svc, id, "alice", "open('id-"+id+"', 'w')")
	uid := markedUID(t, stateDir, id)
	if _, err := svc.PauseSession(ctx, id, "alice", service.PauseMode{KeepMemory: true}); err != nil {
		t.Fatal(err)
	}
	sandboxGone(t, stateDir, uid)
	if got, err := svc.GetSession(ctx, id, "alice"); err != nil || got.State != "paused" {
		t.Fatalf("GetSession of the parked session: %+v, %v", got, err)
	}
	if out := inSession(t, svc, id, "alice", sessionStateCheck).Stdout; out != sessionStateWant {
		t.Fatalf("the session brought back: %q, want %q", out, sessionStateWant)
	}
}

// The packages pip_install put in a session come with its snapshot (a
// park writes the same): a session started from it imports them afresh.
func TestSessionSnapshotKeepsInstalledPackages(t *testing.T) {
	wh := wheelhouse(t)
	svc := installService(t, func(c *config.Config) { c.PipFindLinks, c.EnableFilesystem = wh, true })
	ctx := context.Background()
	a, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := svc.PipInstall(ctx, service.InstallRequest{Package: "greet", Version: "1.0", SessionID: a.ID, Owner: "o"}); err != nil || !res.Success {
		t.Fatalf("install: %v %+v", err, res)
	}
	snap, err := svc.SnapshotSession(ctx, a.ID, "o", "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o", FromSnapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	// A fresh import (not one the saved state held) finds the files.
	code := "import importlib, sys\nsys.modules.pop('greet', None)\nimportlib.import_module('greet').VALUE"
	for _, id := range []string{a.ID, b.ID} {
		if r := inSession(t, svc, id, "o", code); !r.Success || string(r.Result) != `"greet 1.0"` {
			t.Fatalf("session %s: %+v %+v", id, r, r.Error)
		}
	}
}

// A pause with park writes the session into the store at once: its
// sandbox ends on the host; it is paused (a request of a session with
// manual resume is refused) until a resume brings it back whole. A
// session paused in memory can be parked too; park needs keep_memory.
func TestSessionParkOnRequest(t *testing.T) {
	svc, stateDir := snapshotService(t)
	ctx := context.Background()
	info, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "alice", ManualResume: true})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	if res := inSession(t, svc, id, "alice", sessionStateSetup+"\nopen('id-"+id+"', 'w')"); !res.Success {
		t.Fatalf("setup: %+v", res.Error)
	}
	uid := markedUID(t, stateDir, id)
	if _, err := svc.PauseSession(ctx, id, "alice", service.PauseMode{Park: true}); !errors.Is(err, service.ErrInvalidRequest) {
		t.Fatalf("park without keep_memory: %v, want ErrInvalidRequest", err)
	}
	got, err := svc.PauseSession(ctx, id, "alice", service.PauseMode{KeepMemory: true, Park: true})
	if err != nil || got.State != "paused" || got.PausedAt == nil {
		t.Fatalf("park: %+v %v", got, err)
	}
	sandboxGone(t, stateDir, uid)
	if _, err := svc.Execute(ctx, service.Request{SessionID: id, Owner: "alice", Code: "x"}); !errors.Is(err, service.ErrSessionPaused) {
		t.Fatalf("a request to a parked session with manual resume: %v", err)
	}
	if _, _, err := svc.ResumeSession(ctx, id, "alice"); err != nil {
		t.Fatal(err)
	}
	if out := inSession(t, svc, id, "alice", sessionStateCheck).Stdout; out != sessionStateWant {
		t.Fatalf("after the park: %q, want %q", out, sessionStateWant)
	}
	// Paused in memory first, then parked.
	if _, err := svc.PauseSession(ctx, id, "alice", service.PauseMode{KeepMemory: true}); err != nil {
		t.Fatal(err)
	}
	if got, err := svc.PauseSession(ctx, id, "alice", service.PauseMode{KeepMemory: true, Park: true}); err != nil || got.State != "paused" {
		t.Fatalf("parking a session paused in memory: %+v %v", got, err)
	}
	if _, _, err := svc.ResumeSession(ctx, id, "alice"); err != nil {
		t.Fatal(err)
	}
	if out := inSession(t, svc, id, "alice", sessionStateCheck).Stdout; out != sessionStateWant {
		t.Fatalf("after the second park: %q", out)
	}
}

// A pandas DataFrame comes back whole from a park and in a session
// started from a snapshot (natively through the pickled globals, under
// gVisor in the memory image).
func TestSessionDataFrameSurvivesParkAndSnapshot(t *testing.T) {
	svc, _ := snapshotService(t, func(c *config.Config) { c.EnableDataScience = true })
	ctx := context.Background()
	info, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "alice", Profiles: []string{"data_science"}})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	setup := "import pandas as pd\ndf = pd.DataFrame({'a': range(100000), 'b': ['x', 'y'] * 50000})"
	// Importing pandas in a session that did not preload it took more
	// than inSession's 10 s at load 27.
	res, err := svc.Execute(ctx, service.Request{SessionID: id, Owner: "alice", Code: setup, Timeout: 60 * time.Second})
	if err != nil || !res.Success {
		t.Fatalf("setup: %v %+v", err, res)
	}
	const check, want = "print(len(df), int(df.a.sum()), df.b.value_counts()['y'])", "100000 4999950000 50000\n"
	if _, err := svc.PauseSession(ctx, id, "alice", service.PauseMode{KeepMemory: true, Park: true}); err != nil {
		t.Fatal(err)
	}
	if out := inSession(t, svc, id, "alice", check).Stdout; out != want {
		t.Fatalf("the DataFrame after a park: %q, want %q", out, want)
	}
	snap, err := svc.SnapshotSession(ctx, id, "alice", "")
	if err != nil {
		t.Fatal(err)
	}
	cp, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "alice", FromSnapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	if out := inSession(t, svc, cp.ID, "alice", check).Stdout; out != want {
		t.Fatalf("the DataFrame in a copy: %q, want %q", out, want)
	}
}
