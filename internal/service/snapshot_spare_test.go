package service_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/pool"
	"github.com/codecage/codecage/internal/service"
)

// A native spare session has the state machinery loaded while it waits
// (so the session it becomes snapshots without importing cloudpickle),
// and a session started from a snapshot of the spares' shape takes a spare
// (no interpreter to boot): it has the snapshot's state and files, in a
// workspace of its own owned by its sandbox's uid, and nothing else.
func TestSessionSnapshotUsesSpares(t *testing.T) {
	if testBackend(t) != config.IsolationNative {
		t.Skip("natively: a gVisor session starts from its memory image")
	}
	svc, stateDir := snapshotService(t, func(c *config.Config) {
		c.AllowedImports = []string{policy.AllImports}
		c.SessionPoolSize = 1 // the spares under test
	})
	ctx := context.Background()
	class := "session/" + testBackend(t)
	waitSpare := func() pool.Stats {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			if st := svc.PoolStats()[class]; st.Ready == 1 {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("no spare session ready: %+v", svc.PoolStats())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	before := waitSpare()
	id := newSession(t, svc, "alice")
	if st := svc.PoolStats()[class]; st.Hits != before.Hits+1 {
		t.Fatalf("the session did not come from the spare: %+v then %+v", before, st)
	}
	res := inSession(t, svc, id, "alice", "import sys\n'cloudpickle' in sys.modules")
	if !res.Success || string(res.Result) != "true" {
		t.Fatalf("a spare session without cloudpickle loaded: %s %+v", res.Result, res.Error)
	}
	mustSucceed(t, inSession(t, svc, id, "alice", "x = 41\nopen('kept.txt', 'w').write('kept')\ng = (i for i in range(3))"))
	snap, err := svc.SnapshotSession(ctx, id, "alice", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.NotSaved) != 1 {
		t.Fatalf("not saved: %q, want the generator named", snap.NotSaved)
	}

	before = waitSpare()
	info, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "alice", FromSnapshot: snap.ID})
	if err != nil {
		t.Fatalf("CreateSession from the snapshot: %v", err)
	}
	if st := svc.PoolStats()[class]; st.Hits != before.Hits+1 {
		t.Fatalf("the restored session did not take the spare: %+v then %+v", before, st)
	}
	if info.FromSnapshot != snap.ID || info.ID == id {
		t.Fatalf("the copy: %+v", info)
	}
	res = inSession(t, svc, info.ID, "alice", "import os\n[x + 1, open('kept.txt').read(), sorted(os.listdir('.')), 'g' in globals()]")
	if !res.Success || string(res.Result) != `[42,"kept",["kept.txt"],false]` {
		t.Fatalf("the session restored into a spare: %s %+v", res.Result, res.Error)
	}
	mustSucceed(t, inSession(t, svc, info.ID, "alice", "open('only-in-copy.txt', 'w').write('c')"))
	// On the host (a spare's workspace is named after the spare): the
	// copy's file is in one workspace alone, with the restored file, both
	// owned by the copy's sandbox's uid.
	found, _ := filepath.Glob(filepath.Join(stateDir, "sessions", "*", "only-in-copy.txt"))
	if len(found) != 1 {
		t.Fatalf("the copy's file is in %d workspaces: %v", len(found), found)
	}
	ws := filepath.Dir(found[0])
	uid := fileUID(t, ws)
	if uid == 0 || fileUID(t, filepath.Join(ws, "kept.txt")) != uid || fileUID(t, found[0]) != uid {
		t.Fatalf("the copy's workspace belongs to uid %d, its restored file to %d, its new file to %d",
			uid, fileUID(t, filepath.Join(ws, "kept.txt")), fileUID(t, found[0]))
	}
}

func fileUID(t *testing.T, path string) int {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return int(fi.Sys().(*syscall.Stat_t).Uid)
}
