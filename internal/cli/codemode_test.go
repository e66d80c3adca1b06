package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type sumIn struct {
	A int `json:"a"`
	B int `json:"b"`
}

type sumOut struct {
	Sum int `json:"sum"`
}

// upstreamConfig starts an upstream MCP server (over HTTP, behind a bearer
// token) with the tools add and echo, and writes a SANDBOX_TOOLS_CONFIG
// file that names it "calc".
func upstreamConfig(t *testing.T) string {
	t.Helper()
	const token = "Bearer cli-up-9d2e"
	s := mcp.NewServer(&mcp.Implementation{Name: "calc", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "add", Description: "Adds two integers."}, func(ctx context.Context, req *mcp.CallToolRequest, in sumIn) (*mcp.CallToolResult, sumOut, error) {
		return nil, sumOut{Sum: in.A + in.B}, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Echoes a."}, func(ctx context.Context, req *mcp.CallToolRequest, in sumIn) (*mcp.CallToolResult, sumOut, error) {
		return nil, sumOut{Sum: in.A}, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != token {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	path := filepath.Join(t.TempDir(), "tools.json")
	cfg := fmt.Sprintf(`{"servers": {"calc": {"url": %q, "headers": {"Authorization": %q}}}}`, srv.URL, token)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// codecage run honours SANDBOX_TOOLS_CONFIG: code mode works one-shot, and
// --tools narrows what the code may call.
func TestRunCodeMode(t *testing.T) {
	t.Setenv("SANDBOX_TOOLS_CONFIG", upstreamConfig(t))
	code, out, errOut := cli(t, "", "run", "-c", `print(tools.calc.add(a=2, b=3)["sum"], tools.call("calc.echo", {"a": 7, "b": 0})["sum"])`)
	if code != 0 || out != "5 7\n" {
		t.Fatalf("run: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = cli(t, "", "run", "--tools", "calc.add", "-c", `
print(tools.calc.add(a=1, b=1)["sum"])
try:
    tools.call("calc.echo", {"a": 1, "b": 0})
except ToolError as e:
    print("refused:", e)`)
	if code != 0 || !strings.HasPrefix(out, "2\nrefused: tool \"calc.echo\" is not allowed in this run") {
		t.Fatalf("--tools: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, _, errOut = cli(t, "", "run", "--tools", "calc.nosuch", "-c", "1")
	if code != exitUsage || !strings.Contains(errOut, "calc.nosuch") {
		t.Fatalf("unknown tool: exit %d, stderr %q", code, errOut)
	}
	t.Setenv("SANDBOX_TOOLS_CONFIG", "")
	code, _, errOut = cli(t, "", "run", "--tools", "calc.add", "-c", "1")
	if code != exitUsage || !strings.Contains(errOut, "SANDBOX_TOOLS_CONFIG") {
		t.Fatalf("no config: exit %d, stderr %q", code, errOut)
	}
	t.Setenv("SANDBOX_TOOLS_CONFIG", filepath.Join(t.TempDir(), "missing.json"))
	code, _, errOut = cli(t, "", "run", "-c", "1")
	if code != exitUsage || !strings.Contains(errOut, "SANDBOX_TOOLS_CONFIG") {
		t.Fatalf("missing config file: exit %d, stderr %q", code, errOut)
	}
}
