package httpapi_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/config"
)

// The REST surface carries what the E2B surface gained: kernels besides
// Python, session metrics, the file API's whole reach and metadata, and
// rich results.

// A session's JavaScript and bash kernels keep their state across calls;
// an unknown language, a kernel the operator did not enable and a kernel
// outside a session are 400s that say why.
func TestSessionExecuteLanguage(t *testing.T) {
	ts := startServer(t, "", func(c *config.Config) { c.Kernels = []string{"javascript", "bash"} })
	var se struct {
		ID string `json:"session_id"`
	}
	ts.call(t, "POST", "/sessions", "", map[string]any{}, &se)
	base := "/sessions/" + se.ID
	var r result
	if resp := ts.call(t, "POST", base+"/execute", "", map[string]any{"code": "let n = 20; function twice(x) { return 2 * x }", "language": "js"}, &r); resp.StatusCode != 200 || !r.Success {
		t.Fatalf("js: %d %+v", resp.StatusCode, r)
	}
	r = result{}
	ts.call(t, "POST", "/execute", "", map[string]any{"code": "twice(n) + 2", "language": "javascript", "session_id": se.ID}, &r)
	if !r.Success || !strings.Contains(string(r.Result), "42") {
		t.Fatalf("js state: %+v", r)
	}
	r = result{}
	ts.call(t, "POST", base+"/execute", "", map[string]any{"code": "X=hello; cd /tmp", "language": "bash"}, &r)
	r = result{}
	ts.call(t, "POST", base+"/execute", "", map[string]any{"code": "echo $X from $(pwd)", "language": "bash"}, &r)
	if !r.Success || r.Stdout != "hello from /tmp\n" {
		t.Fatalf("bash state: %+v", r)
	}
	// Python's interpreter is untouched by the kernels.
	r = result{}
	ts.call(t, "POST", base+"/execute", "", map[string]any{"code": "'n' in dir()"}, &r)
	if string(r.Result) != "false" {
		t.Fatalf("python saw the js variable: %+v", r)
	}
	p := wantProblem(t, ts.call(t, "POST", base+"/execute", "", map[string]any{"code": "1", "language": "cobol"}, nil), 400, "invalid_request")
	if !strings.Contains(p.Detail, "cobol") || !strings.Contains(p.Detail, "javascript") {
		t.Fatalf("unknown language: %q", p.Detail)
	}
	p = wantProblem(t, ts.call(t, "POST", base+"/execute", "", map[string]any{"code": "1", "language": "ts"}, nil), 400, "invalid_request")
	if !strings.Contains(p.Detail, "SANDBOX_KERNELS") {
		t.Fatalf("disabled kernel: %q", p.Detail)
	}
	p = wantProblem(t, ts.call(t, "POST", "/execute", "", map[string]any{"code": "1", "language": "js"}, nil), 400, "invalid_request")
	if !strings.Contains(p.Detail, "session") {
		t.Fatalf("kernel outside a session: %q", p.Detail)
	}
	var info struct {
		Kernels []string `json:"kernels"`
	}
	ts.call(t, "GET", "/info", "", nil, &info)
	if fmt.Sprint(info.Kernels) != "[python javascript bash]" {
		t.Fatalf("info kernels %v", info.Kernels)
	}
}

// Without SANDBOX_KERNELS (and no E2B surface) only Python runs: the
// default stays closed.
func TestSessionExecuteLanguageClosedByDefault(t *testing.T) {
	ts := startServer(t, "", nil)
	var se struct {
		ID string `json:"session_id"`
	}
	ts.call(t, "POST", "/sessions", "", map[string]any{}, &se)
	for _, lang := range []string{"javascript", "typescript", "bash"} {
		p := wantProblem(t, ts.call(t, "POST", "/sessions/"+se.ID+"/execute", "", map[string]any{"code": "1", "language": lang}, nil), 400, "invalid_request")
		if !strings.Contains(p.Detail, "SANDBOX_KERNELS") {
			t.Fatalf("%s: %q", lang, p.Detail)
		}
	}
	var r result
	ts.call(t, "POST", "/sessions/"+se.ID+"/execute", "", map[string]any{"code": "6*7", "language": "python"}, &r)
	if string(r.Result) != "42" {
		t.Fatalf("python: %+v", r)
	}
}

// GET /sessions/{id}/metrics samples the session's sandbox; another key's
// session is not found, as every session route answers it.
func TestSessionMetricsRoute(t *testing.T) {
	ts := startServer(t, twoKeys, nil)
	var se struct {
		ID string `json:"session_id"`
	}
	ts.call(t, "POST", "/sessions", aliceKey, map[string]any{}, &se)
	base := "/sessions/" + se.ID
	ts.call(t, "PUT", base+"/files/content", aliceKey, map[string]any{"path": "big.bin", "content": strings.Repeat("x", 300000)}, nil)
	var m struct {
		CPUCount  int     `json:"cpu_count"`
		CPUPct    float64 `json:"cpu_used_pct"`
		MemUsed   int64   `json:"mem_used"`
		MemTotal  int64   `json:"mem_total"`
		DiskUsed  int64   `json:"disk_used"`
		DiskTotal int64   `json:"disk_total"`
	}
	if resp := ts.call(t, "GET", base+"/metrics", aliceKey, nil, &m); resp.StatusCode != 200 {
		t.Fatalf("metrics: %d", resp.StatusCode)
	}
	if m.CPUCount < 1 || m.CPUPct < 0 || m.CPUPct > 100 || m.MemUsed <= 0 || m.MemUsed > m.MemTotal || m.DiskUsed < 300000 || m.DiskUsed > m.DiskTotal {
		t.Fatalf("metrics %+v", m)
	}
	wantProblem(t, ts.call(t, "GET", base+"/metrics", bobKey, nil, nil), 404, "session_not_found")
	wantProblem(t, ts.call(t, "GET", "/sessions/nosuch/metrics", aliceKey, nil, nil), 404, "session_not_found")
	wantProblem(t, ts.call(t, "GET", base+"/metrics", "", nil, nil), 401, "unauthorized")
}

// The file routes reach /tmp and the read-only system tree, a write keeps
// its metadata (which the code sees as user.e2b.* attributes), and a
// write to the system tree or absurd metadata is refused with why.
func TestFilesReachAndMetadata(t *testing.T) {
	ts := startServer(t, "", func(c *config.Config) { c.EnableFilesystem = true })
	var se struct {
		ID string `json:"session_id"`
	}
	ts.call(t, "POST", "/sessions", "", map[string]any{}, &se)
	base := "/sessions/" + se.ID
	var fi struct {
		Path     string            `json:"path"`
		Metadata map[string]string `json:"metadata"`
	}
	if resp := ts.call(t, "PUT", base+"/files/content", "", map[string]any{"path": "/tmp/in/a.txt", "content": "hi", "metadata": map[string]string{"Owner": "alice", "stage": "raw"}}, &fi); resp.StatusCode != 200 ||
		fi.Metadata["owner"] != "alice" || fi.Metadata["stage"] != "raw" {
		t.Fatalf("write: %d %+v", resp.StatusCode, fi)
	}
	var r result
	ts.call(t, "POST", base+"/execute", "", map[string]any{"code": "import os\n(open('/tmp/in/a.txt').read(), os.getxattr('/tmp/in/a.txt', 'user.e2b.owner').decode())"}, &r)
	if !r.Success || string(r.Result) != `["hi","alice"]` {
		t.Fatalf("code's view: %+v", r)
	}
	var list struct {
		Files []struct {
			Path     string            `json:"path"`
			Metadata map[string]string `json:"metadata"`
		} `json:"files"`
	}
	ts.call(t, "GET", base+"/files?path=/tmp/in", "", nil, &list)
	if len(list.Files) != 1 || list.Files[0].Metadata["stage"] != "raw" {
		t.Fatalf("list: %+v", list)
	}
	var fc struct{ Content string }
	ts.call(t, "GET", base+"/files/content?path=/usr/lib/os-release", "", nil, &fc)
	if !strings.Contains(fc.Content, "ID=") {
		t.Fatalf("system tree: %+v", fc)
	}
	wantProblem(t, ts.call(t, "PUT", base+"/files/content", "", map[string]any{"path": "/usr/evil", "content": "x"}, nil), 403, "permission_denied")
	wantProblem(t, ts.call(t, "DELETE", base+"/files/content?path=/usr/lib/os-release", "", nil, nil), 403, "permission_denied")
	many := map[string]string{}
	for i := range 33 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	for name, md := range map[string]map[string]string{
		"too many keys": many,
		"bad key":       {"a b": "v"},
		"long key":      {strings.Repeat("k", 200): "v"},
		"control value": {"k": "line\nbreak"},
		"too big":       {"k": strings.Repeat("v", 17<<10)},
	} {
		p := wantProblem(t, ts.call(t, "PUT", base+"/files/content", "", map[string]any{"path": "m.txt", "content": "x", "metadata": md}, nil), 400, "invalid_request")
		if !strings.Contains(p.Detail, "metadata") || len(p.Detail) > 400 {
			t.Fatalf("%s: %q", name, p.Detail)
		}
	}
	// A refused write left nothing behind.
	wantProblem(t, ts.call(t, "GET", base+"/files/content?path=m.txt", "", nil, nil), 404, "file_not_found")
}

// display: true returns display() outputs in order, a figure's PNG and
// e2b/chart, and a DataFrame's e2b/data, on POST /execute and the
// session route alike.
func TestExecuteRichResults(t *testing.T) {
	ts := startServer(t, "", func(c *config.Config) { c.EnableDataScience = true })
	var se struct {
		ID string `json:"session_id"`
	}
	ts.call(t, "POST", "/sessions", "", map[string]any{"profile": "data_science"}, &se)
	code := "from IPython.display import display, HTML\nimport matplotlib.pyplot as plt\nimport pandas as pd\n" +
		"display(HTML('<b>first</b>'))\nplt.plot([1, 2], [3, 4])\nplt.title('T')\nplt.show()\npd.DataFrame({'a': [1, 2]})"
	var r struct {
		Success bool              `json:"success"`
		Images  []json.RawMessage `json:"images"`
		Display map[string]string `json:"display"`
		Outputs []struct {
			Data map[string]string `json:"data"`
		} `json:"outputs"`
		Error any `json:"error"`
	}
	ts.call(t, "POST", "/sessions/"+se.ID+"/execute", "", map[string]any{"code": code, "display": true}, &r)
	if !r.Success || len(r.Outputs) != 2 || len(r.Images) != 0 {
		t.Fatalf("rich result: %+v", r)
	}
	if r.Outputs[0].Data["text/html"] != "<b>first</b>" || r.Outputs[1].Data["image/png"] == "" || !strings.Contains(r.Outputs[1].Data["e2b/chart"], `"title":"T"`) {
		t.Fatalf("outputs %.500v", r.Outputs)
	}
	if r.Display["e2b/data"] != `{"a":[1,2]}` {
		t.Fatalf("display %.300v", r.Display)
	}
	// Without display, the figure is an image, as before.
	r.Outputs, r.Images, r.Display = nil, nil, nil
	ts.call(t, "POST", "/execute", "", map[string]any{"code": "import matplotlib.pyplot as plt\nplt.plot([1, 2])", "profile": "data_science"}, &r)
	if !r.Success || len(r.Images) != 1 || r.Outputs != nil || r.Display != nil {
		t.Fatalf("plain result: %+v", r)
	}
}

// stdin on POST /commands is given to the command, then closed: cat
// echoes it, wc counts a stdin of several chunks, a command that never
// reads ends as soon as it is done.
func TestCommandStdin(t *testing.T) {
	ts := startServer(t, "", func(c *config.Config) { c.MaxBodySize = 8 << 20 })
	var r struct {
		Success  bool   `json:"success"`
		Stdout   string `json:"stdout"`
		ExitCode int    `json:"exit_code"`
	}
	ts.call(t, "POST", "/commands", "", map[string]any{"command": "cat", "stdin": "line one\nline two\n"}, &r)
	if !r.Success || r.Stdout != "line one\nline two\n" {
		t.Fatalf("cat: %+v", r)
	}
	big := strings.Repeat("0123456789abcdef", 5<<16) // 5 MiB: several writes
	ts.call(t, "POST", "/commands", "", map[string]any{"command": "wc -c", "stdin": big}, &r)
	if !r.Success || strings.TrimSpace(r.Stdout) != fmt.Sprint(len(big)) {
		t.Fatalf("wc: %+v", r)
	}
	start := time.Now()
	ts.call(t, "POST", "/commands", "", map[string]any{"command": "echo done", "stdin": big}, &r)
	if !r.Success || r.Stdout != "done\n" || time.Since(start) > 5*time.Second {
		t.Fatalf("a command that does not read: %+v after %s", r, time.Since(start))
	}
	// Without stdin the command reads an empty one, as before.
	ts.call(t, "POST", "/commands", "", map[string]any{"command": "cat; echo end"}, &r)
	if r.Stdout != "end\n" {
		t.Fatalf("no stdin: %+v", r)
	}
}

// A file's metadata survives a snapshot (a session started from it) and a
// fork: the workspace's archive carries it.
func TestMetadataSurvivesSnapshotAndFork(t *testing.T) {
	ts := startServer(t, "", nil)
	var se struct {
		ID string `json:"session_id"`
	}
	ts.call(t, "POST", "/sessions", "", map[string]any{}, &se)
	base := "/sessions/" + se.ID
	if resp := ts.call(t, "PUT", base+"/files/content", "", map[string]any{"path": "d/tagged.txt", "content": "x", "metadata": map[string]string{"owner": "alice", "run": "7"}}, nil); resp.StatusCode != 200 {
		t.Fatalf("write: %d", resp.StatusCode)
	}
	metadataOf := func(id string) string {
		var list struct {
			Files []struct {
				Path     string            `json:"path"`
				Metadata map[string]string `json:"metadata"`
			} `json:"files"`
		}
		ts.call(t, "GET", "/sessions/"+id+"/files?path=d", "", nil, &list)
		if len(list.Files) != 1 {
			t.Fatalf("list of %s: %+v", id, list)
		}
		return fmt.Sprint(list.Files[0].Metadata)
	}
	const want = "map[owner:alice run:7]"
	var snap struct {
		ID string `json:"snapshot_id"`
	}
	if resp := ts.call(t, "POST", base+"/snapshots", "", map[string]any{}, &snap); resp.StatusCode/100 != 2 || snap.ID == "" {
		t.Fatalf("snapshot: %d", resp.StatusCode)
	}
	var from struct {
		ID string `json:"session_id"`
	}
	if resp := ts.call(t, "POST", "/sessions", "", map[string]any{"from_snapshot": snap.ID}, &from); resp.StatusCode != 201 {
		t.Fatalf("from snapshot: %d", resp.StatusCode)
	}
	if got := metadataOf(from.ID); got != want {
		t.Fatalf("from the snapshot: %s, want %s", got, want)
	}
	var fork struct {
		Sessions []struct {
			Session *struct {
				ID string `json:"session_id"`
			} `json:"session"`
		} `json:"sessions"`
	}
	if resp := ts.call(t, "POST", base+"/fork", "", map[string]any{}, &fork); resp.StatusCode != 201 || len(fork.Sessions) != 1 || fork.Sessions[0].Session == nil {
		t.Fatalf("fork: %d %+v", resp.StatusCode, fork)
	}
	if got := metadataOf(fork.Sessions[0].Session.ID); got != want {
		t.Fatalf("in the fork: %s, want %s", got, want)
	}
}
