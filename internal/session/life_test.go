package session

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/fleet"
)

// A session's life on stand-in sandboxes: created in a workspace of its
// own, run, described, restarted and dropped, with the budget's slot held
// from start to end.

// TestCreateRunDescribeDrop: a new session is in the table under the id
// NewID gave, with a workspace and a slot; its runs are counted; Drop
// gives back the slot and removes the workspace, its claim and the entry.
func TestCreateRunDescribeDrop(t *testing.T) {
	tab, f := testTable(t, 4)
	se, info := create(t, tab, Request{Owner: "key:alice", Labels: map[string]string{"team": "a"}, Template: "base"}, native)
	if info.ID != "s1" || info.Backend != fleet.Native || info.State != "running" || info.Runs != 0 || info.Home != "/workspace" ||
		info.OnTimeout != "kill" || !info.AutoResume || info.Labels["team"] != "a" || info.Template != "base" {
		t.Fatalf("new session described as %+v", info)
	}
	if info.ExpiresAt.IsZero() || !info.ExpiresAt.After(info.CreatedAt) {
		t.Errorf("ExpiresAt %v is not after CreatedAt %v", info.ExpiresAt, info.CreatedAt)
	}
	dir, site, _, _ := se.Workspace()
	stateDir := tab.cfg.StateDir
	if dir != filepath.Join(stateDir, "sessions", "s1") || !exists(dir) || !exists(site) || !exists(dir+ownerSuffix) {
		t.Fatalf("workspace %q, site %q: want both made under %s with the claim", dir, site, stateDir)
	}
	if se.Tmp() == "" || !exists(se.Tmp()) {
		t.Errorf("a native session has no /tmp of its own: %q", se.Tmp())
	}
	inUse(t, f, 1)

	for i := range 3 {
		o, err := run(t, tab, se, "x = 1", fleet.Limits{Timeout: time.Minute})
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if o.Ended || o.Reply == nil || string(o.Reply.Result) != "42" || !strings.Contains(o.Stdout, "out") {
			t.Fatalf("run %d: %+v", i, o)
		}
	}
	if got := tab.Describe(se); got.Runs != 3 || got.ID != "s1" || got.LastUsed.Before(info.LastUsed) {
		t.Errorf("after 3 runs: %+v", got)
	}
	if l := tab.List("key:alice"); len(l) != 1 || l[0].Runs != 3 {
		t.Errorf("List = %+v", l)
	}

	tab.Drop(se)
	if _, err := tab.Get("s1", "key:alice"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after Drop: %v", err)
	}
	if tab.Has("s1") || tab.Count() != 0 {
		t.Errorf("the dropped session is still in the table")
	}
	// The claim too: a lock file left behind waited for the next start's
	// Reclaim, one per closed session.
	for _, p := range []string{dir, site, se.Tmp(), dir + ownerSuffix} {
		if exists(p) {
			t.Errorf("%s is left after Drop", p)
		}
	}
	inUse(t, f, 0)
	if _, err := run(t, tab, se, "x", fleet.Limits{}); !errors.Is(err, ErrEnded) || !strings.Contains(err.Error(), "closed") {
		t.Errorf("a run in a dropped session: %v, want ErrEnded (closed)", err)
	}
	if _, _, _, err := tab.StartCommand(context.Background(), se); !errors.Is(err, ErrNotFound) {
		t.Errorf("a command in a dropped session: %v, want ErrNotFound", err)
	}
}

// TestHomeAndEnvironmentOfTheRequest: the request's home and variables
// are the session's; Allow adds modules to its import policy and keeps
// them for its snapshots.
func TestHomeAndEnvironmentOfTheRequest(t *testing.T) {
	tab, _ := testTable(t, 2)
	se, info := create(t, tab, Request{Owner: "o", Home: "/home/user", Env: map[string]string{"A": "1"}}, native)
	if info.Home != "/home/user" || se.Home() != "/home/user" || se.Env()["A"] != "1" || se.Request().Owner != "o" || se.Owner() != "o" {
		t.Fatalf("info %+v, home %q, env %v", info, se.Home(), se.Env())
	}
	if se.SandboxUID() <= 0 {
		t.Errorf("SandboxUID = %d for a started session", se.SandboxUID())
	}
	se.Lock()
	se.Allow([]string{"requests", "requests"})
	se.Unlock()
	if n := len(se.installed); n != 1 {
		t.Errorf("installed = %v, want one entry", se.installed)
	}
}

// TestFailedStartLeavesNothing: a session whose sandbox cannot start is
// refused with the service's error and leaves no entry, workspace, claim
// or slot behind.
func TestFailedStartLeavesNothing(t *testing.T) {
	tab, f := testTable(t, 2)
	f.native.fail.Store(true)
	_, err := tab.Create(context.Background(), Request{Owner: "o"}, native)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "no sandbox today") {
		t.Fatalf("Create with a failing backend: %v, want StartError's ErrUnavailable", err)
	}
	if tab.Count() != 0 {
		t.Errorf("Count = %d after a failed start", tab.Count())
	}
	if left := workspaces(t, tab.cfg.StateDir); len(left) != 0 {
		t.Errorf("left in the state directory: %v", left)
	}
	inUse(t, f, 0)
}

// TestInterpreterEndEndsTheSessionUntilRestart: a run whose interpreter
// exits ends the session with the reason; a restart starts a fresh
// interpreter on the same workspace, id and slot.
func TestInterpreterEndEndsTheSessionUntilRestart(t *testing.T) {
	tab, f := testTable(t, 1)
	se, _ := create(t, tab, Request{Owner: "o"}, native)
	dir, _, _, _ := se.Workspace()
	kept := filepath.Join(dir, "kept.txt")
	if err := os.WriteFile(kept, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := run(t, tab, se, codeExit, fleet.Limits{})
	if err != nil || !o.Ended || o.Exit.ExitCode != 3 {
		t.Fatalf("the exiting run: %+v, %v", o, err)
	}
	_, err = run(t, tab, se, "x", fleet.Limits{})
	if !errors.Is(err, ErrEnded) || !strings.Contains(err.Error(), "exited with status 3") {
		t.Fatalf("a run after the end: %v, want ErrEnded with the reason", err)
	}
	if d := tab.Describe(se); d.Ended == "" {
		t.Errorf("Describe after the end: %+v", d)
	}
	before := f.native.started.Load()
	// One slot in the budget: the restart needs none of its own.
	info, err := tab.Restart(context.Background(), se)
	if err != nil || info.ID != se.ID() || info.Ended != "" {
		t.Fatalf("Restart: %+v, %v", info, err)
	}
	if f.native.started.Load() != before+1 {
		t.Errorf("Restart started %d sandboxes, want 1", f.native.started.Load()-before)
	}
	if o, err := run(t, tab, se, "x", fleet.Limits{}); err != nil || o.Ended {
		t.Fatalf("a run after the restart: %+v, %v", o, err)
	}
	if !exists(kept) {
		t.Errorf("the restart lost the workspace's file")
	}
	inUse(t, f, 1)
}

// TestRunTimeoutEndsTheSession: a run past its timeout is killed at the
// timeout limit, which ends the session and says so.
func TestRunTimeoutEndsTheSession(t *testing.T) {
	tab, _ := testTable(t, 1)
	se, _ := create(t, tab, Request{Owner: "o"}, native)
	o, err := run(t, tab, se, codeHang, fleet.Limits{Timeout: 50 * time.Millisecond})
	if err != nil || !o.Ended || o.Exit.Limit != fleet.LimitTimeout {
		t.Fatalf("the hanging run: %+v, %v", o, err)
	}
	_, err = run(t, tab, se, "x", fleet.Limits{})
	if !errors.Is(err, ErrEnded) || !strings.Contains(err.Error(), "killed at the timeout limit") {
		t.Errorf("after the timeout: %v", err)
	}
}

// TestRunCanceledByItsContext: the request's context bounds its run;
// the session it killed is ended (canceled).
func TestRunCanceledByItsContext(t *testing.T) {
	tab, _ := testTable(t, 1)
	se, _ := create(t, tab, Request{Owner: "o"}, native)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	r, err := tab.BeginRun(ctx, se, fleet.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := r.Do(fleet.HarnessRequest{Code: codeHang, KeepAlive: true}, nil, nil)
	r.End()
	if !o.Ended || o.Exit.Limit != fleet.LimitCanceled {
		t.Fatalf("canceled run: %+v", o)
	}
}

// TestLifetimeEndsTheSession: a session with a lifetime ends at it,
// used or not; ExpireAfter moves its end.
func TestLifetimeEndsTheSession(t *testing.T) {
	tab, f := testTable(t, 2)
	se, info := create(t, tab, Request{Owner: "o", Lifetime: time.Hour}, native)
	if d := se.Deadline(); d.IsZero() || !info.ExpiresAt.Equal(d) {
		t.Fatalf("Deadline %v, ExpiresAt %v", d, info.ExpiresAt)
	}
	tab.ExpireAfter(se, 80*time.Millisecond)
	if d := time.Until(tab.Describe(se).ExpiresAt); d > time.Second {
		t.Errorf("ExpiresAt is %v away after ExpireAfter(80ms)", d)
	}
	waitFor(t, "the session's end at its lifetime", func() bool { return !tab.Has(se.ID()) })
	inUse(t, f, 0)
	// Without a lifetime, no deadline: the idle TTL applies.
	se2, _ := create(t, tab, Request{Owner: "o"}, native)
	if !se2.Deadline().IsZero() {
		t.Errorf("Deadline without a lifetime: %v", se2.Deadline())
	}
	tab.ExpireAfter(se2, 0) // no change
	if !se2.Deadline().IsZero() {
		t.Errorf("ExpireAfter(0) set a deadline")
	}
}

// TestReaper: the reaper closes sessions idle past the TTL, and only
// those: not one in a request, one running a command, a paused one, or
// one with a lifetime of its own. A daemon does not keep a session busy.
func TestReaper(t *testing.T) {
	tab, _ := testTable(t, 8, func(c *config.Config) { c.SessionIdleTTL = 50 * time.Millisecond })
	idle, _ := create(t, tab, Request{Owner: "o"}, native)
	busy, _ := create(t, tab, Request{Owner: "o"}, native)
	commanding, _ := create(t, tab, Request{Owner: "o"}, native)
	paused, _ := create(t, tab, Request{Owner: "o"}, native)
	lifetime, _ := create(t, tab, Request{Owner: "o", Lifetime: time.Hour}, native)
	daemon, _ := create(t, tab, Request{Owner: "o"}, native)

	r, err := tab.BeginRun(context.Background(), busy, fleet.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, finishCmd := command(t, tab, commanding, false)
	command(t, tab, daemon, true)
	if _, err := tab.Pause(context.Background(), paused, true); err != nil {
		t.Fatal(err)
	}
	time.Sleep(120 * time.Millisecond)
	tab.reap()
	for _, c := range []struct {
		se   *Session
		kept bool
	}{{idle, false}, {busy, true}, {commanding, true}, {paused, true}, {lifetime, true}, {daemon, false}} {
		if tab.Has(c.se.ID()) != c.kept {
			t.Errorf("session %s: in the table %v after the reap, want %v", c.se.ID(), !c.kept, c.kept)
		}
	}
	r.End()
	finishCmd() // its end is activity: the session idles from now
	tab.reap()
	if !tab.Has(commanding.ID()) {
		t.Errorf("a session whose command just ended was reaped")
	}
	time.Sleep(120 * time.Millisecond)
	tab.reap()
	if tab.Has(busy.ID()) || tab.Has(commanding.ID()) {
		t.Errorf("sessions idle past the TTL after their request and command were kept")
	}
}

// TestReaperStops: Reaper returns when stop is closed.
func TestReaperStops(t *testing.T) {
	tab, _ := testTable(t, 1)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		tab.Reaper(stop)
		close(done)
	}()
	close(stop)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Reaper did not return after stop")
	}
}
