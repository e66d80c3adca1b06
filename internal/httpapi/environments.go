package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/service"
	"github.com/codecage/codecage/internal/streamwrite"
)

// EnvironmentParams is POST /environments' body: a name and exactly one
// source.
type EnvironmentParams struct {
	Name         string            `json:"name" maxLength:"64" doc:"The environment's name: 1 to 64 of a-z, 0-9, '.', '_' and '-', starting with a letter or digit. Runs and sessions name it in environment."`
	Requirements []string          `json:"requirements,omitempty" maxItems:"500" doc:"Source: pip requirement lines (name[extras] and version specifiers, as pip_install takes them; no options, URLs or paths), installed as wheels from the configured index or wheelhouse into a layer over base (or the host's root)."`
	Base         string            `json:"base,omitempty" maxLength:"64" doc:"With requirements: the environment whose root the layer goes over (default: the host's)."`
	Debian       []string          `json:"debian,omitempty" maxItems:"1000" doc:"Source: Debian packages, a root built with mmdebstrap."`
	Suite        string            `json:"suite,omitempty" maxLength:"64" doc:"With debian: the release (default: the host's)."`
	Image        string            `json:"image,omitempty" maxLength:"4096" doc:"Source: an image tarball (docker save, OCI archive) or OCI layout directory on the server's host, or a registry reference it can reach."`
	Dockerfile   string            `json:"dockerfile,omitempty" doc:"Source: a Dockerfile's text, built with buildah; a FROM may name an environment."`
	ContextDir   string            `json:"context_dir,omitempty" maxLength:"4096" doc:"With dockerfile: the build context, a directory on the server's host."`
	Preimport    []string          `json:"preimport,omitempty" maxItems:"64" doc:"Modules the environment's sandboxes import before any run; each must import at build time."`
	StartCmd     string            `json:"start_cmd,omitempty" maxLength:"4096" doc:"A command started in the background when a sandbox starts (default: an image's entrypoint and command)."`
	ReadyCmd     string            `json:"ready_cmd,omitempty" maxLength:"4096" doc:"A command that must succeed before a sandbox is handed out."`
	Workdir      string            `json:"workdir,omitempty" maxLength:"4096" doc:"The sandboxes' working directory (default: an image's)."`
	Vars         map[string]string `json:"vars,omitempty" doc:"The sandboxes' environment variables (an image's are added where not set here)."`
}

// Build is the service's build request.
func (p EnvironmentParams) Build() service.EnvironmentBuild {
	return service.EnvironmentBuild{Name: p.Name, Requirements: p.Requirements, Base: p.Base, Debian: p.Debian, Suite: p.Suite,
		Image: p.Image, Dockerfile: p.Dockerfile, ContextDir: p.ContextDir, Preimport: p.Preimport,
		StartCmd: p.StartCmd, ReadyCmd: p.ReadyCmd, Workdir: p.Workdir, Vars: p.Vars}
}

// BuildEnvironmentInput is POST /environments.
type BuildEnvironmentInput struct {
	Accept string `header:"Accept" doc:"application/json (default): the build's record once built (201); text/event-stream: its log as it comes, then the record."`
	Body   EnvironmentParams
}

// EnvironmentNameInput names an environment in the path.
type EnvironmentNameInput struct {
	Name string `path:"name" maxLength:"64" doc:"The environment's name."`
}

// EnvironmentOutput is one environment's record.
type EnvironmentOutput struct {
	Body envstore.Env
}

// EnvironmentListOutput is GET /environments.
type EnvironmentListOutput struct {
	Body struct {
		Environments []envstore.Env `json:"environments"`
	}
}

// EnvironmentGCOutput is POST /environments/gc.
type EnvironmentGCOutput struct {
	Body service.GCResult
}

// LogLine is the data of a build's log event.
type LogLine struct {
	Line string `json:"line" doc:"One line of the build's log (pip, mmdebstrap, buildah, the checks), at most 2000 bytes."`
}

const operatorsOnly = " Operators only: an API key named in SANDBOX_OPERATOR_KEYS, or, on a server without API keys, a caller on loopback; anyone else gets 403 (forbidden)."

func (s *Server) environmentRoutes() {
	envSchema := s.api.OpenAPI().Components.Schemas.Schema(reflect.TypeOf(envstore.Env{}), true, "Environment")
	lineSchema := s.api.OpenAPI().Components.Schemas.Schema(reflect.TypeOf(LogLine{}), true, "LogLine")
	problemSchema := s.api.OpenAPI().Components.Schemas.Schema(reflect.TypeOf(Problem{}), true, "Problem")
	tags := []string{"Environments"}
	huma.Register(s.api, huma.Operation{
		OperationID: "build-environment", Method: http.MethodPost, Path: "/environments", Tags: tags,
		Summary: "Build an environment",
		Description: "Builds a named, read-only environment that runs and sessions can start from, from exactly one source: Python requirements (a packages layer over the host's root or a base environment), Debian packages, an OCI image, or a Dockerfile. " +
			"The build checks that the environment has a usable Python >= 3.9 (running it in a sandbox from the environment's root) and that its pre-imports import; a failed build leaves nothing behind (422, build_failed, the detail says why). " +
			"A name that exists or is being built is 409 (environment_exists); too many builds at once (SANDBOX_ENV_MAX_BUILDS) 503 (busy). " +
			"By default the answer waits for the build: 201 with the record. With Accept: text/event-stream, `log` events carry the build's log lines (LogLine) as they come, then one `result` event the record (Environment) or one `error` event a Problem." + operatorsOnly,
		DefaultStatus: http.StatusCreated,
		Responses: map[string]*huma.Response{
			"201": {Description: "The environment, built and recorded (Accept: application/json).",
				Content: map[string]*huma.MediaType{"application/json": {Schema: envSchema}}},
			"200": {Description: "The build's event stream (Accept: text/event-stream).",
				Content: map[string]*huma.MediaType{"text/event-stream": {Schema: &huma.Schema{Type: "string",
					Description: "log events (" + lineSchema.Ref + "), then a result event (" + envSchema.Ref + ") or an error event (" + problemSchema.Ref + ")."}}}},
		},
		Errors: []int{400, 401, 403, 404, 409, 413, 422, 429, 503}, MaxBodyBytes: s.cfg.MaxBodySize,
	}, func(ctx context.Context, in *BuildEnvironmentInput) (*huma.StreamResponse, error) {
		return s.buildEnvironment(ctx, in.Body.Build(), in.Accept)
	})
	huma.Register(s.api, huma.Operation{
		OperationID: "list-environments", Method: http.MethodGet, Path: "/environments", Tags: tags,
		Summary: "List environments", Description: "Every environment, by name." + operatorsOnly,
		Errors: []int{401, 403, 429, 503},
	}, func(ctx context.Context, _ *struct{}) (*EnvironmentListOutput, error) {
		envs, err := s.svc.Environments(ctx)
		if err != nil {
			return nil, problemFor(err)
		}
		out := &EnvironmentListOutput{}
		out.Body.Environments = envs
		return out, nil
	})
	huma.Register(s.api, huma.Operation{
		OperationID: "get-environment", Method: http.MethodGet, Path: "/environments/{name}", Tags: tags,
		Summary: "Describe an environment", Description: "The environment's record: source, content ID, size, Python, modules, pre-imports, start command, working directory, variables." + operatorsOnly,
		Errors: []int{400, 401, 403, 404, 429},
	}, func(ctx context.Context, in *EnvironmentNameInput) (*EnvironmentOutput, error) {
		e, err := s.svc.Environment(ctx, in.Name)
		if err != nil {
			return nil, problemFor(err)
		}
		return &EnvironmentOutput{Body: e}, nil
	})
	huma.Register(s.api, huma.Operation{
		OperationID: "remove-environment", Method: http.MethodDelete, Path: "/environments/{name}", Tags: tags,
		Summary:       "Remove an environment",
		Description:   "Removes the environment's record: new runs and sessions can no longer name it; those running from it keep it. Its root and layer are freed by POST /environments/gc unless another environment shares them." + operatorsOnly,
		DefaultStatus: http.StatusNoContent,
		Errors:        []int{400, 401, 403, 404, 429, 503},
	}, func(ctx context.Context, in *EnvironmentNameInput) (*struct{}, error) {
		if err := s.svc.RemoveEnvironment(ctx, in.Name); err != nil {
			return nil, problemFor(err)
		}
		return nil, nil
	})
	huma.Register(s.api, huma.Operation{
		OperationID: "collect-environments", Method: http.MethodPost, Path: "/environments/gc", Tags: tags,
		Summary:     "Free unused environment storage",
		Description: "Removes the roots and layers no environment uses. While sandboxes still run from a removed environment nothing is collected, and deferred names what is waited for." + operatorsOnly,
		Errors:      []int{401, 403, 429, 503},
	}, func(ctx context.Context, _ *struct{}) (*EnvironmentGCOutput, error) {
		r, err := s.svc.CollectEnvironments(ctx)
		if err != nil {
			return nil, problemFor(err)
		}
		return &EnvironmentGCOutput{Body: r}, nil
	})
}

// buildEnvironment answers POST /environments: the record once built
// (201), or, when the client accepts an event stream, the build's log as
// it comes and then the record. A build outlives the server's write
// timeout: each write has a deadline of its own (streamwrite).
func (s *Server) buildEnvironment(ctx context.Context, b service.EnvironmentBuild, accept string) (*huma.StreamResponse, error) {
	if !strings.Contains(accept, "text/event-stream") {
		return &huma.StreamResponse{Body: func(hc huma.Context) {
			_, w := humago.Unwrap(hc)
			w = streamwrite.Wrap(w, max(s.cfg.StreamWriteTimeout, time.Second))
			e, err := s.svc.BuildEnvironment(ctx, b)
			if err != nil {
				writeProblem(w, problemFor(err))
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(e)
		}}, nil
	}
	return &huma.StreamResponse{Body: func(hc huma.Context) {
		_, w := humago.Unwrap(hc)
		w = streamwrite.Wrap(w, s.cfg.StreamWriteTimeout)
		ev := &eventWriter{w: w, rc: http.NewResponseController(w)}
		// A request refused at once (not an operator, a bad name) gets a
		// plain problem answer; the stream starts with the first line.
		b.Log = logEvents{ev}
		e, err := s.svc.BuildEnvironment(ctx, b)
		if err != nil {
			if !ev.startedOrClaim() {
				writeProblem(w, problemFor(err))
				return
			}
			ev.send("error", problemFor(err))
			return
		}
		ev.send("result", e)
	}}, nil
}

// logEvents writes each line of a build's log (the service writes whole,
// capped lines) as a log event.
type logEvents struct{ ev *eventWriter }

func (l logEvents) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimSuffix(string(p), "\n"), "\n") {
		l.ev.send("log", LogLine{Line: line})
	}
	return len(p), nil
}
