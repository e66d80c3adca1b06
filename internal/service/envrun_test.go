package service_test

import (
	"context"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/service"
)

// A run or session names its environment: "" is the host's root, as
// before; a name the operator has not built is refused before anything
// starts, with a message that names it and says where environments come
// from (environment_not_found); a name no environment can have is the
// caller's mistake; a session's runs keep the session's environment.
func TestRunEnvironmentChoice(t *testing.T) {
	svc := newService(t)
	ctx := context.Background()
	if got := mustSucceed(t, run(t, svc, "print(1 + 1)", func(r *service.Request) { r.Environment = "" })); got != "2\n" {
		t.Fatalf("run on the host's root: %s", got)
	}
	_, err := svc.Execute(ctx, service.Request{Code: "1", Environment: "polars-env"})
	if service.ErrorKind(err) != service.KindEnvironmentNotFound || !strings.Contains(err.Error(), `"polars-env"`) || !strings.Contains(err.Error(), "codecage env build") {
		t.Fatalf("run in an unknown environment: %v (kind %s)", err, service.ErrorKind(err))
	}
	_, err = svc.Execute(ctx, service.Request{Code: "1", Environment: "../etc"})
	if service.ErrorKind(err) != service.KindInvalidRequest {
		t.Fatalf("run in environment ../etc: %v (kind %s)", err, service.ErrorKind(err))
	}
	before := len(svc.ListSessions(ctx, ""))
	_, err = svc.CreateSession(ctx, service.SessionRequest{Environment: "polars-env"})
	if service.ErrorKind(err) != service.KindEnvironmentNotFound || !strings.Contains(err.Error(), `"polars-env"`) {
		t.Fatalf("session in an unknown environment: %v (kind %s)", err, service.ErrorKind(err))
	}
	if after := len(svc.ListSessions(ctx, "")); after != before {
		t.Fatalf("a refused session was left open: %d sessions, %d before", after, before)
	}
	for name := range svc.PoolStats() {
		if strings.Contains(name, "@env:") {
			t.Fatalf("a refused environment got a pool: %s", name)
		}
	}

	info, err := svc.CreateSession(ctx, service.SessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.CloseSession(ctx, info.ID, "")
	if info.Environment != "" {
		t.Fatalf("a session on the host's root says environment %q", info.Environment)
	}
	_, err = svc.Execute(ctx, service.Request{Code: "1", SessionID: info.ID, Environment: "polars-env"})
	if service.ErrorKind(err) != service.KindInvalidRequest || !strings.Contains(err.Error(), "environment") {
		t.Fatalf("a session's run in another environment: %v", err)
	}
}
