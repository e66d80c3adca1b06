package service_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/service"
)

// A session's log says what happened to it, in order: its start, each
// command's start and end, each run's outcome and its stderr (capped,
// whatever the code wrote), its pause and resume. Reads filter and page
// it; another owner cannot read it; a bad level is the caller's error.
func TestSessionLogTellsWhatHappened(t *testing.T) {
	svc := sessionService(t)
	ctx := context.Background()
	id := newSession(t, svc, "alice")
	inSession(t, svc, id, "alice", "import sys\nsys.stderr.write('x' * 200_000 + 'tail')\nraise ValueError('boom')")
	if _, err := svc.RunCommand(ctx, service.CommandRequest{SessionID: id, Owner: "alice", Command: "ls -la /nonexistent"}); err != nil {
		t.Fatal(err)
	}
	logs := pauseResumeAndRead(t, svc, id, service.PauseMode{KeepMemory: true})
	var said []string
	for i, e := range logs {
		said = append(said, e.Level+" "+e.Message[:min(len(e.Message), 40)])
		if i > 0 && e.Time.Before(logs[i-1].Time) {
			t.Errorf("entry %d is older than the one before it", i)
		}
		if len(e.Message) > 1024 {
			t.Errorf("an entry of %d bytes: %.60q", len(e.Message), e.Message)
		}
	}
	t.Logf("the log: %q", said)
	want := []string{
		"info session started",
		"warn stderr: xxxxxxxxxx",
		"warn execute: error",
		"info command started",
		"warn command: error",
		"info session paused: its memory kept",
		"info session resumed from memory",
	}
	got := strings.Join(said, "\n")
	at := 0
	for _, w := range want {
		i := strings.Index(got[at:], w)
		if i < 0 {
			t.Fatalf("the log lacks %q after entry %d:\n%s", w, strings.Count(got[:at], "\n"), got)
		}
		at += i + len(w)
	}
	for _, e := range logs {
		if e.Message == "command started" && e.Fields["command"] != "ls -la /nonexistent" {
			t.Errorf("the command's start names %q", e.Fields["command"])
		}
		if strings.HasPrefix(e.Message, "stderr: ") && !strings.Contains(e.Message, "(200012 bytes)") {
			t.Errorf("200 kB of stderr is kept as %d bytes ending %q", len(e.Message), e.Message[max(0, len(e.Message)-30):])
		}
	}

	warn, err := svc.SessionLogs(ctx, id, "alice", service.LogQuery{MinLevel: "warn"})
	if err != nil || len(warn) < 2 {
		t.Fatalf("warn and above: %v %v", warn, err)
	}
	for _, e := range warn {
		if e.Level != "warn" && e.Level != "error" {
			t.Errorf("a %s entry read at warn and above", e.Level)
		}
	}
	last, err := svc.SessionLogs(ctx, id, "alice", service.LogQuery{Backward: true, Limit: 1})
	if err != nil || len(last) != 1 || last[0].Message != logs[len(logs)-1].Message {
		t.Errorf("the newest entry: %v %v", last, err)
	}
	if after, _ := svc.SessionLogs(ctx, id, "alice", service.LogQuery{Cursor: time.Now().Add(time.Minute)}); len(after) != 0 {
		t.Errorf("entries after a future cursor: %v", after)
	}
	if _, err := svc.SessionLogs(ctx, id, "bob", service.LogQuery{}); !errors.Is(err, service.ErrSessionNotFound) {
		t.Errorf("another owner's read: %v", err)
	}
	if _, err := svc.SessionLogs(ctx, id, "alice", service.LogQuery{MinLevel: "loud"}); !errors.Is(err, service.ErrInvalidRequest) {
		t.Errorf("a bad level: %v", err)
	}
}

// A parked session takes its log back when it returns: what came before
// the park, then its return.
func TestSessionLogSurvivesAPark(t *testing.T) {
	svc := sessionService(t)
	id := newSession(t, svc, "alice")
	inSession(t, svc, id, "alice", "import sys\nsys.stderr.write('before the park')")
	var said []string
	for _, e := range pauseResumeAndRead(t, svc, id, service.PauseMode{KeepMemory: true, Park: true}) {
		said = append(said, e.Message)
	}
	got := strings.Join(said, "\n")
	before, back := strings.Index(got, "stderr: before the park"), strings.LastIndex(got, "session started")
	if before < 0 || back < before || strings.Index(got, "session started") > before {
		t.Errorf("the log after a park:\n%s", got)
	}
}

// pauseResumeAndRead pauses alice's session id as mode says, resumes it,
// and reads its whole log.
func pauseResumeAndRead(t *testing.T, svc *service.Service, id string, mode service.PauseMode) []service.LogEntry {
	t.Helper()
	ctx := context.Background()
	if _, err := svc.PauseSession(ctx, id, "alice", mode); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.ResumeSession(ctx, id, "alice"); err != nil {
		t.Fatal(err)
	}
	logs, err := svc.SessionLogs(ctx, id, "alice", service.LogQuery{})
	if err != nil {
		t.Fatal(err)
	}
	return logs
}
