package service

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The service collects its snapshot store on its own: an expired
// snapshot's files are gone from the disk after a collection, a live
// one's stay.
func TestServiceCollectsExpiredSnapshots(t *testing.T) {
	cfg := LeanTestConfig()
	cfg.StateDir, cfg.PoolSize, cfg.EnableFilesystem = t.TempDir(), 0, true
	cfg.SnapshotTTL = time.Second
	svc, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	ctx := context.Background()
	info, err := svc.CreateSession(ctx, SessionRequest{Owner: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	old, err := svc.SnapshotSession(ctx, info.ID, "alice", "old")
	if err != nil {
		t.Fatal(err)
	}
	onDisk := func(id string) bool {
		found, _ := filepath.Glob(filepath.Join(cfg.StateDir, "snapshots", "owners", "*", id))
		return len(found) == 1
	}
	if !onDisk(old.ID) {
		t.Fatalf("snapshot %s is not on the disk", old.ID)
	}
	time.Sleep(1100 * time.Millisecond)
	svc.persist.CollectOnce()
	if onDisk(old.ID) {
		t.Fatalf("the expired snapshot %s is still on the disk after a collection", old.ID)
	}
	if _, err := os.Stat(filepath.Join(cfg.StateDir, "snapshots")); err != nil {
		t.Fatal(err)
	}
}
