package httpapi

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/codecage/codecage/internal/api"
	"github.com/codecage/codecage/internal/service"
)

// SecretInput is POST /secrets.
type SecretInput struct{ Body api.SecretParams }

// SecretOutput is a stored secret's name and date.
type SecretOutput struct{ Body service.SecretInfo }

// SecretsOutput lists secrets.
type SecretsOutput struct {
	Body struct {
		Secrets []service.SecretInfo `json:"secrets"`
	}
}

// SecretNameInput names a secret.
type SecretNameInput struct {
	Name string `path:"name" maxLength:"64" doc:"The secret's name."`
}

// SessionCredentialsInput is PUT /sessions/{id}/egress_credentials.
type SessionCredentialsInput struct {
	ID   string `path:"id" doc:"The session's id."`
	Body api.CredentialsParams
}

// SessionCredentialsOutput is the bindings in force.
type SessionCredentialsOutput struct{ Body api.CredentialsParams }

const secretsTag = "Secrets"

// secretRoutes registers the owner's secrets and a session's bindings.
func (s *Server) secretRoutes() {
	huma.Register(s.api, huma.Operation{
		OperationID: "create-secret", Method: http.MethodPost, Path: "/secrets", Tags: []string{secretsTag},
		Summary: "Store a secret", DefaultStatus: http.StatusCreated,
		Description: "Stores a secret of yours (replacing one of that name), sealed with the server's snapshot secret. " +
			"It is never shown again and never enters a sandbox: a session's egress_credentials name it, and the egress proxy adds it " +
			"to that session's HTTPS requests to the host they bind it to. A value goes into a header: no line breaks.",
		Errors: []int{400, 401, 429, 503}, MaxBodyBytes: 64 << 10,
	}, func(ctx context.Context, in *SecretInput) (*SecretOutput, error) {
		info, err := s.svc.PutSecret(ctx, owner(ctx), in.Body.Name, in.Body.Value)
		if err != nil {
			return nil, problemFor(err)
		}
		return &SecretOutput{Body: info}, nil
	})
	huma.Register(s.api, huma.Operation{
		OperationID: "list-secrets", Method: http.MethodGet, Path: "/secrets", Tags: []string{secretsTag},
		Summary: "List your secrets", Description: "Names and dates of your secrets; never a value.",
		Errors: []int{401, 503},
	}, func(ctx context.Context, _ *struct{}) (*SecretsOutput, error) {
		list, err := s.svc.ListSecrets(ctx, owner(ctx))
		if err != nil {
			return nil, problemFor(err)
		}
		out := &SecretsOutput{}
		out.Body.Secrets = list
		return out, nil
	})
	huma.Register(s.api, huma.Operation{
		OperationID: "delete-secret", Method: http.MethodDelete, Path: "/secrets/{name}", Tags: []string{secretsTag},
		Summary: "Delete a secret", DefaultStatus: http.StatusNoContent,
		Description: "Forgets a secret. Bindings that name it refuse the tunnels their sessions open from now on (502, naming the binding); " +
			"a tunnel already open keeps what it had.",
		Errors: []int{400, 401, 404, 503},
	}, func(ctx context.Context, in *SecretNameInput) (*struct{}, error) {
		if err := s.svc.DeleteSecret(ctx, owner(ctx), in.Name); err != nil {
			return nil, problemFor(err)
		}
		return nil, nil
	})
	huma.Register(s.api, huma.Operation{
		OperationID: "set-session-egress-credentials", Method: http.MethodPut, Path: "/sessions/{id}/egress_credentials", Tags: []string{"Sessions"},
		Summary: "Bind secrets to a session's egress",
		Description: "Replaces the session's credential bindings while it runs (empty: none). Each names a secret of yours and a host " +
			"(optionally a port, path prefix and methods); the proxy opens the session's HTTPS tunnels to that host with the session's " +
			"own certificate authority (in its trust store) and sets the header, or replaces the placeholder, in each matching request. " +
			"Plain HTTP, other hosts and redirects elsewhere never get it; response headers that echo it are dropped. " +
			"A restart, pause, park and fork keep the bindings (names, never values); the secrets named must exist (404 names those that do not).",
		Errors: []int{400, 401, 404, 409, 429}, MaxBodyBytes: s.cfg.MaxBodySize,
	}, func(ctx context.Context, in *SessionCredentialsInput) (*SessionCredentialsOutput, error) {
		list, err := s.svc.SetSessionCredentials(ctx, in.ID, owner(ctx), in.Body.Credentials)
		if err != nil {
			return nil, problemFor(err)
		}
		out := &SessionCredentialsOutput{}
		out.Body.Credentials = list
		if out.Body.Credentials == nil {
			out.Body.Credentials = []service.EgressCredential{}
		}
		return out, nil
	})
}
