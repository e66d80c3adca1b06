// Package gateway is E2B's MCP gateway served from outside the sandbox: a
// sandbox created with `mcp` gets, for each server it names that the
// operator allows (an upstream with a gateway block), a copy of that
// server started for it alone, with the creator's values (tokens, keys)
// where the server reads them; and one MCP endpoint, streamable HTTP on
// the sandbox's port 50005, that lists and calls their tools behind the
// gateway's bearer token. The values live in this process only: the
// sandbox never holds them, nor is its code ever given them.
package gateway

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/service/errdefs"
	"github.com/codecage/codecage/internal/service/event"
	"github.com/codecage/codecage/internal/upstream"
)

// Port is where E2B's SDKs find the gateway (getMcpUrl: port 50005, /mcp).
const Port = 50005

// Path is the gateway's endpoint on its port.
const Path = "/mcp"

// EventToolCall is the kind of a gateway's tool call's event, as code
// mode's (its Action is "gateway").
const EventToolCall = "tool_call"

// Limits bound what a sandbox's gateway does.
type Limits struct {
	MaxCalls  int           // tool calls over the gateway's life
	MaxResult int           // bytes of a call's text result kept
	Timeout   time.Duration // listing the servers' tools
}

// Registry holds the sandboxes' gateways.
type Registry struct {
	catalog upstream.Config // the servers a gateway may start: those with a gateway block
	limits  Limits
	emit    func(context.Context, event.Event)
	log     *slog.Logger
	// sandboxed starts, for gateway id of owner, the servers that run in
	// a sandbox of their own.
	sandboxed func(id, owner string) upstream.Launcher

	mu sync.Mutex
	by map[string]*Gateway // by session id
}

// New is a registry for the operator's gateway servers (catalog).
func New(catalog upstream.Config, limits Limits, emit func(context.Context, event.Event), log *slog.Logger,
	sandboxed func(id, owner string) upstream.Launcher) *Registry {
	return &Registry{catalog: catalog, limits: limits, emit: emit, log: log, sandboxed: sandboxed, by: map[string]*Gateway{}}
}

// Offers reports whether any server may be asked for.
func (r *Registry) Offers() bool { return r != nil && len(r.catalog.Servers) > 0 }

// Check refuses a creator's configuration (E2B's `mcp`: server name to
// its values) naming every server the operator does not allow, or the
// first value a server does not take; it keeps nothing.
func (r *Registry) Check(asked map[string]map[string]any) error {
	_, err := r.configs(asked)
	return err
}

func (r *Registry) configs(asked map[string]map[string]any) (upstream.Config, error) {
	if len(asked) == 0 {
		return upstream.Config{}, fmt.Errorf("%w: mcp names no server", errdefs.ErrInvalidRequest)
	}
	var refused []string
	for _, name := range slices.Sorted(maps.Keys(asked)) {
		if sc, ok := r.catalog.Servers[name]; !ok || sc.Gateway == nil {
			refused = append(refused, bounded.Quote(bounded.String(name, 64)))
		}
	}
	if len(refused) > 0 {
		allowed := slices.Sorted(maps.Keys(r.catalog.Servers))
		return upstream.Config{}, fmt.Errorf("%w: mcp: the operator allows no gateway server %s (allowed: %s)", errdefs.ErrForbidden,
			strings.Join(refused, ", "), cmpOr(strings.Join(allowed, ", "), "none; SANDBOX_TOOLS_CONFIG's servers with a gateway block"))
	}
	cfg := upstream.Config{Servers: map[string]upstream.ServerConfig{}}
	for name, values := range asked {
		sc, err := r.catalog.Servers[name].ForGateway(values)
		if err != nil {
			return upstream.Config{}, fmt.Errorf("%w: mcp: server %s: %v", errdefs.ErrInvalidRequest, name, err)
		}
		cfg.Servers[name] = sc
	}
	return cfg, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Open starts the gateway of session id (owner's) for asked: its servers
// start connecting at once; one already open is replaced.
func (r *Registry) Open(id, owner string, asked map[string]map[string]any) error {
	cfg, err := r.configs(asked)
	if err != nil {
		return err
	}
	var launch upstream.Launcher
	if r.sandboxed != nil {
		launch = r.sandboxed(id, owner)
	}
	g := &Gateway{id: id, owner: owner, r: r, up: upstream.NewManagerWith(cfg, r.log.With("gateway", id), launch), servers: slices.Sorted(maps.Keys(cfg.Servers))}
	r.mu.Lock()
	old := r.by[id]
	r.by[id] = g
	r.mu.Unlock()
	if old != nil {
		old.close()
	}
	return nil
}

// Get is session id's gateway, or nil.
func (r *Registry) Get(id string) *Gateway {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.by[id]
}

// Close ends session id's gateway, if any: its servers stop.
func (r *Registry) Close(id string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	g := r.by[id]
	delete(r.by, id)
	r.mu.Unlock()
	if g != nil {
		g.close()
	}
}

// CloseAll ends every gateway (the service's end).
func (r *Registry) CloseAll() {
	if r == nil {
		return
	}
	r.mu.Lock()
	all := slices.Collect(maps.Values(r.by))
	clear(r.by)
	r.mu.Unlock()
	for _, g := range all {
		g.close()
	}
}

// Gateway is one sandbox's.
type Gateway struct {
	id, owner string
	r         *Registry
	up        *upstream.Manager
	servers   []string

	token atomic.Pointer[string] // the SDK's GATEWAY_ACCESS_TOKEN, once given
	calls atomic.Int64

	once    sync.Once
	handler http.Handler
}

// Servers are the names of the gateway's servers.
func (g *Gateway) Servers() []string { return g.servers }

// Owner is the session's owner.
func (g *Gateway) Owner() string { return g.owner }

// Bounds of a token: E2B's SDKs send a UUID.
const (
	minToken = 16
	maxToken = 512
)

// SetToken sets the bearer token the endpoint wants (the SDK makes one and
// starts the gateway with it); a second, other token is refused.
func (g *Gateway) SetToken(token string) error {
	if len(token) < minToken || len(token) > maxToken || strings.ContainsAny(token, " \t\r\n\x00") {
		return fmt.Errorf("%w: GATEWAY_ACCESS_TOKEN must be %d to %d bytes without spaces", errdefs.ErrInvalidRequest, minToken, maxToken)
	}
	if g.token.CompareAndSwap(nil, &token) {
		return nil
	}
	if cur := g.token.Load(); cur != nil && *cur == token {
		return nil
	}
	return fmt.Errorf("%w: the sandbox's MCP gateway runs already, with another token", errdefs.ErrInvalidRequest)
}

// Token is the endpoint's bearer token ("" before the SDK gave one).
func (g *Gateway) Token() string {
	if t := g.token.Load(); t != nil {
		return *t
	}
	return ""
}

func (g *Gateway) close() { _ = g.up.Close() }

// ServeHTTP serves the gateway's MCP endpoint to a holder of its token.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	want := g.Token()
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if want == "" || !ok || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		w.Header().Set("WWW-Authenticate", `Bearer realm="mcp-gateway"`)
		http.Error(w, "the MCP gateway wants its bearer token (getMcpToken)", http.StatusUnauthorized)
		return
	}
	if r.URL.Path != Path {
		http.Error(w, "the MCP gateway serves "+Path, http.StatusNotFound)
		return
	}
	g.once.Do(func() {
		// A server per MCP session, listing the servers' tools then: one
		// still starting (an npx package downloading itself) shows in the
		// sessions opened once it is up. The request's Host is the
		// sandbox's port name, never loopback: the bearer token is what
		// lets a caller in.
		g.handler = mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server { return g.server(r.Context()) },
			&mcp.StreamableHTTPOptions{DisableLocalhostProtection: true})
	})
	g.handler.ServeHTTP(w, r)
}

// server is the gateway's MCP server: each server's tools, as the server
// names them (a name two servers share is "server.tool" for the later).
func (g *Gateway) server(ctx context.Context) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "codecage-mcp-gateway", Version: "0.1.0"}, nil)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.r.limits.Timeout)
	defer cancel()
	tools, err := g.up.Tools(ctx)
	if err != nil {
		g.r.log.Warn("mcp gateway: listing tools", "session", g.id, "error", err)
	}
	seen := map[string]bool{}
	for _, t := range tools {
		name := t.Name
		if seen[name] {
			name = t.QualifiedName()
		}
		seen[name] = true
		schema := t.InputSchema
		if schema == nil {
			schema = map[string]any{"type": "object"}
		}
		s.AddTool(&mcp.Tool{Name: name, Description: t.Description, InputSchema: schema}, g.call(t))
	}
	return s
}

// call is a tool's handler: within the gateway's budget, an event (never
// the arguments) per call.
func (g *Gateway) call(t upstream.Tool) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		start := time.Now()
		ev := event.Event{Kind: EventToolCall, Action: "gateway", Code: t.QualifiedName(), Caller: event.Caller{Surface: event.SurfaceE2B}}
		finish := func(outcome, detail string) {
			ev.Outcome, ev.Detail, ev.Duration = outcome, detail, time.Since(start)
			g.r.emit(ctx, ev)
		}
		if n := g.calls.Add(1); g.r.limits.MaxCalls > 0 && n > int64(g.r.limits.MaxCalls) {
			finish("budget", "")
			return errorResult(fmt.Sprintf("the sandbox's MCP gateway has made its %d calls (SANDBOX_TOOLS_MAX_CALLS)", g.r.limits.MaxCalls)), nil
		}
		var args map[string]any
		if len(req.Params.Arguments) > 0 {
			if err := json.Unmarshal(req.Params.Arguments, &args); err != nil {
				finish("error", "arguments")
				return errorResult("the arguments are not a JSON object"), nil
			}
		}
		res, err := g.up.Call(ctx, t.Server, t.Name, args)
		switch {
		case errors.Is(err, upstream.ErrUnavailable):
			finish("unavailable", "")
			return errorResult("the server " + t.Server + " is unavailable"), nil
		case err != nil:
			finish("error", "")
			return errorResult(bounded.String(err.Error(), 2000)), nil
		}
		text := res.Text
		if max := g.r.limits.MaxResult; max > 0 && len(text) > max {
			text = text[:max]
		}
		outcome := "success"
		if res.IsError {
			outcome = "tool_error"
		}
		finish(outcome, "")
		out := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, IsError: res.IsError}
		if res.Structured != nil {
			out.StructuredContent = res.Structured
		}
		return out, nil
	}
}

func errorResult(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: msg}}, IsError: true}
}

// IDs are the sessions that have a gateway.
func (r *Registry) IDs() []string {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Collect(maps.Keys(r.by))
}
