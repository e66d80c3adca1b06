package session

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/fleet"
)

// Snapshots and parks on stand-in sandboxes. A gVisor stand-in saves a
// "memory image" (its manifest); a native one has no state channel, so
// its state cannot be saved here.

var gvisor = Shape{Backend: fleet.GVisor}

// needRoot skips where sessions get no uid of their own: only an owner's
// uid can be kept by a memory image.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("memory images keep a session's own uid, which only root reserves")
	}
}

// TestSnapshotFreezesForTheWorkspaceCopy: a snapshot saves the image,
// then copies the workspace with the sandbox and its commands frozen,
// then lets them run on; a paused session is refused.
func TestSnapshotFreezesForTheWorkspaceCopy(t *testing.T) {
	needRoot(t)
	tab, f := testTable(t, 2)
	se, _ := create(t, tab, Request{Owner: "o"}, gvisor)
	box := f.gvisor.last()
	copied := ""
	to := SnapshotTo{ImageDir: filepath.Join(t.TempDir(), "img"), Workspace: func(dir string) error {
		if !box.Paused() {
			t.Errorf("the workspace is copied while the sandbox runs")
		}
		copied = dir
		return nil
	}}
	c, err := tab.Snapshot(context.Background(), se, to)
	if err != nil {
		t.Fatal(err)
	}
	dir, _, uid, _ := se.Workspace()
	if c.Backend != fleet.GVisor || c.Image == nil || c.Image.UID != uid || copied != dir {
		t.Errorf("capture %+v (uid %d), copied %q; want the image of uid %d and the workspace %q", c, c.Image.UID, copied, uid, dir)
	}
	if box.Paused() {
		t.Errorf("the sandbox stays frozen after the snapshot")
	}
	if _, err := tab.Pause(context.Background(), se, true); err != nil {
		t.Fatal(err)
	}
	if _, err := tab.Snapshot(context.Background(), se, to); !errors.Is(err, ErrPaused) {
		t.Errorf("a snapshot of a paused session: %v, want ErrPaused", err)
	}
}

// TestNativeSnapshotFailureLeavesTheSession: a native state that cannot
// be saved fails the snapshot, and the session goes on.
func TestNativeSnapshotFailureLeavesTheSession(t *testing.T) {
	tab, _ := testTable(t, 1)
	se, _ := create(t, tab, Request{Owner: "o"}, native)
	_, err := tab.Snapshot(context.Background(), se, SnapshotTo{State: &strings.Builder{}, Workspace: func(string) error { return nil }})
	if !errors.Is(err, fleet.ErrStateNotSupported) {
		t.Fatalf("a native snapshot without a state channel: %v", err)
	}
	if o, err := run(t, tab, se, "x", fleet.Limits{}); err != nil || o.Ended {
		t.Errorf("a run after the failed snapshot: %+v, %v", o, err)
	}
}

// TestParkAndBringBack: a park hands keep what brings the session back,
// ends it here and gives back its slot; CreateFrom brings it back under
// its id with its runs, from its image; a failing keep leaves it running.
func TestParkAndBringBack(t *testing.T) {
	needRoot(t)
	tab, f := testTable(t, 1)
	se, _ := create(t, tab, Request{Owner: "o", Labels: map[string]string{"k": "v"}}, gvisor)
	if _, err := run(t, tab, se, "x", fleet.Limits{}); err != nil {
		t.Fatal(err)
	}
	to := SnapshotTo{ImageDir: filepath.Join(t.TempDir(), "img"), Workspace: func(string) error { return nil }}
	refused := errors.New("store full")
	if err := tab.Park(context.Background(), se, to, false, func(Parked) error { return refused }); !errors.Is(err, refused) {
		t.Fatalf("Park with a failing keep: %v", err)
	}
	if !tab.Has(se.ID()) || f.gvisor.last().Paused() {
		t.Fatalf("a failed park did not leave the session running")
	}
	var p Parked
	if err := tab.Park(context.Background(), se, to, true, func(got Parked) error { p = got; return nil }); err != nil {
		t.Fatal(err)
	}
	if p.ID != se.ID() || p.Owner != "o" || p.Runs != 1 || p.Request.Labels["k"] != "v" || p.Image == nil || p.Cold || p.PausedAt.IsZero() {
		t.Errorf("parked as %+v", p)
	}
	if tab.Has(se.ID()) {
		t.Fatal("the parked session is still in the table")
	}
	inUse(t, f, 0)

	back := p
	from := RestoreFrom{Workspace: func(string, int) error { return nil }, ImageDir: to.ImageDir, Image: p.Image, Back: &back}
	info, lost, err := tab.CreateFrom(context.Background(), p.Request, gvisor, from)
	if err != nil || len(lost) != 0 {
		t.Fatalf("CreateFrom: %v, lost %v", err, lost)
	}
	if info.ID != p.ID || info.Runs != 1 || !info.CreatedAt.Equal(p.Created) || f.images.Load() != 1 {
		t.Errorf("brought back as %+v (%d image starts)", info, f.images.Load())
	}
	if _, _, err := tab.CreateFrom(context.Background(), p.Request, gvisor, from); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "here already") {
		t.Errorf("bringing it back twice: %v, want ErrUnavailable", err)
	}
	if _, _, err := tab.CreateFrom(context.Background(), Request{Owner: "o"}, native, RestoreFrom{Image: p.Image}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("a gVisor image into a native session: %v, want ErrUnavailable", err)
	}
}

// TestParkOfAColdPause: a session paused without memory parks its files
// only, as cold, and comes back with a fresh interpreter.
func TestParkOfAColdPause(t *testing.T) {
	tab, f := testTable(t, 1)
	se, _ := create(t, tab, Request{Owner: "o"}, native)
	if _, err := tab.Pause(context.Background(), se, false); err != nil {
		t.Fatal(err)
	}
	wrote := false
	var p Parked
	to := SnapshotTo{Workspace: func(string) error { wrote = true; return nil }}
	if err := tab.Park(context.Background(), se, to, false, func(got Parked) error { p = got; return nil }); err != nil {
		t.Fatal(err)
	}
	if !wrote || !p.Cold || p.Image != nil || p.PausedAt.IsZero() {
		t.Fatalf("a cold park: wrote %v, parked %+v", wrote, p)
	}
	info, _, err := tab.CreateFrom(context.Background(), p.Request, native, RestoreFrom{Workspace: func(string, int) error { return nil }, Back: &p})
	if err != nil || info.ID != p.ID {
		t.Fatalf("CreateFrom a cold park: %+v, %v", info, err)
	}
	if n := f.native.started.Load(); n != 2 {
		t.Errorf("%d sandboxes started, want 2 (the first, and the fresh one)", n)
	}
}
