package httpapi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/service"
)

// The item 3 through REST: code plants a tree 2,000 deep and a
// directory wider than a listing; a write at the bottom and a listing take
// milliseconds, and the listing says it is truncated.
func TestFilesOnAPlantedTreeOverREST(t *testing.T) {
	ts := startServer(t, "", func(c *config.Config) { c.EnableFilesystem = true })
	var se struct {
		ID string `json:"session_id"`
	}
	if resp := ts.call(t, "POST", "/sessions", "", map[string]any{"profile": "filesystem"}, &se); resp.StatusCode != 201 {
		t.Fatalf("create: %d", resp.StatusCode)
	}
	base := "/sessions/" + se.ID
	var r result
	code := "import os\nos.mkdir('w')\nfor i in range(10500): open('w/%d' % i, 'w').close()\nfor i in range(2000): os.mkdir('a'); os.chdir('a')\nprint('planted')"
	ts.call(t, "POST", base+"/execute", "", map[string]any{"code": code, "timeout": 120}, &r)
	if !r.Success || r.Stdout != "planted\n" {
		t.Fatalf("planting: %+v", r)
	}
	deep := strings.Repeat("a/", 2000) + "f"
	start := time.Now()
	var fi struct {
		Path string `json:"path"`
		Size int64  `json:"size"`
	}
	if resp := ts.call(t, "PUT", base+"/files/content", "", map[string]any{"path": deep, "content": "1"}, &fi); resp.StatusCode != 200 || fi.Size != 1 || fi.Path != deep {
		t.Fatalf("write: %d %+v", resp.StatusCode, fi)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a write at depth 2,000 took %v", d)
	}
	var list struct {
		Files     []struct{ Path string } `json:"files"`
		Truncated *bool                   `json:"truncated"`
	}
	start = time.Now()
	ts.call(t, "GET", base+"/files", "", nil, &list)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a listing took %v", d)
	}
	if list.Truncated == nil || !*list.Truncated || len(list.Files) == 0 || len(list.Files) > service.MaxListedFiles {
		t.Fatalf("listing: %d entries, truncated %v", len(list.Files), list.Truncated)
	}
	list.Truncated = nil
	ts.call(t, "GET", base+"/files?path=a/a", "", nil, &list)
	if list.Truncated == nil || !*list.Truncated || len(list.Files) != service.MaxListDepth {
		t.Fatalf("listing the chain: %d entries, truncated %v", len(list.Files), list.Truncated)
	}
	if resp := ts.call(t, "DELETE", base+"/files/content?path=w", "", nil, nil); resp.StatusCode != 204 {
		t.Fatalf("delete: %d", resp.StatusCode)
	}
	list.Truncated = nil
	ts.call(t, "GET", base+"/files?path="+strings.Repeat("a/", 1990), "", nil, &list)
	if list.Truncated == nil || *list.Truncated || len(list.Files) != 11 {
		t.Fatalf("listing the bottom of the chain: %+v", list)
	}
}
