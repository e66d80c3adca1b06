package mcpserver

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codecage/codecage/internal/service"
)

// SessionLogsInput is session_logs' input.
type SessionLogsInput struct {
	SessionID string `json:"session_id" jsonschema:"The session's id, from create_session."`
	Level     string `json:"level,omitempty" jsonschema:"The least severe level returned: debug, info, warn or error."`
	Search    string `json:"search,omitempty" jsonschema:"Only entries whose message holds this text (case-sensitive)."`
	Limit     int    `json:"limit,omitempty" jsonschema:"The most entries returned, up to 1000 (the default)."`
	Newest    bool   `json:"newest_first,omitempty" jsonschema:"Newest first (default: oldest first)."`
}

// SessionLogs is session_logs' result.
type SessionLogs struct {
	Logs []service.LogEntry `json:"logs"`
}

func (t *tools) registerLogs(s *mcp.Server) {
	addTool(s, &mcp.Tool{Name: "session_logs", Title: "Read a session's log",
		Description: "What happened to a session, as a machine's system log says it: its start, pauses and restarts, each command's start and end, each request's outcome, and what its interpreter wrote to stderr. The newest entries are kept, each capped.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, t.sessionLogs)
}

func (t *tools) sessionLogs(ctx context.Context, req *mcp.CallToolRequest, in SessionLogsInput) (*mcp.CallToolResult, *SessionLogs, error) {
	logs, err := t.svc.SessionLogs(t.caller(ctx, req), in.SessionID, t.owner(req),
		service.LogQuery{MinLevel: in.Level, Search: in.Search, Limit: in.Limit, Backward: in.Newest})
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, &SessionLogs{Logs: logs}, nil
}
