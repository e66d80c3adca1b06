package httpapi

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/codecage/codecage/internal/api"
	"github.com/codecage/codecage/internal/service"
)

// SessionNetworkInput is PUT /sessions/{id}/network.
type SessionNetworkInput struct {
	ID   string `path:"id" doc:"The session's id."`
	Body api.NetworkParams
}

// SessionNetworkOutput is the rules in force.
type SessionNetworkOutput struct {
	Body struct {
		Network service.NetworkRules `json:"network" doc:"The session's egress rules now, each entry in its canonical form (empty: the operator's allow list alone)."`
	}
}

// networkRoutes registers a session's egress rules.
func (s *Server) networkRoutes() {
	huma.Register(s.api, huma.Operation{
		OperationID: "set-session-network", Method: http.MethodPut, Path: "/sessions/{id}/network", Tags: []string{"Sessions"},
		Summary: "Set a session's egress rules",
		Description: "Replaces the session's own egress rules while it runs (fields left out are cleared; an empty body clears them all). " +
			"They apply to every connection its code and commands open from now on, and a restart, a pause, a park and a fork keep them. " +
			"They narrow the operator's allow list and never widen it: a destination must be on that list, then pass these rules. " +
			"A session without the network profile takes no allow_out (400): deny_out alone grants nothing.",
		Errors: []int{400, 401, 404, 409, 429}, MaxBodyBytes: s.cfg.MaxBodySize,
	}, func(ctx context.Context, in *SessionNetworkInput) (*SessionNetworkOutput, error) {
		rules, err := s.svc.SetSessionNetwork(ctx, in.ID, owner(ctx), *in.Body.Rules())
		if err != nil {
			return nil, problemFor(err)
		}
		out := &SessionNetworkOutput{}
		out.Body.Network = rules
		return out, nil
	})
}
