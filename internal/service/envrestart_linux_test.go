package service_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/service"
)

// An environment's start command is the session's boot, not part of
// what a snapshot, a fork or a park saves: its server ran in a sandbox
// of its own beside the interpreter. Every way a session comes back (a
// session from its snapshot, a fork, a resume of a parked session, a
// resume after a pause without memory) runs it again and waits for the
// ready command: the server answers at once, the first time. Judged from
// the host: one server process per live session, none for a paused or
// parked one, none once all are closed. A start command that fails on
// a resume leaves the session paused, its workspace whole, and the error
// quotes the command's output.
func TestEnvironmentStartCommandRunsAgainWhenTheSessionComesBack(t *testing.T) {
	const port = 8733
	marker := fmt.Sprintf("http.server %d", port)
	svc := startCmdService(t, envstore.Env{Name: "web-again",
		StartCmd: fmt.Sprintf("if [ -e broken ]; then echo refusing to boot >&2; exit 4; fi; exec python3 -m http.server %d --bind 127.0.0.1", port),
		ReadyCmd: fmt.Sprintf(`python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:%d')"`, port)}, nil)
	ctx := context.Background()
	if n := len(processesWith(marker)); n != 0 {
		t.Fatalf("%d processes serve %q before the test: another test's?", n, marker)
	}
	var live []string
	defer func() {
		for _, id := range live {
			_ = svc.CloseSession(ctx, id, "alice")
		}
	}()
	servers := func(what string, want int) {
		t.Helper()
		// A server ends a moment after its session pauses or closes.
		deadline := time.Now().Add(10 * time.Second)
		for {
			procs := processesWith(marker)
			if len(procs) == want {
				for pid, uid := range procs {
					if !isSandboxUID(uid) {
						t.Fatalf("%s: the server's process %d runs as uid %d", what, pid, uid)
					}
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d server processes on the host, want %d", what, len(procs), want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	answers := func(what, id string) {
		t.Helper()
		c, err := svc.OpenPort(ctx, service.PortRequest{SessionID: id, Owner: "alice", Port: port})
		if err != nil {
			t.Fatalf("%s: the server, at once: %v", what, err)
		}
		if code, body := get(t, c, "/"); code != 200 || !strings.Contains(body, "mark.txt") {
			t.Fatalf("%s: the server answers %d: %s", what, code, body)
		}
	}

	info, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "alice", Environment: "web-again"})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	live = append(live, id)
	if res, err := svc.RunCommand(ctx, service.CommandRequest{SessionID: id, Owner: "alice", Command: "echo here > mark.txt"}); err != nil || !res.Success {
		t.Fatalf("setup: %v %+v", err, res)
	}
	answers("the session", id)
	servers("one session", 1)

	snap, err := svc.SnapshotSession(ctx, id, "alice", "web")
	if err != nil {
		t.Fatal(err)
	}
	fromSnap, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "alice", FromSnapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	live = append(live, fromSnap.ID)
	answers("a session from its snapshot", fromSnap.ID)
	servers("the session and its snapshot's", 2)

	forks, err := svc.ForkSession(ctx, id, "alice", 1, 0)
	if err != nil || len(forks) != 1 || forks[0].Session == nil {
		t.Fatalf("fork: %+v %v", forks, err)
	}
	live = append(live, forks[0].Session.ID)
	answers("its fork", forks[0].Session.ID)
	servers("with the fork", 3)

	if _, err := svc.PauseSession(ctx, id, "alice", service.PauseMode{KeepMemory: true, Park: true}); err != nil {
		t.Fatal(err)
	}
	servers("the first parked", 2)
	if _, _, err := svc.ResumeSession(ctx, id, "alice"); err != nil {
		t.Fatal(err)
	}
	answers("after a park", id)
	servers("the parked one back", 3)

	if _, err := svc.PauseSession(ctx, fromSnap.ID, "alice", service.PauseMode{}); err != nil {
		t.Fatal(err)
	}
	servers("one paused without memory", 2)
	if _, _, err := svc.ResumeSession(ctx, fromSnap.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	answers("after a pause without memory", fromSnap.ID)
	servers("all back", 3)

	// The start command refuses to boot on this workspace now.
	fork := forks[0].Session.ID
	if res, err := svc.RunCommand(ctx, service.CommandRequest{SessionID: fork, Owner: "alice", Command: "touch broken"}); err != nil || !res.Success {
		t.Fatalf("touch: %v %+v", err, res)
	}
	if _, err := svc.PauseSession(ctx, fork, "alice", service.PauseMode{}); err != nil {
		t.Fatal(err)
	}
	_, _, err = svc.ResumeSession(ctx, fork, "alice")
	if service.ErrorKind(err) != service.KindUnavailable || !strings.Contains(err.Error(), "refusing to boot") ||
		!strings.Contains(err.Error(), "status 4") || !strings.Contains(err.Error(), `"web-again"`) {
		t.Fatalf("a resume whose start command fails: %v (kind %s)", err, service.ErrorKind(err))
	}
	if info, err := svc.GetSession(ctx, fork, "alice"); err != nil || info.State != "paused" {
		t.Fatalf("after a failed resume: %+v %v, want it paused", info, err)
	}
	servers("the failed one paused again", 2)

	for _, l := range live {
		if err := svc.CloseSession(ctx, l, "alice"); err != nil {
			t.Fatal(err)
		}
	}
	live = nil
	servers("all closed", 0)
}

// The same under gVisor, where the start command's processes are in
// gVisor's kernel, out of the host's sight: each boot appends a line to
// a workspace file, which a snapshot, a fork (from the memory image)
// and a park keep, so a copy that booted again has one line more.
func TestEnvironmentStartCommandRunsAgainUnderGVisor(t *testing.T) {
	svc := startCmdService(t, envstore.Env{Name: "boots", StartCmd: "echo boot >> boots.txt; exec sleep 600"},
		func(c *config.Config) { c.EnableContainerMode, c.GVisorPoolSize, c.GVisorDataPoolSize = true, 0, 0 })
	ctx := context.Background()
	var live []string
	defer func() {
		for _, id := range live {
			_ = svc.CloseSession(ctx, id, "alice")
		}
	}()
	boots := func(what, id string, want int) {
		t.Helper()
		// Without a ready command a session is handed out once its start
		// command is launched: its line comes a moment later.
		deadline := time.Now().Add(20 * time.Second)
		for {
			res, err := svc.RunCommand(ctx, service.CommandRequest{SessionID: id, Owner: "alice", Command: "cat boots.txt"})
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if n := strings.Count(res.Stdout, "boot\n"); n == want {
				return
			} else if n > want || time.Now().After(deadline) {
				t.Fatalf("%s: booted %d times (%q), want %d", what, n, res.Stdout, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	info, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "alice", Environment: "boots", UseContainer: true})
	if err != nil {
		t.Fatal(err)
	}
	live = append(live, info.ID)
	if info.Backend != "gvisor" {
		t.Fatalf("the session runs on %q", info.Backend)
	}
	boots("the session", info.ID, 1)
	forks, err := svc.ForkSession(ctx, info.ID, "alice", 1, 0)
	if err != nil || len(forks) != 1 || forks[0].Session == nil {
		t.Fatalf("fork: %+v %v", forks, err)
	}
	live = append(live, forks[0].Session.ID)
	boots("its fork", forks[0].Session.ID, 2)
	snap, err := svc.SnapshotSession(ctx, info.ID, "alice", "")
	if err != nil {
		t.Fatal(err)
	}
	copyInfo, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "alice", FromSnapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	live = append(live, copyInfo.ID)
	boots("a session from its snapshot", copyInfo.ID, 2)
	if _, err := svc.PauseSession(ctx, info.ID, "alice", service.PauseMode{KeepMemory: true, Park: true}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.ResumeSession(ctx, info.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	boots("after a park", info.ID, 2)
}
