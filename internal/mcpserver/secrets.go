package mcpserver

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codecage/codecage/internal/api"
	"github.com/codecage/codecage/internal/service"
)

// SecretNameInput names a secret.
type SecretNameInput struct {
	Name string `json:"name" jsonschema:"The secret's name."`
}

// SecretList is list_secrets' result.
type SecretList struct {
	Secrets []service.SecretInfo `json:"secrets"`
}

// SessionCredentialsInput is set_session_egress_credentials' input.
type SessionCredentialsInput struct {
	SessionID string `json:"session_id" jsonschema:"The session's id, from create_session."`
	api.CredentialsParams
}

func (t *tools) registerSecrets(s *mcp.Server) {
	addTool(s, &mcp.Tool{Name: "create_secret", Title: "Store a secret",
		Description: "Stores a secret (an API key) under a name, replacing one of that name; sealed at rest, never shown again, never given to a sandbox: a session's egress_credentials bind it to a host, and the egress proxy adds it to that session's HTTPS requests there. For the program that drives an agent: a secret passed through a model's context is not secret.",
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: ptr(false)}}, t.createSecret)
	addTool(s, &mcp.Tool{Name: "list_secrets", Title: "List your secrets", Description: "Names and dates of your secrets; never a value.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, t.listSecrets)
	addTool(s, &mcp.Tool{Name: "delete_secret", Title: "Delete a secret", Description: "Forgets a secret; bindings that name it refuse new tunnels, naming the binding.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true)}}, t.deleteSecret)
	addTool(s, &mcp.Tool{Name: "set_session_egress_credentials", Title: "Bind secrets to a session's egress",
		Description: "Replaces a session's credential bindings (empty: none). Each names a stored secret and a host (exact, or *.suffix; optionally port, path_prefix, methods) and either a header to set (prefix + secret, as 'Authorization' with prefix 'Bearer ') or a placeholder the code sends in a header, which the proxy replaces. The code never holds the secret; plain HTTP, other hosts and redirects elsewhere never get it. A restart, pause, park and fork keep the bindings, never the values.",
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: ptr(false)}}, t.setSessionCredentials)
}

func (t *tools) createSecret(ctx context.Context, req *mcp.CallToolRequest, in api.SecretParams) (*mcp.CallToolResult, *service.SecretInfo, error) {
	info, err := t.svc.PutSecret(t.caller(ctx, req), t.owner(req), in.Name, in.Value)
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, &info, nil
}

func (t *tools) listSecrets(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, *SecretList, error) {
	list, err := t.svc.ListSecrets(t.caller(ctx, req), t.owner(req))
	if err != nil {
		return nil, nil, toolError(err)
	}
	return nil, &SecretList{Secrets: list}, nil
}

func (t *tools) deleteSecret(ctx context.Context, req *mcp.CallToolRequest, in SecretNameInput) (*mcp.CallToolResult, *struct{}, error) {
	if err := t.svc.DeleteSecret(t.caller(ctx, req), t.owner(req), in.Name); err != nil {
		return nil, nil, toolError(err)
	}
	return nil, &struct{}{}, nil
}

func (t *tools) setSessionCredentials(ctx context.Context, req *mcp.CallToolRequest, in SessionCredentialsInput) (*mcp.CallToolResult, *api.CredentialsParams, error) {
	list, err := t.svc.SetSessionCredentials(t.caller(ctx, req), in.SessionID, t.owner(req), in.Credentials)
	if err != nil {
		return nil, nil, toolError(err)
	}
	if list == nil {
		list = []service.EgressCredential{}
	}
	return nil, &api.CredentialsParams{Credentials: list}, nil
}
