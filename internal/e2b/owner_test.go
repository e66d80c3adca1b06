package e2b_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codecage/codecage/internal/access"
	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/e2b"
	"github.com/codecage/codecage/internal/httpapi"
	"github.com/codecage/codecage/internal/mcpserver"
	"github.com/codecage/codecage/internal/service"
)

const bobKey = "e2b_99887766554433221100"

type bearer string

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

// A key owns its sessions whatever the surface: a sandbox alice creates
// over E2B is listed and runs code over REST and MCP with alice's key, and
// bob's key sees nothing of it on any surface. (Before, an E2B sandbox
// belonged to "alice" and a REST or MCP session to "key:alice".)
func TestAKeySeesItsE2BSandboxOverRESTAndMCP(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.StateDir = t.TempDir()
	cfg.PoolSize, cfg.SessionPoolSize = 0, 0
	cfg.MachinePoolSize = 0
	svc, err := service.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	keys, err := access.ParseKeys("alice:" + aliceKey + ",bob:" + bobKey)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e2bSrv := httptest.NewServer(e2b.New(svc, e2b.Options{Keys: keys, Config: cfg}))
	t.Cleanup(e2bSrv.Close)
	streamable, sse := mcpserver.HTTPHandlers(svc, mcpserver.Options{Config: cfg, Log: log}, false)
	rest := httptest.NewServer(httpapi.New(svc, httpapi.Options{Keys: keys, Log: log, MCP: streamable, MCPSSE: sse, Version: "test", Config: cfg}))
	t.Cleanup(func() { rest.CloseClientConnections(); rest.Close() })

	status, created := call(t, "POST", e2bSrv.URL+"/v2/sandboxes", `{"templateID": "base", "timeout": 60}`, map[string]string{"X-API-KEY": aliceKey})
	if status != 201 {
		t.Fatalf("create over E2B: %d %v", status, created)
	}
	id := created["sandboxID"].(string)

	restCall := func(key, method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, rest.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := (&http.Client{Transport: bearer(key)}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	if code, body := restCall(aliceKey, "GET", "/sessions", ""); code != 200 || !strings.Contains(body, id) {
		t.Errorf("alice's REST list lacks her E2B sandbox %s: %d %s", id, code, body)
	}
	if code, body := restCall(aliceKey, "POST", "/execute", `{"code": "6*7", "session_id": "`+id+`"}`); code != 200 || !strings.Contains(body, `"result":42`) {
		t.Errorf("alice runs code in her E2B sandbox over REST: %d %s", code, body)
	}
	if code, body := restCall(bobKey, "GET", "/sessions", ""); code != 200 || strings.Contains(body, id) {
		t.Errorf("bob's REST list shows alice's sandbox: %d %s", code, body)
	}
	if code, body := restCall(bobKey, "POST", "/execute", `{"code": "1", "session_id": "`+id+`"}`); code != 404 {
		t.Errorf("bob ran code in alice's sandbox over REST: %d %s", code, body)
	}

	mcpAs := func(key string) *mcp.ClientSession {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(),
			&mcp.StreamableClientTransport{Endpoint: rest.URL + "/mcp", HTTPClient: &http.Client{Transport: bearer(key)}}, nil)
		if err != nil {
			t.Fatalf("MCP connect: %v", err)
		}
		t.Cleanup(func() { _ = cs.Close() })
		return cs
	}
	tool := func(cs *mcp.ClientSession, name string, args map[string]any) (string, bool) {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		raw, _ := json.Marshal(res.Content)
		return string(raw), res.IsError
	}
	alice, bob := mcpAs(aliceKey), mcpAs(bobKey)
	if text, failed := tool(alice, "list_sessions", map[string]any{}); failed || !strings.Contains(text, id) {
		t.Errorf("alice's MCP list lacks her E2B sandbox %s: %s", id, text)
	}
	if text, failed := tool(alice, "execute_code", map[string]any{"code": "6*7", "session_id": id}); failed || !strings.Contains(text, "42") {
		t.Errorf("alice runs code in her E2B sandbox over MCP: %s", text)
	}
	if text, _ := tool(bob, "list_sessions", map[string]any{}); strings.Contains(text, id) {
		t.Errorf("bob's MCP list shows alice's sandbox: %s", text)
	}
	if text, failed := tool(bob, "execute_code", map[string]any{"code": "1", "session_id": id}); !failed {
		t.Errorf("bob ran code in alice's sandbox over MCP: %s", text)
	}

	// And E2B itself: alice's key lists it, bob's does not.
	if status, _ := call(t, "GET", e2bSrv.URL+"/sandboxes/"+id, "", map[string]string{"X-API-KEY": bobKey}); status != 404 {
		t.Errorf("bob gets alice's sandbox over E2B: %d", status)
	}
	if status, _ := call(t, "GET", e2bSrv.URL+"/sandboxes/"+id, "", map[string]string{"X-API-KEY": aliceKey}); status != 200 {
		t.Errorf("alice gets her sandbox over E2B: %d", status)
	}
}
