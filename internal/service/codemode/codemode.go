// Package codemode is code mode: the upstream MCP tools a run's code may
// call (tools.<server>.<tool>), narrowed to a request's list, described to
// the harness, and each call the code makes answered within the run's
// budget, timeout and result bound, as an event. It is a domain of the
// service: the root resolves a run's tools here and hands the caller to
// the run; it owns no session and no admission.
package codemode

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/service/errdefs"
	"github.com/codecage/codecage/internal/service/event"
	"github.com/codecage/codecage/internal/upstream"
)

// EventToolCall is the event kind of one call the code made to an
// upstream tool.
const EventToolCall = "tool_call"

// Limits bound a run's tool calls (SANDBOX_TOOLS_*).
type Limits struct {
	MaxCalls  int
	Timeout   time.Duration
	MaxResult int64
}

// CodeMode answers code mode's requests over the operator's upstream
// servers; with no upstream (nil), a run has no tools.
type CodeMode struct {
	upstream *upstream.Manager
	limits   Limits
	emit     func(context.Context, event.Event)
}

// New is code mode over up (nil: none), reporting each call through emit.
func New(up *upstream.Manager, limits Limits, emit func(context.Context, event.Event)) *CodeMode {
	return &CodeMode{upstream: up, limits: limits, emit: emit}
}

// CodeTool describes an upstream tool to a model writing code against it.
type CodeTool struct {
	Name        string `json:"name" doc:"server.tool, as tools.<server>.<tool> in code and in execute_code's tools list"`
	Signature   string `json:"signature" doc:"The Python signature and docstring of tools.<server>.<tool>."`
	Description string `json:"description"`
}

// CodeServer is the state of one upstream MCP server.
type CodeServer struct {
	Name      string `json:"name"`
	Transport string `json:"transport" enum:"stdio,http"`
	Connected bool   `json:"connected"`
	Tools     int    `json:"tools" doc:"The tools it exposes, as last listed."`
	Error     string `json:"error,omitempty" doc:"Why it is not connected, or why listing its tools failed."`
}

// List lists the upstream tools code may call, with their Python
// signatures, and the servers' state.
func (m *CodeMode) List(ctx context.Context) ([]CodeTool, []CodeServer, error) {
	if m.upstream == nil {
		return []CodeTool{}, []CodeServer{}, nil
	}
	tools, err := m.upstream.Tools(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	out := make([]CodeTool, 0, len(tools))
	for _, t := range tools {
		out = append(out, CodeTool{Name: t.QualifiedName(), Signature: upstream.Signature(t), Description: t.Description})
	}
	status := m.upstream.Status()
	servers := make([]CodeServer, 0, len(status))
	for _, st := range status {
		servers = append(servers, CodeServer{Name: st.Name, Transport: st.Transport, Connected: st.Connected, Tools: st.Tools, Error: st.Error})
	}
	return out, servers, nil
}

// Resolve resolves the tools a request may call: every tool the operator
// exposes, narrowed by the request's list ("server.tool", "server.*" or
// "server"). Asking for a tool that does not exist is an error.
func (m *CodeMode) Resolve(ctx context.Context, scope []string) ([]upstream.Tool, error) {
	if m.upstream == nil {
		if len(scope) > 0 {
			return nil, fmt.Errorf("%w: this server has no upstream tools (SANDBOX_TOOLS_CONFIG)", errdefs.ErrInvalidRequest)
		}
		return nil, nil
	}
	if scope != nil && len(scope) == 0 {
		return nil, nil // the request wants none
	}
	all, err := m.upstream.Tools(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: upstream tools: %v", errdefs.ErrUnavailable, err)
	}
	if scope == nil {
		return all, nil
	}
	var out []upstream.Tool
	for _, want := range scope {
		server, tool, _ := strings.Cut(want, ".")
		n := 0
		for _, t := range all {
			if t.Server == server && (tool == "" || tool == "*" || tool == t.Name) {
				if !slices.ContainsFunc(out, func(o upstream.Tool) bool { return o.QualifiedName() == t.QualifiedName() }) {
					out = append(out, t)
				}
				n++
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("%w: no upstream tool %q among the code tools this server lists", errdefs.ErrInvalidRequest, want)
		}
	}
	return out, nil
}

// Specs describes the tools to the harness, each function's
// parameters named and ordered as in the stub the model reads
// (upstream.Signature): required ones first, in the schema's order, then
// the optional ones by name.
func Specs(tools []upstream.Tool) []fleet.ToolSpec {
	out := make([]fleet.ToolSpec, 0, len(tools))
	for _, t := range tools {
		spec := fleet.ToolSpec{Server: t.Server, Name: t.Name, Py: upstream.PythonName(t.Name), Doc: upstream.Signature(t)}
		pyOf := map[string]string{}
		for py, name := range upstream.ArgNames(t) {
			pyOf[name] = py
		}
		props, _ := t.InputSchema["properties"].(map[string]any)
		var required, optional []string
		isRequired := map[string]bool{}
		if req, ok := t.InputSchema["required"].([]any); ok {
			for _, r := range req {
				if name, ok := r.(string); ok && props[name] != nil && !isRequired[name] {
					isRequired[name] = true
					required = append(required, name)
				}
			}
		}
		for name := range props {
			if !isRequired[name] {
				optional = append(optional, name)
			}
		}
		slices.Sort(optional)
		for _, name := range append(required, optional...) {
			py := pyOf[name]
			if py == "" {
				py = upstream.PythonName(name)
			}
			p := fleet.ToolParam{Name: name, Py: py, Required: isRequired[name]}
			if prop, ok := props[name].(map[string]any); ok && !p.Required {
				if d, ok := prop["default"]; ok {
					b, _ := json.Marshal(d)
					p.Default = string(b)
				}
			}
			spec.Params = append(spec.Params, p)
		}
		out = append(out, spec)
	}
	return out
}

// Caller answers one run's tool calls: only the run's tools, within the
// call budget, each call with its timeout and a capped result. Every call
// counts against the budget, refused ones too, and is an event (metrics,
// audit), except that of the calls over the budget only the first
// event.MaxRefusedPerRun are: done, called when the run is over, sums up the
// rest in one event.
func (m *CodeMode) Caller(ctx context.Context, tools []upstream.Tool, execID *string) (handle fleet.ToolHandler, done func()) {
	allowed := map[string]bool{}
	for _, t := range tools {
		allowed[t.QualifiedName()] = true
	}
	var calls atomic.Int64
	over := bounded.NewQuota(event.MaxRefusedPerRun)
	handle = func(c *fleet.ToolCall) fleet.ToolResult {
		start := time.Now()
		res := fleet.ToolResult{ID: c.ID}
		name := bounded.String(c.Tool, event.MaxName)
		// The name is in the event once, as its code; details and
		// security events do not repeat it.
		ev := event.Event{Kind: EventToolCall, ExecutionID: *execID, Code: name}
		finish := func(outcome, detail string) fleet.ToolResult {
			ev.Outcome, ev.Detail, ev.Duration = outcome, detail, time.Since(start)
			if outcome == "denied" {
				ev.SecurityEvents = []string{"tool_denied"}
			}
			m.emit(ctx, ev)
			return res
		}
		if n := calls.Add(1); n > int64(m.limits.MaxCalls) {
			res.Error = fmt.Sprintf("the run's budget of %d tool calls is spent (SANDBOX_TOOLS_MAX_CALLS)", m.limits.MaxCalls)
			if !over.Take() {
				return res
			}
			return finish("budget", res.Error)
		}
		if !allowed[c.Tool] {
			res.Error = fmt.Sprintf("tool %q is not allowed in this run (allowed: %s)", name, strings.Join(mapKeys(allowed), ", "))
			return finish("denied", "not among the run's tools")
		}
		var args map[string]any
		if len(c.Args) > 0 && json.Unmarshal(c.Args, &args) != nil {
			res.Error = "the arguments are not a JSON object"
			return finish("error", res.Error)
		}
		server, tool, _ := strings.Cut(c.Tool, ".")
		cctx, cancel := context.WithTimeout(ctx, m.limits.Timeout)
		defer cancel()
		out, err := m.upstream.Call(cctx, server, tool, args)
		if err != nil {
			res.Error = fmt.Sprintf("%s: %v", c.Tool, err)
			return finish("unavailable", res.Error)
		}
		if out.IsError {
			res.Error = out.Text
			if res.Error == "" {
				res.Error = c.Tool + " failed"
			}
			return finish("tool_error", res.Error)
		}
		value := out.Structured
		if value == nil {
			value = out.Text
		}
		b, err := json.Marshal(value)
		if err != nil {
			res.Error = "the tool's result is not JSON"
			return finish("error", res.Error)
		}
		if int64(len(b)) > m.limits.MaxResult {
			res.Error = fmt.Sprintf("%s returned %d bytes, over the limit of %d (SANDBOX_TOOLS_MAX_RESULT)", c.Tool, len(b), m.limits.MaxResult)
			return finish("too_large", res.Error)
		}
		res.OK, res.Value = true, string(b)
		return finish("success", "")
	}
	done = func() {
		if more := over.Summary("tool calls over the budget, not recorded one by one"); more != "" {
			m.emit(ctx, event.Event{Kind: EventToolCall, ExecutionID: *execID, Outcome: "budget", Detail: more})
		}
	}
	return handle, done
}

func mapKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
