// Package mcpserver is codecage's MCP surface: the sandbox service's
// operations as MCP tools, over any transport the official go-sdk offers
// (stdio for `codecage mcp`; streamable HTTP and SSE for `codecage serve`).
// It holds no logic the other surfaces lack: every tool calls the service.
package mcpserver

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codecage/codecage/internal/access"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/sandbox"
)

// Version is reported to clients in the initialize handshake.
var Version = "0.1.0"

// New returns an MCP server exposing svc's tools.
func New(svc *sandbox.Service, log *slog.Logger) *mcp.Server {
	return newServer(svc, log, "")
}

func newServer(svc *sandbox.Service, log *slog.Logger, key string) *mcp.Server {
	if log == nil {
		log = slog.Default()
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "codecage", Title: "codecage Python sandbox", Version: Version},
		&mcp.ServerOptions{Logger: log, Instructions: instructions(svc.Config())})
	t := &tools{svc: svc, key: key}
	t.register(s)
	return s
}

// instructions tell a model what this server is for and how to use it.
func instructions(c policy.Config) string {
	return fmt.Sprintf(`Runs Python 3 code in an isolated sandbox (no network unless the network profile is enabled, no host files, %s memory, %gs timeout by default).
Use execute_code for one-off code: print what you want to see, or end with an expression (its value is returned). Nothing persists between execute_code calls.
Use create_session, then execute_code with session_id, to keep variables, imports and files between calls, like a notebook; the session's workspace (/workspace) is reachable with write_file, read_file and list_files.
Call get_sandbox_info for the enabled profiles and their modules, and validate_code to check code without running it.`,
		strings.ToUpper(humanSize(c.MemoryLimit)), c.Timeout.Seconds())
}

func humanSize(n int64) string {
	switch {
	case n%(1<<30) == 0:
		return fmt.Sprintf("%dg", n>>30)
	case n%(1<<20) == 0:
		return fmt.Sprintf("%dm", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// HTTPHandlers returns the streamable HTTP handler (mount at /mcp) and the
// legacy SSE handler (mount at /mcp/sse). The streamable handler keeps MCP
// sessions (clients get a session id and may open several streams), which
// the conformance suite expects. DNS-rebinding protection, on by default in
// the SDK, stays on.
//
// A streamable request carries its API key to the tools as its token; a
// legacy SSE connection's tool calls carry nothing, so each key gets an SSE
// server of its own, bound to the key the front door checked when the
// connection opened (sandbox.CallerFrom).
func HTTPHandlers(svc *sandbox.Service, log *slog.Logger) (streamable, sse http.Handler) {
	server := New(svc, log)
	var perKey sync.Map // key name -> *mcp.Server
	sseServer := func(r *http.Request) *mcp.Server {
		c, ok := sandbox.CallerFrom(r.Context())
		if !ok || c.Key == "" {
			return server
		}
		if s, ok := perKey.Load(c.Key); ok {
			return s.(*mcp.Server)
		}
		s, _ := perKey.LoadOrStore(c.Key, newServer(svc, log, c.Key))
		return s.(*mcp.Server)
	}
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil), mcp.NewSSEHandler(sseServer, nil)
}

// toolError turns a service error into the text a model can act on. The
// errors are the service's own, with their advice; the category prefix
// helps a model tell its mistakes from the server's state.
func toolError(err error) error {
	switch kind := sandbox.ErrorKind(err); kind {
	case sandbox.KindInvalidRequest, sandbox.KindBadPath:
		return fmt.Errorf("invalid request: %w", err)
	case sandbox.KindBusy, sandbox.KindRateLimited, sandbox.KindShuttingDown:
		if d := access.RetryAfter(err); d > 0 {
			return fmt.Errorf("%s: %w (retry after %ds)", strings.ReplaceAll(kind, "_", " "), err, int(d.Seconds()))
		}
		return fmt.Errorf("%s: %w", strings.ReplaceAll(kind, "_", " "), err)
	case sandbox.KindCanceled:
		return errors.New("canceled")
	}
	return err
}
