package service_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/service"
)

// A gVisor snapshot's memory image sits in the store as runsc wrote it
// (no archive, no temporary copy), and a byte changed in it, or a file
// added beside it, is refused before any of it is loaded: no session is
// opened.
func TestSessionSnapshotImageInPlaceAndSealed(t *testing.T) {
	if testBackend(t) != config.IsolationGVisor {
		t.Skip("memory images are gVisor's: run with CODECAGE_TEST_BACKEND=gvisor")
	}
	svc, stateDir := snapshotService(t)
	ctx := context.Background()
	id := newSession(t, svc, "alice")
	inSession(t, svc, id, "alice", "kept = 'in memory'")
	snap, err := svc.SnapshotSession(ctx, id, "alice", "")
	if err != nil {
		t.Fatal(err)
	}
	images := filepath.Join(stateDir, "images")
	if left, _ := os.ReadDir(images); len(left) != 0 {
		t.Fatalf("the snapshot left copies in %s: %v", images, left)
	}
	mem, _ := filepath.Glob(filepath.Join(stateDir, "snapshots", "owners", "*", snap.ID, "blobs", "memory"))
	if len(mem) != 1 {
		t.Fatalf("the memory image's directory in the store: %v", mem)
	}
	pages := filepath.Join(mem[0], "pages.img")
	fi, err := os.Stat(pages)
	if err != nil || fi.Size() == 0 {
		t.Fatalf("runsc's pages in the store: %v", err)
	}
	// Untouched, it starts; nothing is copied out for it.
	info, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "alice", FromSnapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	if out := inSession(t, svc, info.ID, "alice", "print(kept)").Stdout; out != "in memory\n" {
		t.Fatalf("the copy: %q", out)
	}
	if left, _ := os.ReadDir(images); len(left) != 0 {
		t.Fatalf("the start left copies in %s: %v", images, left)
	}
	refused := func(what string) {
		t.Helper()
		before := svc.SessionCount()
		if _, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "alice", FromSnapshot: snap.ID}); !errors.Is(err, service.ErrSnapshotUnusable) {
			t.Fatalf("%s: %v, want ErrSnapshotUnusable", what, err)
		}
		if got := svc.SessionCount(); got != before {
			t.Fatalf("%s: sessions %d before, %d after the refused start", what, before, got)
		}
	}
	extra := filepath.Join(mem[0], "pages_extra.img")
	if err := os.WriteFile(extra, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	refused("a file added to the image")
	os.Remove(extra)
	flip(t, pages, fi.Size()/2)
	refused("a byte of the image's pages changed")
}

func flip(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := []byte{0}
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 1
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}
