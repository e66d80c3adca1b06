package service_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/service"
)

// Chain builds run on the service's drain, at most SANDBOX_ENV_MAX_BUILDS
// at once: two chains started together with a limit of one both end
// ready (the second waits for the first instead of having its stage
// refused as busy), a failing plan ends its build at once with its
// reason, and Shutdown waits for the chains still running.
func TestEnvironmentChainBuildsOnTheDrain(t *testing.T) {
	svc := envService(t, envIndex(t), func(c *config.Config) { c.EnvMaxBuilds = 1 })
	ctx := context.Background()
	const owner = "anonymous"
	stage := func(name string) func(string) ([]service.BuildStage, *service.BuildFailure) {
		return func(prefix string) ([]service.BuildStage, *service.BuildFailure) {
			if !strings.HasPrefix(prefix, name+".b") {
				t.Errorf("prefix %q of %s", prefix, name)
			}
			return []service.BuildStage{{Step: "1", What: "pip packages",
				Build: service.EnvironmentBuild{Name: name, Requirements: []string{"envcolor"}}}}, nil
		}
	}
	ids := map[string]string{}
	for _, name := range []string{"chain-a", "chain-b"} {
		id, err := svc.RequestEnvironmentBuild(ctx, name, owner)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := svc.RequestEnvironmentBuild(ctx, name, owner); err != nil {
			t.Fatalf("a second request before the first started: %v", err)
		}
		if st, err := svc.EnvironmentBuildStatus(ctx, name, id, owner, 0, 10); err != nil || st.Status != service.BuildWaiting {
			t.Fatalf("%s before its start: %+v %v", name, st, err)
		}
		if err := svc.StartEnvironmentBuild(ctx, name, id, owner, stage(name)); err != nil {
			t.Fatal(err)
		}
		if err := svc.StartEnvironmentBuild(ctx, name, id, owner, stage(name)); err == nil {
			t.Fatalf("%s started twice", name)
		}
		if _, err := svc.RequestEnvironmentBuild(ctx, name, owner); err == nil {
			t.Fatalf("%s: a request while its build runs", name)
		}
		if _, err := svc.EnvironmentBuildStatus(ctx, name, id, "someone-else", 0, 10); service.ErrorKind(err) != service.KindNotFound {
			t.Fatalf("another owner reads %s's build: %v", name, err)
		}
		ids[name] = id
	}
	// A plan that fails ends its build with the plan's reason.
	id, err := svc.RequestEnvironmentBuild(ctx, "chain-c", owner)
	if err != nil {
		t.Fatal(err)
	}
	refuse := func(string) ([]service.BuildStage, *service.BuildFailure) {
		return nil, &service.BuildFailure{Step: "2", Message: "no such step"}
	}
	if err := svc.StartEnvironmentBuild(ctx, "chain-c", id, owner, refuse); err != nil {
		t.Fatal(err)
	}
	if st, _ := svc.EnvironmentBuildStatus(ctx, "chain-c", id, owner, 0, 10); st.Status != service.BuildFailed || st.Failure == nil || st.Failure.Step != "2" {
		t.Fatalf("a refused plan: %+v", st)
	}
	// Shutdown waits for both chains.
	sctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := svc.Shutdown(sctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	for name, id := range ids {
		st, err := svc.EnvironmentBuildStatus(ctx, name, id, owner, 0, 100)
		if err != nil || st.Status != service.BuildReady {
			t.Errorf("%s after shutdown: %v %+v", name, err, st)
		}
		if n := len(st.Logs); n == 0 || !strings.Contains(st.Logs[0].Message, "stage 1 of 1: pip packages into environment "+name) ||
			!strings.Contains(st.Logs[n-1].Message, "is ready") {
			t.Errorf("%s's log: %+v", name, st.Logs)
		}
	}
}

// Only operators request and start chain builds.
func TestEnvironmentChainBuildOperatorsOnly(t *testing.T) {
	svc := envService(t, envIndex(t), func(c *config.Config) { c.OperatorKeys = []string{"alice"} })
	bob := service.WithCaller(context.Background(), service.Caller{Key: "bob", Surface: service.SurfaceE2B, RemoteAddr: "10.0.0.9:5000"})
	if _, err := svc.RequestEnvironmentBuild(bob, "x", "bob"); service.ErrorKind(err) != service.KindForbidden {
		t.Errorf("request: %v", err)
	}
	if err := svc.StartEnvironmentBuild(bob, "x", "00000000-0000-4000-8000-000000000000", "bob", nil); service.ErrorKind(err) != service.KindForbidden {
		t.Errorf("start: %v", err)
	}
	if err := svc.RemoveBuiltEnvironment(bob, "x"); service.ErrorKind(err) != service.KindForbidden {
		t.Errorf("remove: %v", err)
	}
}
