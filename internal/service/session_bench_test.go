package service_test

import (
	"context"
	"testing"

	"github.com/codecage/codecage/internal/service"
)

// BenchmarkSessionExecute is one request in a warm session: the session
// table's run path (the run lock, the CPU allowance raised and lowered,
// the limits armed) around the interpreter's answer to x += 1.
func BenchmarkSessionExecute(b *testing.B) {
	svc := newService(b)
	ctx := context.Background()
	info, err := svc.CreateSession(ctx, service.SessionRequest{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := svc.Execute(ctx, service.Request{SessionID: info.ID, Code: "x = 0"}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		res, err := svc.Execute(ctx, service.Request{SessionID: info.ID, Code: "x += 1"})
		if err != nil || !res.Success {
			b.Fatalf("execute: %v %+v", err, res)
		}
	}
}

// BenchmarkSessionCommand is one command of a session, `true`: its
// sandbox built beside the interpreter (on the session's workspace, /tmp
// and network namespace), run and torn down.
func BenchmarkSessionCommand(b *testing.B) {
	svc := newService(b)
	ctx := context.Background()
	info, err := svc.CreateSession(ctx, service.SessionRequest{Servers: true})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		res, err := svc.RunCommand(ctx, service.CommandRequest{SessionID: info.ID, Command: "true"})
		if err != nil || !res.Success {
			b.Fatalf("command: %v %+v", err, res)
		}
	}
}
