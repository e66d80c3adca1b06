package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/codecage/codecage/internal/api"
	"github.com/codecage/codecage/internal/service"
	"github.com/codecage/codecage/internal/streamwrite"
)

// ExecuteInput is POST /execute: the execute_code parameters, and Accept
// to choose a JSON result or an event stream.
type ExecuteInput struct {
	Accept string `header:"Accept" doc:"application/json (default) for the result object; text/event-stream for stdout and stderr lines as they come, then the result."`
	Body   api.ExecuteParams
}

// SessionExecuteInput is POST /sessions/{id}/execute.
type SessionExecuteInput struct {
	ID     string `path:"id" doc:"The session's id."`
	Accept string `header:"Accept" doc:"application/json (default) or text/event-stream."`
	Body   struct {
		Code     string  `json:"code" doc:"Source to run in the session: Python 3 in its interpreter, or the language's code in its kernel."`
		Timeout  float64 `json:"timeout,omitempty" doc:"Wall-clock limit in seconds."`
		Display  bool    `json:"display,omitempty" doc:"Also return rich results: display (the last value by MIME type) and outputs (display() calls, figures as image/png and e2b/chart, DataFrames as e2b/data, in order); figures then come in outputs, not images."`
		Language string  `json:"language,omitempty" doc:"python (default), or javascript (js), typescript (ts) or bash: the session's kernel of that language, stateful across calls like the interpreter (each enabled by the operator, SANDBOX_KERNELS; see /info: kernels). An unknown or disabled language is a 400."`
	}
}

// StreamLine is the data of a stdout or stderr event.
type StreamLine struct {
	Stream string `json:"stream" enum:"stdout,stderr"`
	Line   string `json:"line" doc:"One line of output, without its newline."`
}

func (s *Server) executeRoutes() {
	resultSchema := s.api.OpenAPI().Components.Schemas.Schema(reflect.TypeOf(service.Result{}), true, "ExecuteResult")
	lineSchema := s.api.OpenAPI().Components.Schemas.Schema(reflect.TypeOf(StreamLine{}), true, "StreamLine")
	problemSchema := s.api.OpenAPI().Components.Schemas.Schema(reflect.TypeOf(Problem{}), true, "Problem")
	streamDoc := "With Accept: text/event-stream, events `stdout` and `stderr` carry a StreamLine each as the code prints, then one `result` event carries the ExecuteResult (or one `error` event a Problem). " +
		"The run never waits for the client: lines a slow client has not taken past a bound are left out of the stream (the result's output_dropped counts them; its stdout and stderr hold them all)."
	responses := func() map[string]*huma.Response {
		return map[string]*huma.Response{"200": {
			Description: "The execution's result. Failures of the code (exceptions, limits, crashes) are results with success false; errors are for requests that could not run.",
			Content: map[string]*huma.MediaType{
				"application/json":  {Schema: resultSchema},
				"text/event-stream": {Schema: &huma.Schema{Type: "string", Description: streamDoc + " Schemas: " + lineSchema.Ref + ", " + resultSchema.Ref + ", " + problemSchema.Ref}},
			},
		}}
	}
	errs := []int{400, 401, 404, 409, 413, 422, 429, 503}
	huma.Register(s.api, huma.Operation{
		OperationID: "execute", Method: http.MethodPost, Path: "/execute", Tags: []string{"Execution"},
		Summary:     "Run Python code",
		Description: "Runs the code in a fresh sandbox (or in a session's interpreter with session_id) and returns stdout, stderr, the value of the last expression, figures as PNG images, and what ended the run. " + streamDoc,
		Responses:   responses(), Errors: errs, MaxBodyBytes: s.cfg.MaxBodySize,
	}, func(ctx context.Context, in *ExecuteInput) (*huma.StreamResponse, error) {
		req, err := in.Body.Request(s.cfg.MaxTimeout, owner(ctx))
		if err != nil {
			return nil, problemFor(err)
		}
		return s.execute(ctx, req, in.Accept)
	})
	huma.Register(s.api, huma.Operation{
		OperationID: "session-execute", Method: http.MethodPost, Path: "/sessions/{id}/execute", Tags: []string{"Sessions"},
		Summary:     "Run code in a session",
		Description: "Runs the code in the session's interpreter (or, with language, its kernel of that language): variables, imports and /workspace files persist between calls. The same as POST /execute with session_id. " + streamDoc,
		Responses:   responses(), Errors: errs, MaxBodyBytes: s.cfg.MaxBodySize,
	}, func(ctx context.Context, in *SessionExecuteInput) (*huma.StreamResponse, error) {
		req, err := api.ExecuteParams{Code: in.Body.Code, Timeout: in.Body.Timeout, SessionID: in.ID, Language: in.Body.Language, Display: in.Body.Display}.Request(s.cfg.MaxTimeout, owner(ctx))
		if err != nil {
			return nil, problemFor(err)
		}
		return s.execute(ctx, req, in.Accept)
	})
}

// execute runs req and answers with JSON, or with an event stream when
// the client accepts one.
func (s *Server) execute(ctx context.Context, req service.Request, accept string) (*huma.StreamResponse, error) {
	return s.stream(accept, func(onOutput func(stream, line string)) (any, error) {
		req.OnOutput = onOutput
		return s.svc.Execute(ctx, req)
	})
}

// stream runs run and answers with its result as JSON, or, when the
// client accepts an event stream, with its output lines as they come and
// then the result. The run never waits for the client (the service queues
// its lines); each write of the stream is bounded, so a client that stops
// reading loses its connection.
func (s *Server) stream(accept string, run func(onOutput func(stream, line string)) (any, error)) (*huma.StreamResponse, error) {
	if !strings.Contains(accept, "text/event-stream") {
		res, err := run(nil)
		if err != nil {
			return nil, problemFor(err)
		}
		return &huma.StreamResponse{Body: func(hc huma.Context) {
			hc.SetHeader("Content-Type", "application/json")
			hc.SetStatus(http.StatusOK)
			_ = json.NewEncoder(hc.BodyWriter()).Encode(res)
		}}, nil
	}
	return &huma.StreamResponse{Body: func(hc huma.Context) {
		_, w := humago.Unwrap(hc)
		w = streamwrite.Wrap(w, s.cfg.StreamWriteTimeout)
		ev := &eventWriter{w: w, rc: http.NewResponseController(w)}
		// The stream starts with the first line, or after a moment without
		// one: a request refused at once still gets a plain problem answer.
		timer := time.AfterFunc(time.Second, ev.start)
		defer timer.Stop()
		res, err := run(func(stream, line string) {
			ev.send(stream, StreamLine{Stream: stream, Line: strings.TrimSuffix(line, "\n")})
		})
		timer.Stop()
		if err != nil {
			if !ev.startedOrClaim() {
				writeProblem(w, problemFor(err))
				return
			}
			ev.send("error", problemFor(err))
			return
		}
		ev.send("result", res)
	}}, nil
}

// eventWriter writes server-sent events, one at a time, flushing each.
type eventWriter struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
	claimed bool // the answer is a problem document, not a stream
}

// start sends the stream's headers, once.
func (e *eventWriter) start() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.startLocked()
}

func (e *eventWriter) startLocked() {
	if e.started || e.claimed {
		return
	}
	e.started = true
	// A stream lasts as long as the run: the server's write timeout is for
	// ordinary answers; each write of the stream has its own (streamwrite).
	h := e.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	e.w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(e.w, ": running\n\n")
	_ = e.rc.Flush()
}

// startedOrClaim reports whether the stream has started; if not, it never
// will, and the caller answers otherwise.
func (e *eventWriter) startedOrClaim() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.started {
		e.claimed = true
	}
	return e.started
}

func (e *eventWriter) send(event string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		data = []byte(`{"error":"unencodable event"}`)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.startLocked()
	if e.claimed {
		return
	}
	fmt.Fprintf(e.w, "event: %s\ndata: %s\n\n", event, data)
	_ = e.rc.Flush()
}
