package session

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/fleet"
)

// Pauses on stand-in sandboxes: in memory (the sandbox and its commands'
// frozen, the slot kept) and without (the sandbox ended, the slot given
// back, the workspace kept), then resumed by a request or only by Resume.

// TestPauseInMemoryAndResume: a paused session is described as paused,
// its sandbox and its commands' are frozen, a second pause is refused, a
// request to a manual-resume session is refused with ErrPaused, and
// Resume thaws them all.
func TestPauseInMemoryAndResume(t *testing.T) {
	tab, f := testTable(t, 4)
	se, _ := create(t, tab, Request{Owner: "o", ManualResume: true}, native)
	box := f.native.last()
	_, cmd, _ := command(t, tab, se, false)
	cmdLease, err := f.Start(context.Background(), fleet.Native, fleet.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	defer cmdLease.Close()
	cmd.Attach(cmdLease)
	cmdBox := f.native.last()

	info, err := tab.Pause(context.Background(), se, true)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != "paused" || info.PausedAt == nil || !se.Paused() {
		t.Fatalf("paused session described as %+v", info)
	}
	if !box.Paused() || !cmdBox.Paused() {
		t.Errorf("frozen: interpreter %v, command %v; want both", box.Paused(), cmdBox.Paused())
	}
	if at, ok := se.PausedSince(); !ok || at.IsZero() {
		t.Errorf("PausedSince = %v, %v", at, ok)
	}
	inUse(t, f, 2) // the paused sandbox keeps its slot
	if _, err := tab.Pause(context.Background(), se, true); !errors.Is(err, ErrPaused) {
		t.Errorf("a second pause: %v, want ErrPaused", err)
	}
	if _, err := run(t, tab, se, "x", fleet.Limits{}); !errors.Is(err, ErrPaused) {
		t.Errorf("a run in a manual-resume paused session: %v, want ErrPaused", err)
	}
	if _, err := se.DialPort(context.Background(), 8000); !errors.Is(err, ErrPaused) {
		t.Errorf("DialPort while paused: %v, want ErrPaused", err)
	}

	info, resumed, err := tab.Resume(context.Background(), se)
	if err != nil || !resumed || info.State != "running" || info.PausedAt != nil {
		t.Fatalf("Resume: %+v, %v, %v", info, resumed, err)
	}
	if box.Paused() || cmdBox.Paused() {
		t.Errorf("after Resume: interpreter paused %v, command paused %v", box.Paused(), cmdBox.Paused())
	}
	if _, resumed, err := tab.Resume(context.Background(), se); err != nil || resumed {
		t.Errorf("Resume of a running session: resumed %v, %v", resumed, err)
	}
	if o, err := run(t, tab, se, "x", fleet.Limits{}); err != nil || o.Ended {
		t.Errorf("a run after Resume: %+v, %v", o, err)
	}
}

// TestRequestWakesAPausedSession: without manual resume, the next run,
// command or watch resumes the session.
func TestRequestWakesAPausedSession(t *testing.T) {
	tab, f := testTable(t, 2)
	se, _ := create(t, tab, Request{Owner: "o"}, native)
	box := f.native.last()
	wakes := map[string]func() error{
		"run": func() error { _, err := run(t, tab, se, "x", fleet.Limits{}); return err },
		"command": func() error {
			_, _, done, err := tab.StartCommand(context.Background(), se)
			if err == nil {
				done()
			}
			return err
		},
		"watch": func() error {
			_, done, err := tab.StartWatch(context.Background(), se, 1, func() {})
			if err == nil {
				done()
			}
			return err
		},
	}
	for name, wake := range wakes {
		if _, err := tab.Pause(context.Background(), se, true); err != nil {
			t.Fatal(err)
		}
		if err := wake(); err != nil {
			t.Errorf("%s in a paused session: %v", name, err)
		}
		if se.Paused() || box.Paused() {
			t.Errorf("after a %s the session is still paused", name)
		}
	}
}

// TestPauseWithoutMemory: a pause without memory ends the sandbox and
// the commands, gives back the slot and keeps the workspace; Resume
// starts a fresh sandbox and tells Rebooted, whose error pauses the
// session again.
func TestPauseWithoutMemory(t *testing.T) {
	tab, f := testTable(t, 1)
	var rebooted atomic.Int64
	var refuse atomic.Bool
	tab.opts.Rebooted = func(_ context.Context, se *Session) error {
		rebooted.Add(1)
		if refuse.Load() {
			return errors.New("start command failed")
		}
		return nil
	}
	se, _ := create(t, tab, Request{Owner: "o"}, native)
	dir, _, _, _ := se.Workspace()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, _, _ := command(t, tab, se, false)
	first := f.native.last()
	if _, err := tab.Pause(context.Background(), se, false); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first.Done():
	default:
		t.Errorf("the sandbox still runs after a pause without memory")
	}
	if ctx.Err() == nil {
		t.Errorf("the command's context was not canceled")
	}
	if _, cold := se.PausedSince(); cold {
		t.Errorf("PausedSince says in memory for a cold pause")
	}
	inUse(t, f, 0)
	if !exists(filepath.Join(dir, "f")) {
		t.Fatalf("the workspace went with the sandbox")
	}
	if se.SandboxUID() <= 0 {
		t.Errorf("SandboxUID of a cold-paused session: %d, want its own uid", se.SandboxUID())
	}

	refuse.Store(true)
	if _, _, err := tab.Resume(context.Background(), se); err == nil || !strings.Contains(err.Error(), "start command failed") {
		t.Fatalf("Resume with a failing reboot: %v", err)
	}
	if !se.Paused() {
		t.Errorf("a failed reboot left the session running")
	}
	inUse(t, f, 0)
	refuse.Store(false)
	info, resumed, err := tab.Resume(context.Background(), se)
	if err != nil || !resumed || info.State != "running" {
		t.Fatalf("Resume: %+v, %v, %v", info, resumed, err)
	}
	if rebooted.Load() != 2 || f.native.started.Load() != 3 {
		t.Errorf("rebooted %d times, %d sandboxes started; want 2 and 3", rebooted.Load(), f.native.started.Load())
	}
	if o, err := run(t, tab, se, "x", fleet.Limits{}); err != nil || o.Ended {
		t.Errorf("a run after the resume: %+v, %v", o, err)
	}
}

// TestRestartOfAColdPausedSessionResumesIt: a restart of a session paused
// without memory starts its sandbox again.
func TestRestartOfAColdPausedSessionResumesIt(t *testing.T) {
	tab, _ := testTable(t, 1)
	se, _ := create(t, tab, Request{Owner: "o", ManualResume: true}, native)
	if _, err := tab.Pause(context.Background(), se, false); err != nil {
		t.Fatal(err)
	}
	info, err := tab.Restart(context.Background(), se)
	if err != nil || info.State != "running" {
		t.Fatalf("Restart: %+v, %v", info, err)
	}
}

// TestLifetimeDoesNotRunWhilePaused: a pause stops the lifetime, and a
// resume gives back what was left of it.
func TestLifetimeDoesNotRunWhilePaused(t *testing.T) {
	tab, _ := testTable(t, 1)
	se, _ := create(t, tab, Request{Owner: "o", Lifetime: 150 * time.Millisecond}, native)
	if _, err := tab.Pause(context.Background(), se, true); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if !tab.Has(se.ID()) {
		t.Fatal("a paused session ended at its lifetime")
	}
	if _, _, err := tab.Resume(context.Background(), se); err != nil {
		t.Fatal(err)
	}
	if left := time.Until(se.Deadline()); left <= 0 || left > 2*time.Second {
		t.Errorf("after the resume %v of the lifetime is left, want what was left at the pause (~150ms, at least 1s)", left)
	}
	waitFor(t, "the end of the resumed lifetime", func() bool { return !tab.Has(se.ID()) })
}

// TestTimeoutPauses: a session whose timeout pauses it is paused at its
// lifetime, not ended, and gets the whole lifetime again at its resume.
func TestTimeoutPauses(t *testing.T) {
	tab, f := testTable(t, 1)
	se, _ := create(t, tab, Request{Owner: "o", Lifetime: 60 * time.Millisecond, OnTimeout: "pause"}, native)
	waitFor(t, "the pause at the lifetime", se.Paused)
	if !tab.Has(se.ID()) || !f.native.last().Paused() {
		t.Fatalf("in the table %v, sandbox paused %v; want both", tab.Has(se.ID()), f.native.last().Paused())
	}
	if _, _, err := tab.Resume(context.Background(), se); err != nil {
		t.Fatal(err)
	}
	if left := time.Until(se.Deadline()); left <= 0 {
		t.Errorf("after the resume the deadline is %v ago", -left)
	}
	waitFor(t, "the pause at the second lifetime", se.Paused)

}

// TestTimeoutPausesWithoutMemory: "pause_files" pauses the session at its
// lifetime without its memory: its sandbox ends and gives back its slot.
func TestTimeoutPausesWithoutMemory(t *testing.T) {
	tab, f := testTable(t, 1)
	se, _ := create(t, tab, Request{Owner: "o", Lifetime: 60 * time.Millisecond, OnTimeout: "pause_files"}, native)
	box := f.native.last()
	waitFor(t, "the pause at the lifetime", se.Paused)
	<-box.Done()
	inUse(t, f, 0)
	if !tab.Has(se.ID()) {
		t.Fatal("the session ended instead of pausing")
	}
	if _, err := run(t, tab, se, "x", fleet.Limits{}); err != nil {
		t.Errorf("a run after the pause: %v", err)
	}
}

// TestPauseWaitsForTheRunUpToItsContext: a pause waits for the request
// in progress, and gives up when its context ends first.
func TestPauseWaitsForTheRunUpToItsContext(t *testing.T) {
	tab, _ := testTable(t, 1)
	se, _ := create(t, tab, Request{Owner: "o"}, native)
	r, err := tab.BeginRun(context.Background(), se, fleet.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := tab.Pause(ctx, se, true); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Pause during a run: %v, want the context's end", err)
	}
	if se.Paused() {
		t.Errorf("paused during a run")
	}
	r.End()
	if _, err := tab.Pause(context.Background(), se, true); err != nil {
		t.Errorf("Pause after the run: %v", err)
	}
}
