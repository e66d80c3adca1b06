package e2b_test

import (
	"fmt"
	"testing"
	"time"
)

// envd 0.6.3: a watch created with includeEntry gives each event the
// entry of the file it names, where the file still exists; without it,
// none. The polled form (CreateWatcher, the Python SDK's) keeps the
// choice across polls.
func TestWatchEventsCarryTheirEntry(t *testing.T) {
	srv, _ := newServer(t)
	b := createBox(t, srv, `{}`)
	if status, body := b.envd("/filesystem.Filesystem/MakeDir", `{"path": "d"}`); status != 200 {
		t.Fatalf("MakeDir: %d %v", status, body)
	}
	ids := map[bool]string{}
	for _, with := range []bool{true, false} {
		status, body := b.envd("/filesystem.Filesystem/CreateWatcher", fmt.Sprintf(`{"path": "d", "includeEntry": %t, "allowNetworkMounts": true}`, with))
		id, _ := body["watcherId"].(string)
		if status != 200 || id == "" {
			t.Fatalf("CreateWatcher (includeEntry %t): %d %v", with, status, body)
		}
		ids[with] = id
	}
	b.mustRun("open('d/f.txt', 'w').write('x')")
	for with, id := range ids {
		var write map[string]any
		for deadline := time.Now().Add(10 * time.Second); write == nil && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			status, body := b.envd("/filesystem.Filesystem/GetWatcherEvents", `{"watcherId": "`+id+`"}`)
			if status != 200 {
				t.Fatalf("GetWatcherEvents: %d %v", status, body)
			}
			evs, _ := body["events"].([]any)
			for _, e := range evs {
				if ev, _ := e.(map[string]any); ev["type"] == "EVENT_TYPE_WRITE" && ev["name"] == "f.txt" {
					write = ev
				}
			}
		}
		if write == nil {
			t.Fatalf("includeEntry %t: no write event of f.txt", with)
		}
		entry, _ := write["entry"].(map[string]any)
		switch {
		case !with && entry != nil:
			t.Errorf("an entry without includeEntry: %v", write)
		case with && (entry["path"] != "/home/user/d/f.txt" || entry["name"] != "f.txt" || entry["type"] != "FILE_TYPE_FILE"):
			t.Errorf("the write event's entry: %v", write)
		}
		if status, body := b.envd("/filesystem.Filesystem/RemoveWatcher", `{"watcherId": "`+id+`"}`); status != 200 {
			t.Errorf("RemoveWatcher: %d %v", status, body)
		}
	}
}
