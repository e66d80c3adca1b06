package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// logBuffer collects a Manager's log, debug level included.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newLog() (*slog.Logger, *logBuffer) {
	b := &logBuffer{}
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

type addIn struct {
	A int `json:"a" jsonschema:"the first addend"`
	B int `json:"b" jsonschema:"the second addend"`
}

type addOut struct {
	Sum int `json:"sum" jsonschema:"a plus b"`
}

type nameIn struct {
	Name string `json:"name" jsonschema:"an environment variable"`
}

type messageIn struct {
	Message string `json:"message" jsonschema:"what to fail with"`
}

type slowIn struct {
	Seconds float64 `json:"seconds" jsonschema:"how long to take"`
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// testServer is a Go MCP server over streamable HTTP that wants a bearer
// token.
type testServer struct {
	mcp        *mcp.Server
	handler    http.Handler
	authorized atomic.Int64  // requests that carried the token
	refused    atomic.Int64  // requests that did not
	slowing    atomic.Int64  // slow calls under way in the server
	stop       chan struct{} // ends slow calls still running at the end
	stopOnce   sync.Once
}

// shutdown drops every client connection and stops the server, as a
// crash would, without waiting for handlers to finish politely.
func (ts *testServer) shutdown(hs *httptest.Server) {
	ts.stopOnce.Do(func() { close(ts.stop) })
	hs.CloseClientConnections()
	hs.Close()
}

func newTestServer(token string) *testServer {
	ts := &testServer{mcp: mcp.NewServer(&mcp.Implementation{Name: "test-upstream", Version: "1.0.0"}, nil), stop: make(chan struct{})}
	s := ts.mcp
	mcp.AddTool(s, &mcp.Tool{Name: "add", Description: "Adds two integers."},
		func(_ context.Context, _ *mcp.CallToolRequest, in addIn) (*mcp.CallToolResult, addOut, error) {
			return nil, addOut{Sum: in.A + in.B}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "echo_env", Description: "Returns an environment variable of the server."},
		func(_ context.Context, _ *mcp.CallToolRequest, in nameIn) (*mcp.CallToolResult, any, error) {
			return text(os.Getenv(in.Name)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "Always fails."},
		func(_ context.Context, _ *mcp.CallToolRequest, in messageIn) (*mcp.CallToolResult, any, error) {
			return nil, nil, errors.New(in.Message)
		})
	mcp.AddTool(s, &mcp.Tool{Name: "slow", Description: "Takes its time."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in slowIn) (*mcp.CallToolResult, any, error) {
			ts.slowing.Add(1)
			defer ts.slowing.Add(-1)
			select {
			case <-time.After(time.Duration(in.Seconds * float64(time.Second))):
				return text("done"), nil, nil
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			case <-ts.stop:
				return nil, nil, errors.New("server stopped")
			}
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	ts.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			ts.refused.Add(1)
			http.Error(w, "missing or wrong token", http.StatusUnauthorized)
			return
		}
		ts.authorized.Add(1)
		h.ServeHTTP(w, r)
	})
	return ts
}

func (ts *testServer) start(t *testing.T) *httptest.Server {
	t.Helper()
	hs := httptest.NewServer(ts.handler)
	t.Cleanup(func() { ts.shutdown(hs) })
	return hs
}

func closeManager(t *testing.T, m *Manager) {
	t.Helper()
	done := make(chan struct{})
	go func() { m.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Manager.Close did not return within 30s")
	}
}

func statusOf(m *Manager, name string) ServerStatus {
	for _, s := range m.Status() {
		if s.Name == name {
			return s
		}
	}
	panic(fmt.Sprintf("no status for %q", name))
}

func toolNames(ts []Tool) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.QualifiedName())
	}
	return out
}

func mustContain(t *testing.T, s, sub string) {
	t.Helper()
	if !strings.Contains(s, sub) {
		t.Fatalf("%q does not contain %q", s, sub)
	}
}
