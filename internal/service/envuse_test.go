package service

import (
	"context"
	"os"
	"slices"
	"testing"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/pipfixture"
)

// A removed environment whose sandboxes still run keeps its layer through
// a collection (the collection waits and says for what); once the last
// use ends, the next collection frees it.
func TestEnvironmentInUseSurvivesCollection(t *testing.T) {
	wh := t.TempDir()
	if _, err := pipfixture.Wheel(wh, "usedpkg", "1.0", pipfixture.WheelOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := config.DefaultConfig()
	cfg.PoolSize, cfg.DataPoolSize, cfg.SessionPoolSize = 0, 0, 0
	cfg.MachinePoolSize = 0
	cfg.StateDir = t.TempDir()
	cfg.PipFindLinks = wh
	s, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	e, err := s.BuildEnvironment(ctx, EnvironmentBuild{Name: "used", Requirements: []string{"usedpkg"}})
	if err != nil {
		t.Fatal(err)
	}
	got, release, err := s.envs.Use("used")
	if err != nil || got.ID != e.ID {
		t.Fatalf("use: %v %+v", err, got)
	}
	if err := s.RemoveEnvironment(ctx, "used"); err != nil {
		t.Fatal(err)
	}
	r, err := s.CollectEnvironments(ctx)
	if err != nil || r.Layers != 0 || !slices.Equal(r.Deferred, []string{e.ID}) {
		t.Fatalf("gc while in use: %v %+v", err, r)
	}
	if _, err := os.Stat(e.LayerDir); err != nil {
		t.Fatalf("the layer of a running sandbox went: %v", err)
	}
	second := s.envs.InUse(e.ID)
	release()
	release() // a second call does nothing
	if n := s.envs.Uses(e.ID); n != 1 {
		t.Fatalf("uses after one release of two: %d", n)
	}
	second()
	r, err = s.CollectEnvironments(ctx)
	if err != nil || r.Layers != 1 || len(r.Deferred) != 0 {
		t.Fatalf("gc after the last use: %v %+v", err, r)
	}
	if _, err := os.Stat(e.LayerDir); !os.IsNotExist(err) {
		t.Errorf("the layer is still there: %v", err)
	}
}
