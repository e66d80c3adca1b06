package httpapi

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/codecage/codecage/internal/service"
)

// CodeToolsOutput is GET /tools.
type CodeToolsOutput struct {
	Body struct {
		Tools   []service.CodeTool   `json:"tools"`
		Servers []service.CodeServer `json:"servers"`
	}
}

func (s *Server) codeToolRoutes() {
	huma.Register(s.api, huma.Operation{
		OperationID: "list-code-tools", Method: http.MethodGet, Path: "/tools", Tags: []string{"Execution"},
		Summary: "Upstream tools code can call",
		Description: "The other MCP servers' tools that code can call as tools.<server>.<tool>(...), with their Python signatures; " +
			"the servers' credentials stay in this server. POST /execute's tools field narrows a run to some of them.",
		Errors: []int{401, 503},
	}, func(ctx context.Context, _ *struct{}) (*CodeToolsOutput, error) {
		list, servers, err := s.svc.CodeTools(ctx)
		if err != nil {
			return nil, problemFor(err)
		}
		out := &CodeToolsOutput{}
		out.Body.Tools, out.Body.Servers = list, servers
		return out, nil
	})
}
