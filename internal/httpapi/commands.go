package httpapi

import (
	"context"
	"net/http"
	"reflect"

	"github.com/danielgtaylor/huma/v2"

	"github.com/codecage/codecage/internal/api"
	"github.com/codecage/codecage/internal/service"
)

// CommandInput is POST /commands.
type CommandInput struct {
	Accept string `header:"Accept" doc:"application/json (default), or text/event-stream for output lines as they come, then the result."`
	Body   api.CommandParams
}

func (s *Server) commandRoutes() {
	resultSchema := s.api.OpenAPI().Components.Schemas.Schema(reflect.TypeOf(service.CommandResult{}), true, "CommandResult")
	huma.Register(s.api, huma.Operation{
		OperationID: "run-command", Method: http.MethodPost, Path: "/commands", Tags: []string{"Execution"},
		Summary: "Run a shell command",
		Description: "Runs a command line under /bin/sh -c in a sandbox (a session's workspace with session_id, else a fresh one) whose root holds only the allowed programs (see /info: commands): the kernel refuses to execute anything else. " +
			"A failing command is a result with success false and its exit code. With Accept: text/event-stream, `stdout` and `stderr` events carry the lines as they come, then a `result` event the CommandResult.",
		Responses: map[string]*huma.Response{"200": {
			Description: "The command's result.",
			Content: map[string]*huma.MediaType{
				"application/json":  {Schema: resultSchema},
				"text/event-stream": {Schema: &huma.Schema{Type: "string", Description: "stdout and stderr events (StreamLine), then a result event (CommandResult) or an error event (Problem)."}},
			},
		}},
		Errors: []int{400, 401, 404, 409, 413, 422, 429, 503}, MaxBodyBytes: s.cfg.MaxBodySize,
	}, func(ctx context.Context, in *CommandInput) (*huma.StreamResponse, error) {
		req, err := in.Body.Request(owner(ctx))
		if err != nil {
			return nil, problemFor(err)
		}
		return s.stream(in.Accept, func(onOutput func(stream, line string)) (any, error) {
			req.OnOutput = onOutput
			return s.svc.RunCommand(ctx, req)
		})
	})
}
