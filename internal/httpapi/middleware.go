package httpapi

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/api"
	"github.com/codecage/codecage/internal/frontdoor"
	"github.com/codecage/codecage/internal/service"
)

// publicPaths answer without an API key: liveness and readiness probes,
// and the API's own description.
func public(path string) bool {
	switch path {
	case "/health", "/ready", "/docs", "/openapi.json", "/openapi.yaml", "/openapi-3.0.json", "/openapi-3.0.yaml":
		return true
	}
	return strings.HasPrefix(path, "/docs/") || strings.HasPrefix(path, "/schemas/")
}

// bearer returns the token of an Authorization: Bearer header.
func bearer(r *http.Request) string {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

func surfaceOf(path string) string {
	if path == "/mcp" || strings.HasPrefix(path, "/mcp/") {
		return service.SurfaceMCP
	}
	return service.SurfaceREST
}

// wrap is every request's way in: it authenticates (when the server has
// keys), names the caller for the service, caps the body, and logs and
// counts the request once it is answered.
func (s *Server) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &frontdoor.Recorder{ResponseWriter: w}
		trace := &service.Trace{}
		c := service.Caller{Surface: surfaceOf(r.URL.Path), RemoteAddr: r.RemoteAddr, Trace: trace}
		inner := r
		if s.keys.Len() > 0 && !public(r.URL.Path) {
			name, ok := s.keys.Lookup(bearer(r))
			if !ok {
				s.unauthorized(rec, r, c)
				s.finish(rec, r, c, "", start)
				return
			}
			c.Key = name
		}
		if err := api.CheckLength(rec, r, s.cfg.MaxBodySize); err != nil {
			writeProblem(rec, problemFor(err))
			s.finish(rec, r, c, "", start)
			return
		}
		if r.Body != nil {
			r.Body = http.MaxBytesReader(rec, r.Body, s.cfg.MaxBodySize)
		}
		// The API speaks JSON only: a body sent as curl -d sends it (as a
		// form) is read as the JSON it is.
		if c.Surface == service.SurfaceREST && r.ContentLength != 0 {
			if ct := r.Header.Get("Content-Type"); ct == "" || strings.HasPrefix(ct, "application/x-www-form-urlencoded") {
				r.Header.Set("Content-Type", "application/json")
			}
		}
		if c.Surface == service.SurfaceREST && r.ContentLength != 0 && isJSON(r.Header.Get("Content-Type")) {
			if p := s.checkBody(rec, r); p != nil {
				writeProblem(rec, p)
				s.finish(rec, r, c, "", start)
				return
			}
		}
		inner = r.WithContext(service.WithCaller(r.Context(), c))
		next.ServeHTTP(rec, inner)
		s.finish(rec, inner, c, trace.ExecutionID, start)
	})
}

// checkBody reads a JSON body (within the body limit) and refuses it when
// a string in it is not valid Unicode: the decoder would quietly replace
// the bad bytes, and the code would fail as if the caller had sent other
// code. The body is put back for the route.
func (s *Server) checkBody(w http.ResponseWriter, r *http.Request) *Problem {
	body, err := api.ReadBody(w, r, s.cfg.MaxBodySize)
	if err == nil {
		err = api.CheckJSONText(body)
	}
	if err != nil {
		return problemFor(err)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return nil
}

// isJSON reports whether a Content-Type is JSON (application/json or a
// +json type).
func isJSON(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

func (s *Server) unauthorized(w http.ResponseWriter, r *http.Request, c service.Caller) {
	detail := "this server needs an API key: send Authorization: Bearer <key>"
	if bearer(r) != "" {
		detail = "the API key is not valid"
	}
	p := newProblem(http.StatusUnauthorized, KindUnauthorized, detail)
	p.headers.Set("WWW-Authenticate", `Bearer realm="codecage"`)
	writeProblem(w, p)
	s.svc.Report(service.WithCaller(r.Context(), c), service.Event{Kind: service.EventDenied, Outcome: KindUnauthorized,
		Detail: r.Method + " " + r.URL.Path + ": " + detail})
	if s.metrics != nil {
		s.metrics.Denied(KindUnauthorized)
	}
}

// finish logs the request and counts it.
func (s *Server) finish(rec *frontdoor.Recorder, r *http.Request, c service.Caller, execID string, start time.Time) {
	status := rec.Status
	if status == 0 {
		status = http.StatusOK
	}
	route := r.Pattern
	if route == "" {
		route = "unmatched"
	}
	if s.metrics != nil {
		s.metrics.HTTPRequest(route, status)
		if status == http.StatusRequestEntityTooLarge {
			s.metrics.Denied("too_large")
		}
	}
	level := slog.LevelInfo
	if r.URL.Path == "/health" || r.URL.Path == "/ready" || r.URL.Path == "/metrics" {
		level = slog.LevelDebug // probes and scrapes would drown the log
	}
	attrs := []slog.Attr{
		slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Int("status", status),
		slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
		slog.String("surface", c.Surface), slog.String("remote", r.RemoteAddr),
	}
	if c.Key != "" {
		attrs = append(attrs, slog.String("key", c.Key))
	}
	if execID != "" {
		attrs = append(attrs, slog.String("execution_id", execID))
	}
	s.log.LogAttrs(r.Context(), level, "request", attrs...)
}
