package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/codecage/codecage/internal/api"
	"github.com/codecage/codecage/internal/service"
)

func (s *Server) routes() {
	s.executeRoutes()
	s.infoRoutes()
	s.sessionRoutes()
	s.persistRoutes()
	s.commandRoutes()
	s.packageRoutes()
	s.codeToolRoutes()
	s.environmentRoutes()
}

// ValidateInput is POST /validate.
type ValidateInput struct {
	Body api.ValidateParams
}

// ValidateOutput is validate_code's answer.
type ValidateOutput struct {
	Body *service.Validation
}

// InfoOutput is GET /info.
type InfoOutput struct {
	Body service.Info
}

// Health is GET /health's body.
type Health struct {
	Status  string  `json:"status" enum:"ok"`
	Version string  `json:"version"`
	Uptime  float64 `json:"uptime_seconds"`
}

// HealthOutput is GET /health.
type HealthOutput struct {
	Body Health
}

// Readiness is GET /ready's body.
type Readiness struct {
	Ready  bool              `json:"ready"`
	Checks map[string]string `json:"checks" doc:"Each check's state: ok, or why it fails."`
}

// ReadyOutput is GET /ready.
type ReadyOutput struct {
	Status int
	Body   Readiness
}

func (s *Server) infoRoutes() {
	huma.Register(s.api, huma.Operation{
		OperationID: "validate", Method: http.MethodPost, Path: "/validate", Tags: []string{"Execution"},
		Summary:     "Check code without running it",
		Description: "Parses the code (in a sandbox) and reports syntax errors with line and column, imports the profile would refuse (and which profile allows them), dynamic features worth a look, and a complexity estimate.",
		Errors:      []int{400, 401, 413, 422, 429, 503}, MaxBodyBytes: s.cfg.MaxBodySize,
	}, func(ctx context.Context, in *ValidateInput) (*ValidateOutput, error) {
		v, err := s.svc.Validate(ctx, in.Body.Request())
		if err != nil {
			return nil, problemFor(err)
		}
		return &ValidateOutput{Body: v}, nil
	})
	huma.Register(s.api, huma.Operation{
		OperationID: "info", Method: http.MethodGet, Path: "/info", Tags: []string{"Server"},
		Summary:     "Profiles, limits and isolation",
		Description: "The get_sandbox_info object: security profiles (enabled or not, with their modules), resource limits and maximums, container mode, network egress, and the isolation layers in force on this host.",
		Errors:      []int{401},
	}, func(ctx context.Context, _ *struct{}) (*InfoOutput, error) {
		return &InfoOutput{Body: s.svc.Info()}, nil
	})
	huma.Register(s.api, huma.Operation{
		OperationID: "health", Method: http.MethodGet, Path: "/health", Tags: []string{"Server"},
		Summary: "Liveness", Description: "Answers while the process serves requests. Needs no API key.", Security: []map[string][]string{},
	}, func(ctx context.Context, _ *struct{}) (*HealthOutput, error) {
		return &HealthOutput{Body: Health{Status: "ok", Version: s.version, Uptime: time.Since(s.started).Seconds()}}, nil
	})
	huma.Register(s.api, huma.Operation{
		OperationID: "ready", Method: http.MethodGet, Path: "/ready", Tags: []string{"Server"},
		Summary:     "Readiness",
		Description: "200 when the warm pools have sandboxes ready, the server has room for another request (its running slots or its queue), and the audit log is reachable, else 503 with the failing checks. Needs no API key.",
		Security:    []map[string][]string{},
		Responses:   map[string]*huma.Response{"503": {Description: "Not ready; the body says which checks fail."}},
	}, func(ctx context.Context, _ *struct{}) (*ReadyOutput, error) {
		checks := s.readiness(ctx)
		out := &ReadyOutput{Status: http.StatusOK, Body: Readiness{Ready: true, Checks: checks}}
		for _, v := range checks {
			if v != "ok" {
				out.Status, out.Body.Ready = http.StatusServiceUnavailable, false
			}
		}
		return out, nil
	})
}

// readiness runs the checks: each warm pool has a sandbox ready (or is
// starting its first), and the checks of the server's options.
func (s *Server) readiness(ctx context.Context) map[string]string {
	checks := map[string]string{}
	for class, st := range s.svc.PoolStats() {
		state := "ok"
		if st.Ready == 0 && st.InUse == 0 && st.Created == 0 {
			state = "no sandbox started yet"
		}
		checks["pool_"+class] = state
	}
	// A replica whose slots and queue are full would refuse the next
	// request as busy: out of a load balancer's rotation, it gets none.
	checks["capacity"] = "ok"
	if max := s.cfg.MaxConcurrent; max > 0 && s.svc.Running() >= max && s.svc.Waiting() >= s.cfg.QueueSize {
		checks["capacity"] = fmt.Sprintf("full: %d requests running (SANDBOX_MAX_CONCURRENT) and %d waiting (SANDBOX_QUEUE_SIZE)", s.svc.Running(), s.svc.Waiting())
	}
	// Every sandbox exists and callers queue for one: the next request
	// waits, or is refused as busy.
	checks["sandboxes"] = "ok"
	if b := s.svc.Budget(); b.Waiting > 0 && b.InUse >= b.Max {
		checks["sandboxes"] = fmt.Sprintf("full: all %d sandboxes exist (SANDBOX_MAX_SANDBOXES) and %d requests wait for one", b.Max, b.Waiting)
	}
	if s.ready != nil {
		for k, v := range s.ready(ctx) {
			if v == "" {
				v = "ok"
			}
			checks[k] = v
		}
	}
	return checks
}
