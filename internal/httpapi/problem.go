package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/danielgtaylor/huma/v2"

	"github.com/codecage/codecage/internal/access"
	"github.com/codecage/codecage/internal/api"
	"github.com/codecage/codecage/internal/service"
)

// ProblemTypePrefix starts the type URI of every problem document; the
// rest is the error kind (service.Kind*, or one of the HTTP layer's:
// unauthorized, not_found, method_not_allowed).
const ProblemTypePrefix = "urn:codecage:problem:"

// HTTP-layer error kinds.
const (
	KindUnauthorized     = "unauthorized"
	KindNotFound         = "not_found"
	KindMethodNotAllowed = "method_not_allowed"
)

// Problem is an RFC 9457 problem document. Type is stable for each kind of
// failure; Kind repeats its last part for clients that match on a word.
type Problem struct {
	Type       string              `json:"type" doc:"URI naming the kind of failure: urn:codecage:problem:<kind>."`
	Title      string              `json:"title"`
	Status     int                 `json:"status"`
	Detail     string              `json:"detail,omitempty"`
	Instance   string              `json:"instance,omitempty"`
	Kind       string              `json:"kind" doc:"The kind of failure, e.g. invalid_request, rate_limited, busy, session_not_found."`
	RetryAfter int                 `json:"retry_after,omitempty" doc:"Seconds to wait before retrying (also in the Retry-After header)."`
	Errors     []*huma.ErrorDetail `json:"errors,omitempty"`
	headers    http.Header
}

func (p *Problem) Error() string { return p.Detail }

// GetStatus is the HTTP status (huma.StatusError).
func (p *Problem) GetStatus() int { return p.Status }

// GetHeaders are headers sent with the problem (huma.HeadersError).
func (p *Problem) GetHeaders() http.Header { return p.headers }

// ContentType marks the body as a problem document.
func (p *Problem) ContentType(ct string) string {
	if ct == "application/json" {
		return "application/problem+json"
	}
	return ct
}

func newProblem(status int, kind, detail string) *Problem {
	return &Problem{Type: ProblemTypePrefix + kind, Title: http.StatusText(status), Status: status, Detail: detail, Kind: kind, headers: http.Header{}}
}

// problemFor turns a service error into a problem document.
func problemFor(err error) *Problem {
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	kind := service.ErrorKind(err)
	st := api.StatusOfKind(kind)
	p = newProblem(st.REST, kind, err.Error())
	if kind == service.KindCanceled {
		p.Detail = "the request was canceled"
	}
	if access.RetryAfter(err) > 0 || st.RESTRetry {
		p.setRetry(api.RetryAfter(err))
	}
	return p
}

func (p *Problem) setRetry(seconds int) {
	p.RetryAfter = seconds
	p.headers.Set("Retry-After", strconv.Itoa(p.RetryAfter))
}

// statusKind names huma's own errors (schema validation, body size,
// content negotiation) by status.
func statusKind(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusUnprocessableEntity, http.StatusUnsupportedMediaType, http.StatusNotAcceptable:
		return service.KindInvalidRequest
	case http.StatusRequestEntityTooLarge:
		return service.KindTooLarge
	case http.StatusNotFound:
		return KindNotFound
	case http.StatusMethodNotAllowed:
		return KindMethodNotAllowed
	case http.StatusUnauthorized:
		return KindUnauthorized
	}
	if status >= 500 {
		return service.KindInternal
	}
	return service.KindInvalidRequest
}

// useProblems makes huma build its errors as Problems.
func useProblems() {
	huma.NewError = func(status int, msg string, errs ...error) huma.StatusError {
		p := newProblem(status, statusKind(status), msg)
		for _, e := range errs {
			if e == nil {
				continue
			}
			if d, ok := e.(huma.ErrorDetailer); ok {
				p.Errors = append(p.Errors, d.ErrorDetail())
			} else {
				p.Errors = append(p.Errors, &huma.ErrorDetail{Message: e.Error()})
			}
		}
		return p
	}
}

// writeProblem writes p outside huma (middleware, streams, the mux).
func writeProblem(w http.ResponseWriter, p *Problem) {
	for k, v := range p.headers {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}
