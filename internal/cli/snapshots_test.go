package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/snapstore"
)

// putSnapshot writes a snapshot of owner into the directory store dir as
// the server would (its secret file under state), at the clock now, or
// sealed with secret when given.
func putSnapshot(t *testing.T, state, owner, id string, now time.Time, secret string) {
	t.Helper()
	st, err := snapstore.Open(context.Background(), snapstore.Options{Dir: filepath.Join(state, "snapshots"),
		SecretFile: filepath.Join(state, "snapshot-secret"), Secret: secret, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m := snapstore.Manifest{ID: id, Kind: snapstore.KindSnapshot, Owner: owner, SessionID: "sess-" + id, Backend: "native"}
	if _, err := st.Put(context.Background(), m, snapstore.BlobSource{Name: "workspace", R: strings.NewReader("bytes of " + id)}); err != nil {
		t.Fatalf("put %s: %v", id, err)
	}
}

// onDisk says whether the directory store under state holds an entry id
// (of any owner), judged from the files, not through the store.
func onDisk(t *testing.T, state, id string) bool {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(state, "snapshots", "owners", "*", id))
	if err != nil {
		t.Fatal(err)
	}
	return len(m) > 0
}

// TestSnapshotsCLIGC: `codecage snapshots gc` on the configured directory
// store removes the expired snapshot, keeps the live one and the one that
// fails verification (counted), and says so; on a state directory without
// a store it creates nothing; without the store's secret it refuses.
func TestSnapshotsCLIGC(t *testing.T) {
	state := t.TempDir()
	now := time.Now()
	putSnapshot(t, state, "key:alice", "live", now, "")
	putSnapshot(t, state, "key:alice", "old", now.Add(-30*24*time.Hour), "") // the TTL is 7 days
	putSnapshot(t, state, "key:bob", "foreign", now, strings.Repeat("s", 32))
	for _, id := range []string{"live", "old", "foreign"} {
		if !onDisk(t, state, id) {
			t.Fatalf("%s not written: the test proves nothing", id)
		}
	}

	out := mustCLI(t, "", "snapshots", "gc", "--state-dir", state)
	if !strings.Contains(out, "removed 1 expired snapshots") || !strings.Contains(out, "kept 1 snapshots that fail verification") {
		t.Errorf("gc printed:\n%s", out)
	}
	if onDisk(t, state, "old") {
		t.Error("the expired snapshot is still on disk after gc")
	}
	if !onDisk(t, state, "live") || !onDisk(t, state, "foreign") {
		t.Error("gc removed a live snapshot or one that fails verification")
	}
	// Again, as JSON, through SANDBOX_STATE_DIR: nothing left to remove.
	t.Setenv("SANDBOX_STATE_DIR", state)
	var got map[string]any
	if err := json.Unmarshal([]byte(mustCLI(t, "", "snapshots", "gc", "--json")), &got); err != nil ||
		got["expired"] != float64(0) || got["unverified"] != float64(1) {
		t.Errorf("gc --json: %v %v", got, err)
	}

	// A state directory where no store was ever opened: nothing made.
	empty := filepath.Join(t.TempDir(), "none")
	if code, _, errOut := cli(t, "", "snapshots", "gc", "--state-dir", empty); code != exitOK || !strings.Contains(errOut, "nothing to collect") {
		t.Errorf("gc without a store: exit %d, %q", code, errOut)
	}
	if _, err := os.Stat(empty); !os.IsNotExist(err) {
		t.Errorf("gc created the state directory %s: %v", empty, err)
	}
	// A store whose secret is gone: refused, no new secret made.
	if err := os.Remove(filepath.Join(state, "snapshot-secret")); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := cli(t, "", "snapshots", "gc"); code != exitFailure || !strings.Contains(errOut, "secret") {
		t.Errorf("gc without the secret: exit %d, %q", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(state, "snapshot-secret")); !os.IsNotExist(err) {
		t.Errorf("gc made a new secret: %v", err)
	}
	if !onDisk(t, state, "live") {
		t.Error("a refused gc removed a snapshot")
	}
}
