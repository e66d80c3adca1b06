package commands

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/fleet"
)

// While one environment's programs are being resolved (here: for as long
// as the test says), another environment's are served, the environment
// being resolved can be forgotten (env rm), and a second command in it
// waits only as long as its context; then the one resolution serves its
// commands, and a failed one is not kept.
func TestEnvProgramCacheHoldsNoLockAcrossResolution(t *testing.T) {
	var c envProgramCache
	slow := envstore.Env{Name: "slow", ID: "sha256:slow", RootDir: "/roots/slow"}
	fast := envstore.Env{Name: "fast", ID: "sha256:fast", RootDir: "/roots/fast"}
	release := make(chan struct{})
	started := make(chan struct{})
	slowProgs := &fleet.Programs{Root: slow.RootDir}
	slowDone := make(chan *fleet.Programs, 1)
	go func() {
		p, _ := c.get(context.Background(), slow, func() (*fleet.Programs, error) {
			close(started)
			<-release
			return slowProgs, nil
		})
		slowDone <- p
	}()
	<-started
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()

	within := func(what string, f func()) {
		t.Helper()
		done := make(chan struct{})
		go func() { f(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not return within 10 s while another environment's programs were resolved", what)
		}
	}
	within("another environment's programs", func() {
		p, err := c.get(context.Background(), fast, func() (*fleet.Programs, error) { return &fleet.Programs{Root: fast.RootDir}, nil })
		if err != nil || p.Root != fast.RootDir {
			t.Errorf("the other environment's programs: %+v %v", p, err)
		}
	})
	within("a second command in the environment being resolved, its context ended", func() {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := c.get(ctx, slow, func() (*fleet.Programs, error) {
			t.Error("a second resolution of the same environment started")
			return nil, nil
		})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("the waiting command: %v, want its context's end", err)
		}
	})
	within("forgetting the environment being resolved (env rm)", func() { c.forget(slow.ID) })
	close(release)
	if p := <-slowDone; p != slowProgs {
		t.Fatalf("the resolution returned %+v", p)
	}
	// Forgotten: resolved again; the other one is kept.
	tries := 0
	if _, err := c.get(context.Background(), slow, func() (*fleet.Programs, error) { tries++; return slowProgs, nil }); err != nil || tries != 1 {
		t.Fatalf("a forgotten environment: %v (resolutions %d)", err, tries)
	}
	p, err := c.get(context.Background(), fast, func() (*fleet.Programs, error) {
		t.Error("resolved again though the first resolution is kept")
		return nil, nil
	})
	if err != nil || p.Root != fast.RootDir {
		t.Fatalf("the kept programs: %+v %v", p, err)
	}

	// A failure is returned, not kept.
	failed := envstore.Env{Name: "failed", ID: "sha256:failed", RootDir: "/roots/failed"}
	if _, err := c.get(context.Background(), failed, func() (*fleet.Programs, error) { return nil, errors.New("bad root") }); err == nil {
		t.Fatal("a failed resolution succeeded")
	}
	tries = 0
	if _, err := c.get(context.Background(), failed, func() (*fleet.Programs, error) { tries++; return &fleet.Programs{}, nil }); err != nil || tries != 1 {
		t.Fatalf("after a failure the next command did not resolve again: %v (tries %d)", err, tries)
	}
}
