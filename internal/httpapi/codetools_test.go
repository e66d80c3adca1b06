package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codecage/codecage/internal/service"
	"github.com/codecage/codecage/internal/upstream"
)

type echoIn struct {
	Text string `json:"text" jsonschema:"what to echo"`
}

// TestCodeToolsREST: GET /tools lists an upstream's tools as Python
// signatures, and POST /execute's code calls them, scoped by tools.
func TestCodeToolsREST(t *testing.T) {
	up := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
	mcp.AddTool(up, &mcp.Tool{Name: "echo", Description: "Echoes text."}, func(ctx context.Context, req *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
	})
	mcp.AddTool(up, &mcp.Tool{Name: "other", Description: "Another tool."}, func(ctx context.Context, req *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "other"}}}, nil, nil
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, nil))
	defer func() {
		hs.CloseClientConnections()
		hs.Close()
	}()
	m := upstream.NewManager(upstream.Config{Servers: map[string]upstream.ServerConfig{"up": {URL: hs.URL}}}, nil)
	defer m.Close()
	ts := startServerOpts(t, "", nil, &service.Options{Upstream: m})

	var list struct {
		Tools []struct{ Name, Signature string } `json:"tools"`
	}
	if resp := ts.call(t, "GET", "/tools", "", nil, &list); resp.StatusCode != 200 || len(list.Tools) != 2 || list.Tools[0].Name != "up.echo" || !strings.Contains(list.Tools[0].Signature, "def echo(text: str)") {
		t.Fatalf("%d %+v", resp.StatusCode, list)
	}
	var r result
	ts.call(t, "POST", "/execute", "", map[string]any{"code": "tools.up.echo('hello') + ' ' + tools.call('up.other', {'text': ''})"}, &r)
	if !r.Success || string(r.Result) != `"hello other"` {
		t.Fatalf("%+v %+v", r, r.Error)
	}
	r = result{}
	ts.call(t, "POST", "/execute", "", map[string]any{"code": "tools.call('up.other', {'text': ''})", "tools": []string{"up.echo"}}, &r)
	if r.Success || r.Error == nil || r.Error.Type != "ToolError" {
		t.Fatalf("scoped run called another tool: %+v", r)
	}
	wantProblem(t, ts.call(t, "POST", "/execute", "", map[string]any{"code": "1", "tools": []string{"up.nosuch"}}, nil), 400, "invalid_request")
}
