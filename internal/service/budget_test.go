package service_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
)

// SANDBOX_MAX_SANDBOXES is one budget that every kind of sandbox draws
// on, real sandboxes here: a live session holds one of its slots for its
// life (the product's choice: an idle interpreter is memory and processes
// like any other sandbox), so two sessions spend a budget of two, and
// runs, commands and the validator queue for the queue timeout and are
// told busy until a session closes. Idle pooled sandboxes give their slot
// up instead of making anyone wait.
func TestBudgetCountsEveryKindOfSandbox(t *testing.T) {
	cfg := service.LeanTestConfig()
	cfg.MaxSandboxes = 2
	cfg.PoolSize, cfg.DataPoolSize = 1, 0
	cfg.SessionPoolSize, cfg.GVisorSessionPoolSize = 1, 0
	cfg.GVisorPoolSize, cfg.GVisorDataPoolSize = 0, 0
	cfg.QueueTimeout = 300 * time.Millisecond
	backend, class := testBackend(t), policy.Basic
	if backend == config.IsolationGVisor {
		cfg.PoolSize, cfg.GVisorPoolSize, cfg.GVisorSessionPoolSize = 0, 1, 1
		class = "gvisor/" + policy.Basic
	}
	svc := newServiceWith(t, cfg)
	ctx := context.Background()
	waitFor(t, "the pool and the spare session ready", func() bool {
		st := svc.PoolStats()
		return st[class].Ready+st["session/"+backend].Ready == 2
	})
	if b := svc.Budget(); b.Max != 2 || b.InUse != 2 {
		t.Fatalf("budget %+v: the ready sandbox and the spare session hold its 2 slots", b)
	}
	// Both slots are idle: a run still gets one at once.
	if res, err := svc.Execute(ctx, service.Request{Code: "print(1)"}); err != nil || res.Stdout != "1\n" {
		t.Fatalf("run: %v %+v", err, res)
	}
	// The run's sandbox is replaced before the sessions ask: a sandbox
	// still starting cannot give its slot up, and on a loaded host its
	// start outlasts the 300 ms queue timeout.
	waitFor(t, "the pool refilled", func() bool {
		st := svc.PoolStats()
		return st[class].Ready+st["session/"+backend].Ready == 2
	})
	var sessions []string
	for range 2 {
		info, err := svc.CreateSession(ctx, service.SessionRequest{})
		if err != nil {
			t.Fatalf("create session: %v", err)
		}
		sessions = append(sessions, info.ID)
	}
	waitFor(t, "the budget held by the 2 sessions", func() bool {
		st := svc.PoolStats()
		return svc.Budget().InUse == 2 && st[class].Ready == 0 && st["session/"+backend].Ready == 0
	})
	busy := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, service.ErrBusy) {
			t.Fatalf("%s with the budget held by sessions: want busy, got %v", what, err)
		}
	}
	start := time.Now()
	_, err := svc.Execute(ctx, service.Request{Code: "print(1)"})
	busy("execute", err)
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Fatalf("busy after %s, before the queue timeout", d)
	}
	_, err = svc.CreateSession(ctx, service.SessionRequest{})
	busy("a third session", err)
	_, err = svc.Validate(ctx, service.ValidateRequest{Code: "1"})
	busy("validate", err)
	if backend == config.IsolationNative {
		_, err = svc.RunCommand(ctx, service.CommandRequest{Command: "true"})
		busy("a command", err)
	}
	// Work inside the sessions needs no new slot... except a command,
	// which is a sandbox of its own on the session's workspace.
	if res, err := svc.Execute(ctx, service.Request{SessionID: sessions[0], Code: "x = 1\nx"}); err != nil || !res.Success {
		t.Fatalf("in a session: %v %+v", err, res)
	}
	if b := svc.Budget(); b.Busy < 3 || b.InUse != 2 {
		t.Fatalf("budget %+v", b)
	}
	// A request waiting when a session closes gets its slot.
	var wg sync.WaitGroup
	wg.Add(1)
	var queued *service.Result
	go func() {
		defer wg.Done()
		queued, err = svc.Execute(ctx, service.Request{Code: "print(2)", Timeout: 5 * time.Second})
	}()
	waitFor(t, "the queued run", func() bool { return svc.Budget().Waiting == 1 })
	if err := svc.CloseSession(ctx, sessions[0], ""); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err != nil || queued.Stdout != "2\n" {
		t.Fatalf("queued run: %v %+v", err, queued)
	}
	_ = svc.CloseSession(ctx, sessions[1], "")
	waitFor(t, "the pools refilled", func() bool { return svc.Budget().InUse == 2 && svc.Budget().Waiting == 0 })
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
