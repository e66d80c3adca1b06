package mcpserver_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/mcpserver"
	"github.com/codecage/codecage/internal/service"
)

// The MCP surface carries what the E2B surface gained: kernels besides
// Python, session metrics, the file API's reach and metadata, and rich
// results with their PNGs as image content.

// twoOwners are two MCP clients of one server over streamable HTTP: two
// connections are two owners (the server has no keys).
func twoOwners(t *testing.T, edit func(*config.Config)) (a, b *mcp.ClientSession) {
	t.Helper()
	cfg := config.DefaultConfig()
	cfg.StateDir = t.TempDir()
	cfg.PoolSize, cfg.DataPoolSize = 1, 0
	if edit != nil {
		edit(&cfg)
	}
	svc, err := service.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	streamable, _ := mcpserver.HTTPHandlers(svc, mcpserver.Options{Config: cfg}, false)
	srv := httptest.NewServer(streamable)
	t.Cleanup(srv.Close)
	open := func() *mcp.ClientSession {
		client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
		cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: http.DefaultClient, MaxRetries: -1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	return open(), open()
}

func newSession(t *testing.T, cs *mcp.ClientSession, args map[string]any) string {
	t.Helper()
	res := call(t, cs, "create_session", args)
	id, _ := structured(t, res)["session_id"].(string)
	if res.IsError || id == "" {
		t.Fatalf("create_session: %s", text(res))
	}
	return id
}

func TestExecuteLanguageAndMetrics(t *testing.T) {
	cs, other := twoOwners(t, func(c *config.Config) { c.Kernels = []string{"javascript"} })
	id := newSession(t, cs, map[string]any{})
	if res := call(t, cs, "execute_code", map[string]any{"session_id": id, "language": "js", "code": "const k = 40"}); res.IsError {
		t.Fatalf("js: %s", text(res))
	}
	res := call(t, cs, "execute_code", map[string]any{"session_id": id, "language": "javascript", "code": "k + 2"})
	if res.IsError || !strings.Contains(text(res), "42") {
		t.Fatalf("js state: %s", text(res))
	}
	for _, c := range []struct {
		lang      string
		inSession bool
		want      string
	}{
		{"cobol", true, "cobol"},
		{"bash", true, "SANDBOX_KERNELS"},
		{"js", false, "runs in a session"},
	} {
		args := map[string]any{"code": "1", "language": c.lang}
		if c.inSession {
			args["session_id"] = id
		}
		res := call(t, cs, "execute_code", args)
		if !res.IsError || !strings.HasPrefix(text(res), "invalid request: ") || !strings.Contains(text(res), c.want) {
			t.Fatalf("%s: %s", c.lang, text(res))
		}
	}

	res = call(t, cs, "session_metrics", map[string]any{"session_id": id})
	m := structured(t, res)
	if res.IsError || m["cpu_count"].(float64) < 1 || m["mem_used"].(float64) <= 0 || m["mem_total"].(float64) < m["mem_used"].(float64) || m["disk_total"].(float64) <= 0 {
		t.Fatalf("metrics: %s %v", text(res), m)
	}
	// Another client's session is not found, as for every session tool.
	if res := call(t, other, "session_metrics", map[string]any{"session_id": id}); !res.IsError || !strings.Contains(text(res), "not found") {
		t.Fatalf("another owner's metrics: %s", text(res))
	}
}

func TestFilesMetadataAndReach(t *testing.T) {
	cs, _ := twoOwners(t, func(c *config.Config) { c.EnableFilesystem = true })
	id := newSession(t, cs, map[string]any{})
	res := call(t, cs, "write_file", map[string]any{"session_id": id, "path": "/tmp/n.txt", "content": "x", "metadata": map[string]string{"Tag": "v1"}})
	if res.IsError || structured(t, res)["metadata"].(map[string]any)["tag"] != "v1" {
		t.Fatalf("write: %s", text(res))
	}
	res = call(t, cs, "execute_code", map[string]any{"session_id": id, "code": "import os; os.getxattr('/tmp/n.txt', 'user.e2b.tag').decode()"})
	if res.IsError || !strings.Contains(text(res), "v1") {
		t.Fatalf("code's view: %s", text(res))
	}
	if res := call(t, cs, "write_file", map[string]any{"session_id": id, "path": "/usr/x", "content": "x"}); !res.IsError || !strings.HasPrefix(text(res), "permission denied: ") {
		t.Fatalf("system tree write: %s", text(res))
	}
	if res := call(t, cs, "write_file", map[string]any{"session_id": id, "path": "m", "content": "x", "metadata": map[string]string{"bad key": "v"}}); !res.IsError || !strings.Contains(text(res), "metadata key") {
		t.Fatalf("bad metadata: %s", text(res))
	}
	if res := call(t, cs, "read_file", map[string]any{"session_id": id, "path": "/usr/lib/os-release"}); res.IsError || !strings.Contains(text(res)+structured(t, res)["content"].(string), "ID=") {
		t.Fatalf("system tree read: %s", text(res))
	}
}

// display: PNGs go as image content, out of the structured result; the
// rest (HTML, e2b/chart, e2b/data) stays structured.
func TestExecuteRichResultsAsContent(t *testing.T) {
	cs := connect(t)
	id := newSession(t, cs, map[string]any{"profile": "data_science"})
	code := "from IPython.display import display, HTML\nimport matplotlib.pyplot as plt\nimport pandas as pd\n" +
		"display(HTML('<b>first</b>'))\nplt.plot([1, 2], [3, 4])\nplt.title('T')\nplt.show()\npd.DataFrame({'a': [1, 2]})"
	res := call(t, cs, "execute_code", map[string]any{"session_id": id, "code": code, "display": true})
	if res.IsError {
		t.Fatalf("%s", text(res))
	}
	var images []*mcp.ImageContent
	for _, c := range res.Content {
		if ic, ok := c.(*mcp.ImageContent); ok {
			images = append(images, ic)
		}
	}
	if len(images) != 1 || images[0].MIMEType != "image/png" || !strings.HasPrefix(string(images[0].Data), "\x89PNG") {
		t.Fatalf("%d images", len(images))
	}
	s := structured(t, res)
	outs, _ := s["outputs"].([]any)
	if len(outs) != 2 || s["images"].(float64) != 1 {
		t.Fatalf("structured outputs %v, images %v", outs, s["images"])
	}
	first := outs[0].(map[string]any)["data"].(map[string]any)
	fig := outs[1].(map[string]any)["data"].(map[string]any)
	if first["text/html"] != "<b>first</b>" || fig["image/png"] != "(attached as image 1)" || !strings.Contains(fig["e2b/chart"].(string), `"title":"T"`) {
		t.Fatalf("outputs %v", outs)
	}
	if s["display"].(map[string]any)["e2b/data"] != `{"a":[1,2]}` || !strings.Contains(text(res), "[2 display output(s)") {
		t.Fatalf("display %v, text %s", s["display"], text(res))
	}
}

// run_command's stdin reaches the command, then it reads end of file.
func TestRunCommandStdin(t *testing.T) {
	cs := connect(t)
	res := call(t, cs, "run_command", map[string]any{"command": "cat; echo '[eof]'", "stdin": "from the tool\n"})
	if res.IsError || structured(t, res)["stdout"] != "from the tool\n[eof]\n" {
		t.Fatalf("%s", text(res))
	}
}
