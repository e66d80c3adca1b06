// Package mcpserver is codecage's MCP surface: the sandbox service's
// operations as MCP tools, over any transport the official go-sdk offers
// (stdio for `codecage mcp`; streamable HTTP and SSE for `codecage serve`).
// It holds no logic the other surfaces lack: every tool calls the service.
package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codecage/codecage/internal/access"
	"github.com/codecage/codecage/internal/api"
	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/service"
)

// Version is reported to clients in the initialize handshake.
var Version = "0.1.0"

// Options configure the MCP surface.
type Options struct {
	// Config is the operator's configuration the service runs with: the
	// instructions and the tools' descriptions quote its limits.
	Config config.Config
	// Log receives the SDK's and the guard's lines; nil: slog.Default().
	Log *slog.Logger
}

// New returns an MCP server exposing svc's tools.
func New(svc *service.Service, o Options) *mcp.Server {
	return newServer(svc, o, "")
}

func newServer(svc *service.Service, o Options, key string) *mcp.Server {
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "codecage", Title: "codecage Python sandbox", Version: Version},
		&mcp.ServerOptions{Logger: log, Instructions: instructions(o.Config)})
	t := &tools{svc: svc, cfg: o.Config, key: key}
	t.register(s)
	s.AddReceivingMiddleware(guard(log))
	return s
}

// instructions tell a model what this server is for and how to use it.
func instructions(c config.Config) string {
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
// connection opened (service.CallerFrom).
//
// A stateless streamable handler (for replicas behind a load balancer)
// keeps no MCP session: each POST stands alone, so any replica can take
// any request; GET streams are refused (405) and clients do without them.
// The sandbox sessions are codecage's own ids in tool arguments, which the
// service forwards to the replica that holds them.
//
// Both handlers give ids back exactly as sent (idHandler maps them, as
// stdio does); DELETE /mcp ends the session's calls first
// (streamableHandler); each SSE stream is bounded (sseHandler).
func HTTPHandlers(svc *service.Service, o Options, stateless bool) (streamable, sse http.Handler) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	log := o.Log
	inflight := newCalls()
	withCalls := func(s *mcp.Server) *mcp.Server {
		s.AddReceivingMiddleware(inflight.middleware)
		return s
	}
	server := withCalls(New(svc, o))
	var perKey sync.Map // key name -> *mcp.Server
	sseServer := func(r *http.Request) *mcp.Server {
		c, ok := service.CallerFrom(r.Context())
		if !ok || c.Key == "" {
			return server
		}
		if s, ok := perKey.Load(c.Key); ok {
			return s.(*mcp.Server)
		}
		s, _ := perKey.LoadOrStore(c.Key, withCalls(newServer(svc, o, c.Key)))
		return s.(*mcp.Server)
	}
	var opts *mcp.StreamableHTTPOptions
	if stateless {
		opts = &mcp.StreamableHTTPOptions{Stateless: true}
	}
	streamable = &streamableHandler{inner: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, opts), calls: inflight, posts: newPosts()}
	sseIDs := newIDSessions()
	sse = &sseHandler{inner: mcp.NewSSEHandler(sseServer, nil), calls: inflight, ids: sseIDs, log: log}
	return &idHandler{next: streamable, sessions: newIDSessions(), stateless: stateless},
		&idHandler{next: sse, sessions: sseIDs, legacy: true}
}

// toolError turns a service error into the text a model can act on. The
// errors are the service's own, with their advice; one category prefix
// ("invalid request: ", "busy: ", ...) helps a model tell its mistakes
// from the server's state.
func toolError(err error) error {
	kind := service.ErrorKind(err)
	prefix := api.StatusOfKind(kind).MCP
	switch {
	case prefix == "":
		return err
	case kind == service.KindCanceled:
		// How it was canceled is the server's business: the category says it.
		return errors.New(prefix)
	}
	// The service's errors start with their sentinel's words ("invalid
	// request: ", "sandbox busy: "): say the category once.
	msg := err.Error()
	for _, said := range []string{prefix + ": ", "sandbox " + prefix + ": ", "server " + prefix + ": "} {
		msg = strings.TrimPrefix(msg, said)
	}
	if d := access.RetryAfter(err); d > 0 {
		msg += fmt.Sprintf(" (retry after %ds)", int(d.Seconds()))
	}
	return &toolErr{msg: prefix + ": " + msg, err: err}
}

// toolErr is a service error as a tool reports it; errors.Is still sees
// the service's sentinel.
type toolErr struct {
	msg string
	err error
}

func (e *toolErr) Error() string { return e.msg }

func (e *toolErr) Unwrap() error { return e.err }

// addTool registers a tool whose arguments are checked for text that is
// not valid Unicode first: the SDK's decoder would quietly replace it, and
// the tool would act on something other than what was sent. Such a call
// is refused as invalid params, naming the field.
func addTool[In, Out any](s *mcp.Server, t *mcp.Tool, h mcp.ToolHandlerFor[In, Out]) {
	mcp.AddTool(s, t, func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		if req != nil && req.Params != nil {
			if err := api.CheckJSONText(req.Params.Arguments); err != nil {
				var zero Out
				return nil, zero, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: toolError(err).Error()}
			}
		}
		return h(ctx, req, in)
	})
}
