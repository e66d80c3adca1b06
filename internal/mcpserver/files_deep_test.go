package mcpserver_test

import (
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/service"
)

// list_files on a workspace the code filled wider and deeper than a
// listing: at most MaxListedFiles entries, truncated.
func TestListFilesIsBoundedAndSaysSo(t *testing.T) {
	cs := connect(t, func(c *config.Config) { c.EnableFilesystem = true })
	r := call(t, cs, "create_session", map[string]any{"profile": "filesystem"})
	id, _ := structured(t, r)["session_id"].(string)
	if r.IsError || id == "" {
		t.Fatalf("create_session: %q", text(r))
	}
	r = call(t, cs, "execute_code", map[string]any{"session_id": id, "timeout": 120,
		"code": "import os\nos.mkdir('w')\nfor i in range(10500): open('w/%d' % i, 'w').close()\nfor i in range(2000): os.mkdir('a'); os.chdir('a')\nprint('planted')"})
	if r.IsError || structured(t, r)["stdout"] != "planted\n" {
		t.Fatalf("planting: %q", text(r))
	}
	// Bounded means it stops at the bound, not at the tree's end: the
	// entries and truncation below say so. Its time is logged (a few ms
	// alone, 2.9 s once beside two busy loops); the bound here only
	// catches a walk that never ends.
	start := time.Now()
	r = call(t, cs, "list_files", map[string]any{"session_id": id})
	t.Logf("list_files took %v", time.Since(start))
	if d := time.Since(start); d > time.Minute {
		t.Errorf("list_files took %v", d)
	}
	out := structured(t, r)
	if files, _ := out["files"].([]any); r.IsError || out["truncated"] != true || len(files) == 0 || len(files) > service.MaxListedFiles {
		t.Fatalf("list_files: %d entries, truncated %v (%q)", len(files), out["truncated"], text(r))
	}
	r = call(t, cs, "list_files", map[string]any{"session_id": id, "path": "a/a/a"})
	if out := structured(t, r); out["truncated"] != true || len(out["files"].([]any)) != service.MaxListDepth {
		t.Fatalf("list_files of the chain: %v", out["truncated"])
	}
}
