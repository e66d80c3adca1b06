package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/mcpserver"
	"github.com/codecage/codecage/internal/service"
)

func callPrint42(t *testing.T, cs *mcp.ClientSession) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{"code": "print(6*7)"}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res.StructuredContent)
	if res.IsError || !strings.Contains(string(b), `"stdout":"42\n"`) {
		t.Fatalf("execute_code: %v %s", res.IsError, b)
	}
}

// codecage mcp as a real process: stdout carries protocol frames only (the
// client would fail on anything else), even when the code prints.
func TestMCPOverStdio(t *testing.T) {
	cmd := exec.Command(os.Args[0], "mcp", "--pool-size", "1", "--enable-filesystem", "true", "--state-dir", t.TempDir())
	cmd.Env = append(os.Environ(), cliMainEnv+"=1")
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil || len(tools.Tools) < 10 {
		t.Fatalf("tools: %v %v", err, tools)
	}
	callPrint42(t, cs)
	// The code writes to fd 1 and 2 directly: still only tool content.
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{
		"code": "import os\nos.write(1, b'{\"jsonrpc\":\"2.0\",\"id\":99}\\n')\nos.write(2, b'noise\\n')", "allowed_imports": []string{"os"}, "profile": "filesystem"}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res.StructuredContent)
	if res.IsError || !strings.Contains(string(b), `"stdout":"{\"jsonrpc\":\"2.0\",\"id\":99}\n"`) || !strings.Contains(string(b), `"stderr":"noise\n"`) {
		t.Fatalf("raw writes to fd 1 and 2: %v %s", res.IsError, b)
	}
	callPrint42(t, cs)
}

// The HTTP handlers codecage serve mounts, with the SDK's own clients.
func TestMCPOverHTTPAndSSE(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.StateDir = t.TempDir()
	cfg.PoolSize = 1
	svc, err := service.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	streamable, sse := mcpserver.HTTPHandlers(svc, mcpserver.Options{Config: cfg}, false)
	mux := http.NewServeMux()
	mux.Handle("/mcp", streamable)
	mux.Handle("/mcp/sse", sse)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for name, tr := range map[string]mcp.Transport{
		"streamable": &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp"},
		"sse":        &mcp.SSEClientTransport{Endpoint: srv.URL + "/mcp/sse"},
	} {
		t.Run(name, func(t *testing.T) {
			client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
			cs, err := client.Connect(context.Background(), tr, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			callPrint42(t, cs)
		})
	}
	// Sessions belong to the client that made them.
	connectHTTP := func() *mcp.ClientSession {
		client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
		cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	alice, mallory := connectHTTP(), connectHTTP()
	defer alice.Close()
	defer mallory.Close()
	res, err := alice.CallTool(context.Background(), &mcp.CallToolParams{Name: "create_session", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("create_session: %v %v", err, res)
	}
	id := res.StructuredContent.(map[string]any)["session_id"].(string)
	res, err = mallory.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{"session_id": id, "code": "1"}})
	if err != nil || !res.IsError {
		t.Fatalf("another client used the session: %v %+v", err, res)
	}
	res, err = alice.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{"session_id": id, "code": "6*7"}})
	if err != nil || res.IsError {
		t.Fatalf("the owner could not use its session: %v %+v", err, res)
	}
	// DNS-rebinding protection: a foreign Host header is refused.
	req, _ := http.NewRequest("POST", srv.URL+"/mcp", strings.NewReader(`{}`))
	req.Host = "evil.example"
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode < 400 {
		t.Fatalf("a request with Host evil.example got %d", resp.StatusCode)
	}
}
