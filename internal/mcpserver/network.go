package mcpserver

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codecage/codecage/internal/api"
	"github.com/codecage/codecage/internal/service"
)

// SessionNetworkInput is set_session_network's input.
type SessionNetworkInput struct {
	SessionID string `json:"session_id" jsonschema:"The session's id, from create_session."`
	api.NetworkParams
}

// SessionNetwork is set_session_network's result.
type SessionNetwork struct {
	Network service.NetworkRules `json:"network"`
}

func (t *tools) registerNetwork(s *mcp.Server) {
	addTool(s, &mcp.Tool{Name: "set_session_network", Title: "Set a session's egress rules",
		Description: "Replaces a session's own egress rules while it runs (left out: cleared). They narrow the operator's allow list, never widen it: allow_out lets names, wildcards, addresses and CIDR blocks through; deny_out refuses addresses and CIDR blocks (0.0.0.0/0: all) that allow_out does not let through. A restart, pause, park and fork keep them.",
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: ptr(false)}}, t.setSessionNetwork)
}

func (t *tools) setSessionNetwork(ctx context.Context, req *mcp.CallToolRequest, in SessionNetworkInput) (*mcp.CallToolResult, *SessionNetwork, error) {
	rules, err := t.svc.SetSessionNetwork(t.caller(ctx, req), in.SessionID, t.owner(req), *in.NetworkParams.Rules())
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, &SessionNetwork{Network: rules}, nil
}
