package httpapi

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/codecage/codecage/internal/api"
	"github.com/codecage/codecage/internal/service"
)

// InstallInput is POST /pip_install.
type InstallInput struct {
	Body api.InstallParams
}

// InstallOutput is pip_install's result.
type InstallOutput struct {
	Body *service.InstallResult
}

func (s *Server) packageRoutes() {
	huma.Register(s.api, huma.Operation{
		OperationID: "pip-install", Method: http.MethodPost, Path: "/pip_install", Tags: []string{"Sessions"},
		Summary: "Install a Python package into a session",
		Description: "Installs a package (wheels only, dependencies included) into the session's own package directory, with pip running in a jail that can reach only the configured index. " +
			"A refused or failed install is a result with success false and error naming why: blocked, not_found, no_wheel, too_large, conflict, timeout or failed.",
		Errors: []int{400, 401, 404, 422, 429, 503}, MaxBodyBytes: s.cfg.MaxBodySize,
	}, func(ctx context.Context, in *InstallInput) (*InstallOutput, error) {
		res, err := s.svc.PipInstall(ctx, in.Body.Request(owner(ctx)))
		if err != nil {
			return nil, problemFor(err)
		}
		return &InstallOutput{Body: res}, nil
	})
}
